// Package glob matches the bridge's target patterns (BRIDGE_TARGET_ALLOW,
// BRIDGE_TARGET_RATE): path.Match syntax, except that "*" matches any run of characters,
// dots and slashes included, in time linear in the pattern times the name.
package glob

import (
	"path"
	"strings"
	"unicode/utf8"
)

// globTok is one element of a compiled glob: a star, or a matcher of one character.
type globTok struct {
	star   bool
	any    bool      // "?"
	lit    rune      // literal when !star && !any && ranges == nil
	ranges [][2]rune // class "[...]"
	neg    bool      // "[^...]"
}

func (t globTok) matches(r rune) bool {
	switch {
	case t.any:
		return true
	case t.ranges != nil:
		in := false
		for _, rg := range t.ranges {
			if rg[0] <= r && r <= rg[1] {
				in = true
				break
			}
		}
		return in != t.neg
	}
	return r == t.lit
}

// Match reports whether name matches pattern, with path.Match syntax except that "*"
// also matches "/". A malformed pattern matches nothing. It runs in O(len(pattern) *
// len(name)) time: no exponential backtracking on hostile patterns.
func Match(pattern, name string) bool {
	if _, err := path.Match(pattern, ""); err != nil {
		return false
	}
	toks, ok := compileGlob(pattern)
	if !ok {
		return false
	}
	s := []rune(name)
	ti, si := 0, 0
	starTi, starSi := -1, 0
	for si < len(s) {
		switch {
		case ti < len(toks) && toks[ti].star:
			starTi, starSi = ti, si
			ti++
		case ti < len(toks) && toks[ti].matches(s[si]):
			ti++
			si++
		case starTi >= 0:
			starSi++
			ti, si = starTi+1, starSi
		default:
			return false
		}
	}
	for ti < len(toks) && toks[ti].star {
		ti++
	}
	return ti == len(toks)
}

// compileGlob turns a pattern (already accepted by path.Match) into tokens.
func compileGlob(p string) ([]globTok, bool) {
	var toks []globTok
	for p != "" {
		switch p[0] {
		case '*':
			toks = append(toks, globTok{star: true})
			p = p[1:]
		case '?':
			toks = append(toks, globTok{any: true})
			p = p[1:]
		case '[':
			p = p[1:]
			tok := globTok{ranges: [][2]rune{}}
			if p != "" && p[0] == '^' {
				tok.neg = true
				p = p[1:]
			}
			for {
				if p == "" {
					return nil, false
				}
				if p[0] == ']' && len(tok.ranges) > 0 {
					p = p[1:]
					break
				}
				var lo, hi rune
				var ok bool
				if lo, p, ok = globChar(p); !ok {
					return nil, false
				}
				hi = lo
				if p != "" && p[0] == '-' {
					if hi, p, ok = globChar(p[1:]); !ok {
						return nil, false
					}
				}
				tok.ranges = append(tok.ranges, [2]rune{lo, hi})
			}
			toks = append(toks, tok)
		default:
			r, rest, ok := globChar(p)
			if !ok && p[0] != ']' && p[0] != '-' {
				return nil, false
			}
			if !ok { // "]" and "-" are literals outside a class
				r, rest = rune(p[0]), p[1:]
			}
			toks = append(toks, globTok{lit: r})
			p = rest
		}
	}
	return toks, true
}

// globChar reads one possibly escaped character of a pattern.
func globChar(p string) (rune, string, bool) {
	if p == "" || p[0] == '-' || p[0] == ']' {
		return 0, p, false
	}
	if p[0] == '\\' {
		p = p[1:]
		if p == "" {
			return 0, p, false
		}
	}
	r, n := utf8.DecodeRuneInString(p)
	return r, p[n:], true
}

// Valid reports whether pattern is well formed (a malformed one matches nothing).
func Valid(pattern string) bool {
	if _, err := path.Match(pattern, ""); err != nil {
		return false
	}
	_, ok := compileGlob(pattern)
	return ok
}

// MatchTarget matches a target ("broker:name") as BRIDGE_TARGET_ALLOW, BRIDGE_TARGET_RATE
// and the message API's selectors do: a pattern with ":" against the whole target,
// others against the name.
func MatchTarget(pattern, target string) bool {
	if strings.IndexByte(pattern, ':') >= 0 {
		return Match(pattern, target)
	}
	_, name, _ := strings.Cut(target, ":")
	return Match(pattern, name)
}

// Literals returns the runs of literal characters of pattern, in order: every target that
// MatchTarget(pattern, target) accepts holds each of them, in that order and without
// overlap, so a store can skip, where the data lives, a target that lacks one (a
// prefilter: MatchTarget still decides). Nil for a malformed pattern or one without
// literals.
func Literals(pattern string) []string {
	if !Valid(pattern) {
		return nil
	}
	toks, _ := compileGlob(pattern)
	var out []string
	var run []rune
	flush := func() {
		if len(run) > 0 {
			out = append(out, string(run))
			run = run[:0]
		}
	}
	for _, t := range toks {
		if t.star || t.any || t.ranges != nil {
			flush()
			continue
		}
		run = append(run, t.lit)
	}
	flush()
	return out
}
