package delaystore

import (
	"testing"
	"time"
)

// TestReserve: slots of a target follow each other one interval apart across calls (as
// from several replicas), start at the Redis time when the target is idle, stop at the
// horizon, and are independent per target; all targets share one key.
func TestReserve(t *testing.T) {
	f := setup(t)
	const iv = 10 * time.Millisecond
	a, err := f.s.Reserve(t.Context(), "nats:a", 5, iv, time.Second)
	if err != nil || a.Count != 5 || a.Interval != 10000 || a.First < a.Now || a.First-a.Now > 1000 {
		t.Fatalf("first reserve = %+v, %v", a, err)
	}
	b, err := f.s.Reserve(t.Context(), "nats:a", 5, iv, time.Second)
	if err != nil || b.Count != 5 || b.First != a.At(5) {
		t.Fatalf("second reserve = %+v, %v; want first slot %d", b, err, a.At(5))
	}
	c, err := f.s.Reserve(t.Context(), "nats:a", 1000, iv, time.Second)
	if err != nil || c.First != b.At(5) || c.Count < 80 || c.Count > 100 || c.At(c.Count-1) > c.Now+1_000_000 {
		t.Fatalf("reserve up to the horizon = %+v, %v", c, err)
	}
	if d, err := f.s.Reserve(t.Context(), "nats:a", 10, iv, time.Second); err != nil || d.Count > 1 {
		t.Fatalf("reserve with the horizon full = %+v, %v", d, err)
	}
	other, err := f.s.Reserve(t.Context(), "kafka:a", 3, iv, time.Second)
	if err != nil || other.Count != 3 || other.First-other.Now > 1000 {
		t.Fatalf("another target = %+v, %v", other, err)
	}
	keys, err := f.rdb.Keys(t.Context(), "{"+f.prefix+":rate}*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("rate keys %v, %v; want one", keys, err)
	}
	if _, err := f.s.Reserve(t.Context(), "nats:a", 0, iv, time.Second); err == nil {
		t.Fatal("0 slots accepted")
	}
}
