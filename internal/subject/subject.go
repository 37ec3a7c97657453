// Package subject implements NATS subject wildcard semantics ("*" matches one token, a
// final ">" one or more), shared by the target policy, the configuration checks and the
// NATS adapter. Without wildcards, matching is equality, which is also what Kafka topic
// names need.
package subject

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Matches reports whether pattern matches subject, with NATS wildcard semantics:
// a `*` token matches exactly one token, a final `>` token matches one or more tokens.
//
// When subject itself contains wildcards, Matches reports whether pattern matches
// every concrete subject that subject matches (subject is a subset of pattern); this is
// what "a stream with subject pattern captures a subscription" means. Invalid subjects or
// patterns (empty, an empty token, `>` not in last position) match nothing.
func Matches(pattern, subject string) bool {
	if !valid(pattern) || !valid(subject) {
		return false
	}
	for {
		// Both have a token here.
		p, pRest, pMore := strings.Cut(pattern, ".")
		s, sRest, sMore := strings.Cut(subject, ".")
		switch {
		case p == ">":
			return true // one or more tokens, wildcards included
		case s == ">":
			return false // the subject goes on with any tokens; only `>` covers that
		case p != "*" && p != s:
			return false // a literal pattern token never covers `*`
		}
		if !pMore || !sMore {
			return pMore == sMore
		}
		pattern, subject = pRest, sRest
	}
}

// Overlap reports whether some concrete subject matches both patterns a and b
// (NATS wildcard semantics, as in [Matches]). Invalid patterns overlap nothing.
func Overlap(a, b string) bool {
	if !valid(a) || !valid(b) {
		return false
	}
	for {
		// Both have a token here.
		x, aRest, aMore := strings.Cut(a, ".")
		y, bRest, bMore := strings.Cut(b, ".")
		if x == ">" || y == ">" {
			return true // `>` absorbs whatever the other needs
		}
		if x != "*" && y != "*" && x != y {
			return false
		}
		if !aMore || !bMore {
			return aMore == bMore
		}
		a, b = aRest, bRest
	}
}

// valid reports whether a subject is well formed: not empty, no empty token, no
// whitespace, `>` only as the last token. It does not allocate.
func valid(subject string) bool {
	if subject == "" || strings.ContainsAny(subject, " \t\r\n") {
		return false
	}
	for {
		t, rest, more := strings.Cut(subject, ".")
		if t == "" || (t == ">" && more) {
			return false
		}
		if !more {
			return true
		}
		subject = rest
	}
}

// Check returns why s is not a valid NATS subject for one of the bridge's own names
// (ingress, cancel, dead-letter subjects), or "". With wildcards, "*" and ">" are allowed
// as whole tokens (">" last).
func Check(s string, wildcards bool) string {
	if s == "" {
		return "empty subject"
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "subject must not contain whitespace or control characters"
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return "subject has an empty token"
		case t == "*" || t == ">":
			if !wildcards {
				return "subject must not contain wildcards"
			}
			if t == ">" && i != len(toks)-1 {
				return "> must be the last token"
			}
		case strings.ContainsAny(t, "*>"):
			return "* and > may only be whole tokens"
		}
	}
	return ""
}
