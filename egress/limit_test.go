package egress

import (
	"testing"
	"time"
)

// TestLimiterFlowingTarget: a target that has not confirmed anything is held to the
// limit (a hanging target); one that confirmed within putBackMin may have flowingFactor
// times as many in flight (a healthy burst is not put back); once it stops confirming
// for putBackMin it is held to the limit again; idle targets are forgotten.
func TestLimiterFlowingTarget(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(10, func() time.Time { return now })
	if got, wait := l.acquire("a", 50); got != 10 || wait != putBackMin {
		t.Fatalf("new target: got %d wait %s, want 10 and %s", got, wait, putBackMin)
	}
	l.release("a", 10, true) // confirmed: flowing
	now = now.Add(10 * time.Millisecond)
	if got, _ := l.acquire("a", 500); got != 10*flowingFactor {
		t.Fatalf("flowing target: got %d, want %d", got, 10*flowingFactor)
	}
	now = now.Add(putBackMin) // no confirmation since: hanging
	if got, wait := l.acquire("a", 5); got != 0 || wait < putBackMin {
		t.Fatalf("stalled target over its limit: got %d wait %s, want 0 and >= %s", got, wait, putBackMin)
	}
	l.release("a", 10*flowingFactor, false)
	if got, _ := l.acquire("a", 50); got != 10 {
		t.Fatalf("stalled target, drained: got %d, want the narrow limit 10", got)
	}
	l.release("a", 10, false)
	l.acquire("b", 1)
	l.release("b", 1, true)
	now = now.Add(2 * putBackMin)
	l.acquire("c", 1) // sweeps
	if _, ok := l.targets["b"]; ok {
		t.Fatal("an idle target was kept after putBackMin")
	}
}
