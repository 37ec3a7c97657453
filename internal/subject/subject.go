// Package subject implements NATS subject wildcard semantics ("*" matches one token, a
// final ">" one or more), shared by the target policy, the configuration checks and the
// NATS adapter. Without wildcards, matching is equality, which is also what Kafka topic
// names need.
package subject

import "strings"

// Matches reports whether pattern matches subject, with NATS wildcard semantics:
// a `*` token matches exactly one token, a final `>` token matches one or more tokens.
//
// When subject itself contains wildcards, Matches reports whether pattern matches
// every concrete subject that subject matches (subject is a subset of pattern); this is
// what "a stream with subject pattern captures a subscription" means. Invalid subjects or
// patterns (empty, an empty token, `>` not in last position) match nothing.
func Matches(pattern, subject string) bool {
	pt, ok := tokens(pattern)
	if !ok {
		return false
	}
	st, ok := tokens(subject)
	if !ok {
		return false
	}
	for i, p := range pt {
		if p == ">" {
			return len(st) > i // one or more tokens, wildcards included
		}
		if i >= len(st) {
			return false
		}
		s := st[i]
		switch {
		case s == ">":
			return false // the subject goes on with any tokens; only `>` covers that
		case p == "*":
			// covers a literal token or `*`
		case p != s:
			return false // a literal pattern token never covers `*`
		}
	}
	return len(pt) == len(st)
}

// Overlap reports whether some concrete subject matches both patterns a and b
// (NATS wildcard semantics, as in [Matches]). Invalid patterns overlap nothing.
func Overlap(a, b string) bool {
	at, ok := tokens(a)
	if !ok {
		return false
	}
	bt, ok := tokens(b)
	if !ok {
		return false
	}
	for i := 0; ; i++ {
		if i == len(at) || i == len(bt) {
			return len(at) == len(bt)
		}
		x, y := at[i], bt[i]
		if x == ">" || y == ">" {
			return true // both have a token here, and `>` absorbs whatever the other needs
		}
		if x != "*" && y != "*" && x != y {
			return false
		}
	}
}

// tokens splits a subject into its tokens and reports whether it is well formed: no
// empty token, no whitespace, `>` only as the last token.
func tokens(subject string) ([]string, bool) {
	if subject == "" || strings.ContainsAny(subject, " \t\r\n") {
		return nil, false
	}
	ts := strings.Split(subject, ".")
	for i, t := range ts {
		if t == "" || (t == ">" && i != len(ts)-1) {
			return nil, false
		}
	}
	return ts, true
}
