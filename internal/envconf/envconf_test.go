package envconf

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 8760 * time.Hour: "8760h", 90 * time.Minute: "1h30m", time.Minute: "1m", 25 * time.Second: "25s",
		time.Hour + 500*time.Millisecond: "1h0m0.5s", 1500 * time.Millisecond: "1.5s", -time.Hour: "-1h",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestQuote(t *testing.T) {
	if got := Quote("a\"b"); got != `"a\"b"` {
		t.Errorf("Quote = %s", got)
	}
	long := string(make([]byte, 70))
	if got := Quote(long); len(got) < 4 || got[len(got)-3:] != "..." {
		t.Errorf("Quote of 70 bytes = %s, want a cut ending in ...", got)
	}
}

func TestProblems(t *testing.T) {
	var ps Problems
	if !ps.PositiveDuration("A", time.Second, time.Millisecond) || len(ps) != 0 {
		t.Fatalf("1s >= 1ms refused: %v", ps)
	}
	ps.PositiveDuration("B", 0, time.Millisecond)
	ps.PositiveDuration("C", time.Microsecond, time.Millisecond)
	ps.Add("D", "%d: odd", 3)
	want := []string{"B: 0s: must be > 0", "C: 1µs: must be at least 1ms", "D: 3: odd"}
	if len(ps) != len(want) {
		t.Fatalf("got %v", ps)
	}
	for i, p := range ps {
		if p.Error() != want[i] {
			t.Errorf("problem %d = %q, want %q", i, p.Error(), want[i])
		}
	}
}
