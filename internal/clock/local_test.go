package clock

import (
	"testing"
	"time"
)

// TestLocal: a normal build ignores OffsetEnv; a failpoints build shifts by it and refuses
// a malformed value (the fault suite runs this package with -tags failpoints too).
func TestLocal(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == OffsetEnv {
				return v
			}
			return ""
		}
	}
	now, err := Local(env("-1h"))
	if err != nil {
		t.Fatal(err)
	}
	lag := time.Since(now())
	_, badErr := Local(env("banana"))
	if failpointsBuild {
		if lag < 59*time.Minute {
			t.Errorf("failpoints build: clock %s behind, want 1h", lag)
		}
		if badErr == nil {
			t.Error("failpoints build: a malformed offset was accepted")
		}
		return
	}
	if lag > time.Minute || lag < -time.Minute {
		t.Errorf("normal build: clock %s behind, want the process clock", lag)
	}
	if badErr != nil {
		t.Errorf("normal build: %v (the variable must be ignored)", badErr)
	}
}
