package glob

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "", true},
		{"*", "a.b/c:d", true},
		{"a*", "a", true},
		{"a*", "ab.c.d", true},
		{"*.timeout", "orders.eu.timeout", true},
		{"*.timeout", "timeout", false},
		{"a?c", "abc", true},
		{"a?c", "a.c", true},
		{"a?c", "ac", false},
		{"a?c", "aöc", true}, // one character, two bytes
		{"[a-c]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[^a-c]x", "bx", false},
		{"[^a-c]x", "dx", true},
		{"[abc]", "c", true},
		{"[\\]]", "]", true},
		{"\\*", "*", true},
		{"\\*", "a", false},
		{"\\?", "?", true},
		{"a]", "a]", true},
		{"a-b", "a-b", true},
		{"[", "[", false},     // malformed
		{"a\\", "a\\", false}, // malformed
		{"[]a]", "]", false},  // malformed
		{"nats:*", "nats:x", true},
		{"nats:orders.*", "kafka:orders.x", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"*a*a*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 300), false},
		{"**", "x", true},
		{"abc", "abcd", false},
		{"abc", "ab", false},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.name); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
		// Without "/" in the name, the semantics are path.Match's.
		if !strings.Contains(tt.name, "/") {
			if want, _ := path.Match(tt.pattern, tt.name); want != tt.want {
				t.Errorf("path.Match(%q, %q) = %v, test wants %v", tt.pattern, tt.name, want, tt.want)
			}
		}
	}
}

