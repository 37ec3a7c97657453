// Package clock is the bridge's local clock. cmd/bridge gets it from Local once and injects
// it into ingress, egress and the message API (their Config.Now): receipt times, lingers,
// and the scheduler's waits read it. Due times never come from it (Redis TIME decides
// them); lease fences and timeouts use the process clock (context deadlines).
//
// A binary built with `-tags failpoints` (the fault suite's) shifts the clock by
// DELAYBRIDGE_TEST_CLOCK_OFFSET, so a test can run replicas whose clocks disagree (row E3
// of docs/faults.md); a normal build ignores that variable.
package clock

import (
	"fmt"
	"strings"
	"time"
)

// OffsetEnv is the variable a failpoints build reads for a test-only offset of the local
// clock: a Go duration such as "-30s". libfaketime does not work on Go binaries, hence
// this hook.
const OffsetEnv = "DELAYBRIDGE_TEST_CLOCK_OFFSET"

// Shifted returns a clock d ahead of time.Now (behind when d is negative). The wall and
// the monotonic reading move alike, so durations between two readings are unaffected.
// The returned function is safe for concurrent use.
func Shifted(d time.Duration) func() time.Time {
	if d == 0 {
		return time.Now
	}
	return func() time.Time { return time.Now().Add(d) }
}

// ParseOffset reads a value of OffsetEnv: empty (or blanks) is 0, otherwise a Go duration.
func ParseOffset(v string) (time.Duration, error) {
	if strings.TrimSpace(v) == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%s: want a Go duration such as -30s: %w", OffsetEnv, err)
	}
	return d, nil
}
