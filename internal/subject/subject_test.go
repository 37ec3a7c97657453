package subject

import "testing"

func TestMatches(t *testing.T) {
	tests := []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.b", "a.b.c", false},
		{"a.b.c", "a.b", false},
		{"a.*", "a.b", true},
		{"a.*", "a", false},
		{"a.*", "a.b.c", false},
		{"*.b", "a.b", true},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c.d", true},
		{"a.>", "a", false},
		{">", "a", true},
		{">", "a.b.c", true},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.b.d", false},
		{"delay.in", "delay.in", true},
		{"Delay.in", "delay.in", false}, // subjects are case-sensitive
		{"a*", "ab", false},             // a partial wildcard is a literal token
		{"a*", "a*", true},
		// wildcard subjects: pattern must cover all of them
		{"a.*", "a.*", true},
		{"a.>", "a.*", true},
		{"a.>", "a.>", true},
		{"a.*", "a.>", false},
		{"a.b", "a.*", false},
		{">", "a.>", true},
		{"*.>", "a.>", true},
		{"*", ">", false},
		{"a.*.>", "a.b.>", true},
		{"a.*.>", "a.>", false},
		// invalid input
		{"", "a", false},
		{"a", "", false},
		{"a..b", "a..b", false},
		{"a.>.b", "a.x.b", false},
		{"a.b.", "a.b.", false},
		{"a b", "a b", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" ~ "+tt.subject, func(t *testing.T) {
			if got := Matches(tt.pattern, tt.subject); got != tt.want {
				t.Fatalf("Matches(%q, %q) = %v, want %v", tt.pattern, tt.subject, got, tt.want)
			}
		})
	}
}

func TestOverlap(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.*", "a.b", true},
		{"a.*", "*.b", true},
		{"a.*", "b.*", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{"a.>", "*.x.y", true},
		{"a.*", "a.b.c", false},
		{"a.*", "a.>", true},
		{">", "x", true},
		{">", "x.y.z", true},
		{"*", "x.y", false},
		{"*.*", "x.>", true},
		{"a.*.c", "a.b.*", true},
		{"a.*.c", "a.b.d", false},
		{"delay.>", "delay.in", true},
		{"delay.in", "delay.dlq", false},
		{"", "a", false},
		{"a..b", "a.*.b", false},
		{"a.>.b", "a.x.b", false},
		{"a.>", "a.b", true},
		{">", "a", true},
		{">", "a.b.c", true},
		{"*", "a", true},
		{"*", "a.b", false},
		{"*.b", "a.c", false},
		{"a.*.c", "a.>", true},
		{"a.*.c", "a.b", false},
		{"a.b", "a.b.c", false},
		{"*.*", ">", true},
		{"*.>", "a", false},
		{"delay.>", "delay", false},
		{"a.>", "b.>", false},
		{"a.>", "*.b", true},
		{"a", "a", true},
		{"a", "b", false},
	}
	for _, tt := range tests {
		t.Run(tt.a+" ~ "+tt.b, func(t *testing.T) {
			if got := Overlap(tt.a, tt.b); got != tt.want {
				t.Fatalf("Overlap(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
			if got := Overlap(tt.b, tt.a); got != tt.want {
				t.Fatalf("Overlap(%q, %q) = %v, want %v (not symmetric)", tt.b, tt.a, got, tt.want)
			}
		})
	}
}