// TestGlobMatchHostilePatternIsFast: no exponential backtracking.
func TestGlobMatchHostilePatternIsFast(t *testing.T) {
	start := time.Now()
	pat := strings.Repeat("*a", 100) + "*b"
	name := strings.Repeat("a", 255)
	for i := 0; i < 10; i++ {
		if Match(pat, name) {
			t.Fatal("matched")
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v", d)
	}
}

// Literals: the literal runs of a pattern, escapes resolved; every target the pattern
// matches holds them in order (checked on the cases of TestGlobMatch's kind).
func TestLiterals(t *testing.T) {
	for pattern, want := range map[string][]string{
		"orders.t42":          {"orders.t42"},
		"nats:orders.*":       {"nats:orders."},
		"*.timeout":           {".timeout"},
		"a*b?c[xy]d":          {"a", "b", "c", "d"},
		`a\*b`:                {"a*b"},
		"*":                   nil,
		"[":                   nil,
		"kafka:billing.*.eu*": {"kafka:billing.", ".eu"},
	} {
		if got := Literals(pattern); !slices.Equal(got, want) {
			t.Errorf("Literals(%q) = %q, want %q", pattern, got, want)
		}
	}
	targets := []string{"nats:orders.t42", "kafka:billing.x.eu-1", "nats:a*b", "nats:aXbYcxd", "kafka:orders.timeout"}
	for _, pattern := range []string{"orders.t42", "nats:orders.*", "*.timeout", "a*b?c[xy]d", `a\*b`, "kafka:billing.*.eu*", "*t4*"} {
		for _, target := range targets {
			if !MatchTarget(pattern, target) {
				continue
			}
			rest := target
			for _, l := range Literals(pattern) {
				i := strings.Index(rest, l)
				if i < 0 {
					t.Fatalf("%q matches %q but lacks literal %q in order", pattern, target, l)
				}
				rest = rest[i+len(l):]
			}
		}
	}
}

// TestCompiledMatchesLikeMatch: a compiled pattern matches as Match does, and Literals
// of the two agree.
func TestCompiledMatchesLikeMatch(t *testing.T) {
	names := []string{"", "a", "orders.eu.timeout", "nats:x", "kafka:orders.x", "aöc", "a/b", strings.Repeat("a", 300)}
	for _, pattern := range []string{"*", "a*", "*.timeout", "a?c", "[a-c]x", "nats:*", "a*b*c", `\*`, "**", "*a*a*a*b"} {
		p, err := Compile(pattern)
		if err != nil {
			t.Fatalf("Compile(%q): %v", pattern, err)
		}
		for _, name := range names {
			if p.Match(name) != Match(pattern, name) || p.MatchTarget(name) != MatchTarget(pattern, name) {
				t.Errorf("%q on %q: compiled and Match differ", pattern, name)
			}
		}
		if !slices.Equal(p.Literals(), Literals(pattern)) {
			t.Errorf("Literals(%q) differ", pattern)
		}
	}
	for _, bad := range []string{"[", `a\`, "[]a]"} {
		if _, err := Compile(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Compile(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

// TestCompileSelectorBounds: docs/contract.md section 8, at most 256 bytes and 16 "*";
// an escaped "\*" is a literal, not a star.
func TestCompileSelectorBounds(t *testing.T) {
	ok := []string{strings.Repeat("a", MaxSelectorBytes), strings.Repeat("*", MaxSelectorStars),
		strings.Repeat("*a", MaxSelectorStars) + strings.Repeat("b", MaxSelectorBytes-2*MaxSelectorStars), strings.Repeat(`\*`, 20)}
	for _, p := range ok {
		if _, err := CompileSelector(p); err != nil {
			t.Errorf("CompileSelector(%d bytes) = %v", len(p), err)
		}
	}
	tooLong := []string{strings.Repeat("a", MaxSelectorBytes+1), strings.Repeat("*", MaxSelectorStars+1),
		strings.Repeat("*", 10000), strings.Repeat("*a", MaxSelectorStars+1)}
	for _, p := range tooLong {
		if _, err := CompileSelector(p); !errors.Is(err, ErrTooLong) {
			t.Errorf("CompileSelector(%d bytes) = %v, want ErrTooLong", len(p), err)
		}
	}
	if _, err := CompileSelector("["); !errors.Is(err, ErrMalformed) {
		t.Errorf("CompileSelector(\"[\") = %v, want ErrMalformed", err)
	}
}

// TestSelectorWorkBound: the worst selectors the bounds allow, against the longest
// targets (a 255-byte NATS subject behind "nats:"), take at most (tokens+1) x
// (name+1) steps each: bounded work per entry, so a bulk chunk of 500 entries is bounded
// work and a request's time budget, checked between chunks, holds. Steps, not time.
func TestSelectorWorkBound(t *testing.T) {
	names := []string{"nats:" + strings.Repeat("a", 255), strings.Repeat("a", 260), strings.Repeat("ab", 130)}
	rest := MaxSelectorBytes - 2*MaxSelectorStars - 1
	patterns := []string{
		strings.Repeat("*a", MaxSelectorStars) + strings.Repeat("a", rest) + "b",
		strings.Repeat("a*", MaxSelectorStars) + strings.Repeat("?", rest) + "b",
		strings.Repeat("*", MaxSelectorStars-1) + strings.Repeat("[a-z]", 40) + "*c",
	}
	worst := 0
	for _, pattern := range patterns {
		p, err := CompileSelector(pattern)
		if err != nil {
			t.Fatalf("CompileSelector(%q): %v", pattern, err)
		}
		for _, name := range names {
			_, steps := p.match(name)
			if bound := (len(p.toks) + 1) * (len(name) + 1); steps > bound {
				t.Errorf("%d-token pattern on %d bytes: %d steps, bound %d", len(p.toks), len(name), steps, bound)
			}
			worst = max(worst, steps)
		}
	}
	t.Logf("worst case: %d steps per entry, %d per bulk chunk of 500", worst, 500*worst)
}

// BenchmarkSelectorWorstCase: one match of the worst selector the bounds allow against
// the longest target.
func BenchmarkSelectorWorstCase(b *testing.B) {
	p, err := CompileSelector(strings.Repeat("*a", MaxSelectorStars) + strings.Repeat("a", MaxSelectorBytes-2*MaxSelectorStars-1) + "b")
	if err != nil {
		b.Fatal(err)
	}
	name := "nats:" + strings.Repeat("a", 255)
	b.ReportAllocs()
	for b.Loop() {
		p.MatchTarget(name)
	}
}
