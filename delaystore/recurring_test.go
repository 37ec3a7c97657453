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
	if n := f.tombstones(t, "rec"); n != 0 {
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
// stays cancelled: the cancel answers in delivery with Stopped (the firing may still be
// published), and the firing's end parks nothing.
func TestNextFiringAfterCancel(t *testing.T) {
	f := setup(t)
	env := sampleEnvelope(4)
	env.Every = "1s"
	f.park(t, ParkRequest{ID: "stop", Envelope: env})
	m, c := f.claimID(t, "stop", time.Second)
	var busy *InDeliveryError
	if ok, err := f.s.Cancel(t.Context(), "stop"); ok || !errors.As(err, &busy) || !busy.Stopped {
		t.Fatalf("cancel = %v, %v; want an InDeliveryError with Stopped", ok, err)
	}
	r, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt, Next: c.Now + 1000}})
	if err != nil || r.N != 0 {
		t.Fatalf("next firing after cancel = %+v, %v; want nothing applied", r, err)
	}
	if _, err := f.s.Get(t.Context(), "stop"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after cancel and firing: %v", err)
	}
}

// TestBulkCancelStopsFiringRecurring: a bulk cancel (Change) stops recurring messages
// whose firing is in delivery, and counts them as changed: the entry is gone,
// so the firing's end parks nothing (retry.lua mode n is fenced out). The same holds for
// the next occurrence that a firing parked between the scan and the change (a newer
// version, same target). A one-shot message in delivery is still left alone (section 8),
// and so is a recurring one replaced by a message for another target.
func TestBulkCancelStopsFiringRecurring(t *testing.T) {
	f := setup(t)
	park := func(id, target, every string) {
		env := sampleEnvelope(2)
		env.Target, env.Every, env.Headers = target, every, nil
		if every != "" {
			env.Misfire = "skip" // the schedule is the last meta header, whatever comes before it
		}
		f.park(t, ParkRequest{ID: id, Replace: true, Envelope: env})
	}
	park("rec", "nats:tick", "1s")
	park("once", "nats:tick", "")
	rec, c := f.claimID(t, "rec", time.Second)
	once, _ := f.claimID(t, "once", time.Second)
	if n := f.changeAll(t, BulkOp{Kind: BulkCancel}, nil); n != 1 {
		t.Fatalf("bulk cancel changed %d; want the recurring one", n)
	}
	if r, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: rec.Receipt, Next: c.Now + 1000}}); err != nil || r.N != 0 {
		t.Fatalf("the firing's end after the cancel = %+v, %v; want fenced", r, err)
	}
	if _, err := f.s.Get(t.Context(), "rec"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("recurring message after bulk cancel and firing: %v", err)
	}
	if m, err := f.s.Get(t.Context(), "once"); err != nil || m.Version != once.Version {
		t.Fatalf("one-shot message in delivery: %+v, %v; want left alone", m, err)
	}

	// The firing ends between the scan (which read version v) and the change.
	park("raced", "nats:tick", "1s")
	raced, c := f.claimID(t, "raced", time.Second)
	if r, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: raced.Receipt, Next: c.Now + 60_000}}); err != nil || r.N != 1 {
		t.Fatalf("set-up: %+v, %v", r, err)
	}
	read := func(target string) []Pick { return []Pick{{ID: "raced", Version: raced.Version, target: target}} }
	if c, err := f.s.Change(t.Context(), raced.Shard, BulkOp{Kind: BulkCancel}, read("nats:other"), nil); err != nil || c.N != 0 {
		t.Fatalf("cancel read for another target = %+v, %v; want left alone", c, err)
	}
	if c, err := f.s.Change(t.Context(), raced.Shard, BulkOp{Kind: BulkShift, Shift: time.Hour, MaxDelay: 24 * time.Hour}, read("nats:tick"), nil); err != nil || c.N != 0 {
		t.Fatalf("shift of an older version = %+v, %v; want fenced", c, err)
	}
	if c, err := f.s.Change(t.Context(), raced.Shard, BulkOp{Kind: BulkCancel}, read(f.s.targetKey(raced.Shard, "nats:tick")), nil); err != nil || c.N != 1 {
		t.Fatalf("cancel of the occurrence parked since the scan = %+v, %v; want 1", c, err)
	}
	if _, err := f.s.Get(t.Context(), "raced"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("next occurrence after the cancel: %v", err)
	}
	if z, m := f.counts(t); z != 1 || m != 1 {
		t.Fatalf("store holds z %d, m %d; want only the one-shot message", z, m)
	}
}
