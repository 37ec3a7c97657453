// Package glob matches the bridge's target patterns (BRIDGE_TARGET_ALLOW,
// BRIDGE_TARGET_RATE): path.Match syntax, except that "*" matches any run of characters,
// dots and slashes included, in time linear in the pattern times the name.
package glob

import (
	"errors"
	"fmt"
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
// len(name)) time: no exponential backtracking on hostile patterns. It compiles pattern
// on every call: to match one pattern against many names, [Compile] it once.
func Match(pattern, name string) bool {
	p, err := Compile(pattern)
	return err == nil && p.Match(name)
}

// ErrMalformed is wrapped by the errors of [Compile] and [CompileSelector] for a pattern
// that is not well formed.
var ErrMalformed = errors.New("malformed glob")

// ErrTooLong is wrapped by the error of [CompileSelector] for a pattern over the bounds.
var ErrTooLong = errors.New("selector too long")

// Selector bounds (docs/contract.md section 8): a target selector of the message API is
// at most MaxSelectorBytes bytes with at most MaxSelectorStars "*".
const (
	MaxSelectorBytes = 256
	MaxSelectorStars = 16
)

// Pattern is a compiled glob. Its methods only read it: safe for concurrent use.
type Pattern struct {
	toks  []globTok
	colon bool // the pattern holds ":": MatchTarget matches broker:name
	stars int
}

// Compile checks pattern (path.Match syntax, "*" matching any run of characters) and
// compiles it; a malformed pattern is an error wrapping ErrMalformed.
func Compile(pattern string) (*Pattern, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrMalformed, pattern, err)
	}
	toks, ok := compileGlob(pattern)
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrMalformed, pattern)
	}
	p := &Pattern{toks: toks, colon: strings.IndexByte(pattern, ':') >= 0}
	for _, t := range toks {
		if t.star {
			p.stars++
		}
	}
	return p, nil
}

// CompileSelector is Compile for a target selector of the message API, bounded as
// docs/contract.md section 8 says: more than MaxSelectorBytes bytes or MaxSelectorStars
// "*" is an error wrapping ErrTooLong (the work of one match grows with the pattern).
func CompileSelector(pattern string) (*Pattern, error) {
	if len(pattern) > MaxSelectorBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d are taken", ErrTooLong, len(pattern), MaxSelectorBytes)
	}
	p, err := Compile(pattern)
	if err != nil {
		return nil, err
	}
	if p.stars > MaxSelectorStars {
		return nil, fmt.Errorf("%w: %d \"*\", at most %d are taken", ErrTooLong, p.stars, MaxSelectorStars)
	}
	return p, nil
}

// Match reports whether name matches p, in O(len(pattern) * len(name)) steps and without
// allocating.
func (p *Pattern) Match(name string) bool {
	ok, _ := p.match(name)
	return ok
}

// match is Match that also counts its steps (one per character compared or skipped), so
// tests can check the work bound.
func (p *Pattern) match(s string) (bool, int) {
	toks := p.toks
	steps := 0
	ti, si := 0, 0
	starTi, starSi := -1, 0
	for si < len(s) {
		steps++
		r, n := utf8.DecodeRuneInString(s[si:])
		switch {
		case ti < len(toks) && toks[ti].star:
			starTi, starSi = ti, si
			ti++
		case ti < len(toks) && toks[ti].matches(r):
			ti++
			si += n
		case starTi >= 0:
			_, sn := utf8.DecodeRuneInString(s[starSi:])
			starSi += sn
			ti, si = starTi+1, starSi
		default:
			return false, steps
		}
	}
	for ti < len(toks) && toks[ti].star {
		ti++
	}
	return ti == len(toks), steps
}

// MatchTarget matches a target ("broker:name") as BRIDGE_TARGET_ALLOW, BRIDGE_TARGET_RATE
// and the message API's selectors do: a pattern with ":" against the whole target,
// others against the name.
func (p *Pattern) MatchTarget(target string) bool {
	if !p.colon {
		_, target, _ = strings.Cut(target, ":")
	}
	return p.Match(target)
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
	_, err := Compile(pattern)
	return err == nil
}

// MatchTarget matches a target ("broker:name") as BRIDGE_TARGET_ALLOW, BRIDGE_TARGET_RATE
// and the message API's selectors do: a pattern with ":" against the whole target,
// others against the name. It compiles pattern on every call (see [Pattern.MatchTarget]).
func MatchTarget(pattern, target string) bool {
	p, err := Compile(pattern)
	return err == nil && p.MatchTarget(target)
}

// Literals returns the runs of literal characters of pattern, in order: every target that
// MatchTarget(pattern, target) accepts holds each of them, in that order and without
// overlap, so a store can skip, where the data lives, a target that lacks one (a
// prefilter: MatchTarget still decides). Nil for a malformed pattern or one without
// literals.
func Literals(pattern string) []string {
	p, err := Compile(pattern)
	if err != nil {
		return nil
	}
	return p.Literals()
}

// Literals is [Literals] of the compiled pattern.
func (p *Pattern) Literals() []string {
	var out []string
	var run []rune
	flush := func() {
		if len(run) > 0 {
			out = append(out, string(run))
			run = run[:0]
		}
	}
	for _, t := range p.toks {
		if t.star || t.any || t.ranges != nil {
			flush()
			continue
		}
		run = append(run, t.lit)
	}
	flush()
	return out
}

// Rule is one item "<glob>=<value>" of a per-target setting (BRIDGE_TARGET_RATE,
// BRIDGE_TARGET_QUOTA): Value as written, trimmed.
type Rule struct {
	Pattern string
	Value   string
}

// ParseRules reads a per-target setting: comma-separated "<glob>=<value>" (blank items
// ignored; "" is no rule), each pattern well formed and each value accepted by check (its
// error is reported with the item, want says what a value looks like). The first rule
// whose pattern matches a target applies to it ([FirstMatch]).
func ParseRules(s, want string, check func(value string) error) ([]Rule, error) {
	var rules []Rule
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		pat, val, ok := strings.Cut(item, "=")
		pat, val = strings.TrimSpace(pat), strings.TrimSpace(val)
		switch {
		case !ok || pat == "":
			return nil, fmt.Errorf("%q: want <glob>=%s", item, want)
		case !Valid(pat):
			return nil, fmt.Errorf("%q: malformed pattern %q", item, pat)
		}
		if err := check(val); err != nil {
			return nil, fmt.Errorf("%q: %w", item, err)
		}
		rules = append(rules, Rule{Pattern: pat, Value: val})
	}
	return rules, nil
}

// FirstMatch returns the index of the first of pats that matches target ("broker:name",
// as [Pattern.MatchTarget]), -1 when none does.
func FirstMatch(pats []*Pattern, target string) int {
	for i, p := range pats {
		if p.MatchTarget(target) {
			return i
		}
	}
	return -1
}
