package delaystore

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestNextFiring: ending the firing of a recurring message parks it again in the same
// script: a new version, attempts 0, due at Next, out of the retry set, no tombstone; the
// old receipt is fenced, and it is not claimed before Next.
func TestNextFiring(t *testing.T) {
	f := setup(t)
	env := sampleEnvelope(3)
	env.SourceID, env.Every = "js:IN:5", "1s"
	f.park(t, ParkRequest{ID: "rec", Envelope: env})
	m, _ := f.claimID(t, "rec", time.Second)
	if _, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt, Backoff: time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	m, c := f.claimID(t, "rec", 2*time.Second) // the retried firing, attempts 1
	retryKey := fmt.Sprintf("{%s:%d}:r", f.prefix, m.Shard)
	if m.Attempts != 1 || f.rdb.ZScore(t.Context(), retryKey, "rec").Err() != nil {
		t.Fatalf("setup: attempts %d, in retry set: %v", m.Attempts, f.rdb.ZScore(t.Context(), retryKey, "rec").Err())
	}
	next := c.Now + 400
	r, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt, Next: next}})
	if err != nil || r.N != 1 || r.Heads[m.Shard] != next {
		t.Fatalf("next firing = %+v, %v; want 1 applied, head %d", r, err, next)
	}
	got, err := f.s.Get(t.Context(), "rec")
	if err != nil || got.Version <= m.Version || got.Attempts != 0 || got.Due != next || !reflect.DeepEqual(got.Envelope, env) {
		t.Fatalf("after the firing: %+v, %v (was version %d)", got, err, m.Version)
	}
	if err := f.rdb.ZScore(t.Context(), retryKey, "rec").Err(); err == nil {
		t.Fatal("still in the retry set")
	}
	if n := f.rdb.ZCard(t.Context(), f.tombKey("rec")).Val(); n != 0 {
		t.Fatalf("%d tombstones: the message lives on", n)
	}
	if again, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt, Next: next + 1000}}); err != nil || again.N != 0 {
		t.Fatalf("the old receipt again = %+v, %v; want fenced", again, err)
	}
	if a, err := f.s.Ack(t.Context(), []Receipt{m.Receipt}); err != nil || a.N != 0 {
		t.Fatalf("ack with the old receipt = %+v, %v; want fenced", a, err)
	}
	m2, c2 := f.claimID(t, "rec", 3*time.Second) // claimID fails on an early claim
	if m2.Due != next || m2.Version != got.Version || c2.Now < next {
		t.Fatalf("next firing claimed %+v at %d, want due %d", m2, c2.Now, next)
	}
}

// TestNextFiringAfterCancel: a recurring message cancelled while a firing is in flight
// stays cancelled: the firing's end parks nothing.
func TestNextFiringAfterCancel(t *testing.T) {
	f := setup(t)
	env := sampleEnvelope(4)
	env.Every = "1s"
	f.park(t, ParkRequest{ID: "stop", Envelope: env})
	m, c := f.claimID(t, "stop", time.Second)
	if ok, err := f.s.Cancel(t.Context(), "stop"); err != nil || !ok {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	r, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt, Next: c.Now + 1000}})
	if err != nil || r.N != 0 {
		t.Fatalf("next firing after cancel = %+v, %v; want nothing applied", r, err)
	}
	if _, err := f.s.Get(t.Context(), "stop"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after cancel and firing: %v", err)
	}
}
