package glob

import (
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
