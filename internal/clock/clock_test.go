package clock

import (
	"testing"
	"time"
)

func TestParseOffset(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "  ": 0, "-30s": -30 * time.Second, " 1m ": time.Minute} {
		if got, err := ParseOffset(in); err != nil || got != want {
			t.Errorf("ParseOffset(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"30", "abc", "1x"} {
		if _, err := ParseOffset(bad); err == nil {
			t.Errorf("ParseOffset(%q): no error", bad)
		}
	}
}

func TestShifted(t *testing.T) {
	ahead := Shifted(time.Hour)
	if d := ahead().Sub(time.Now()); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("Shifted(1h) is %s ahead, want about 1h", d)
	}
	behind := Shifted(-30 * time.Second)
	if d := time.Since(behind()); d < 29*time.Second || d > 31*time.Second {
		t.Errorf("Shifted(-30s) is %s behind, want about 30s", d)
	}
	// Durations between two readings are unaffected.
	a := ahead()
	time.Sleep(10 * time.Millisecond)
	if d := ahead().Sub(a); d < 10*time.Millisecond || d > time.Second {
		t.Errorf("two readings of a shifted clock 10ms apart differ by %s", d)
	}
}
