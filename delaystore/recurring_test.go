package delaystore

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
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

// TestBulkCancelStopsFiringRecurring (issue 23 item 3): a bulk cancel stops recurring
// messages whose firing is in delivery, and counts them as changed: the entry is gone,
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
	res, err := f.s.Bulk(t.Context(), Selector{Match: func(string) bool { return true }}, BulkOp{Kind: BulkCancel}, false, nil, time.Minute)
	if err != nil || res.Matched != 2 || res.Changed != 1 {
		t.Fatalf("bulk cancel = %+v, %v; want 2 matched, 1 changed (the recurring one)", res, err)
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
	v := strconv.FormatInt(raced.Version, 10)
	if n, _, _, err := f.s.bulkChange(t.Context(), raced.Shard, BulkOp{Kind: BulkCancel}, []any{"raced", v, "nats:other"}, nil); err != nil || n != 0 {
		t.Fatalf("cancel read for another target = %d, %v; want left alone", n, err)
	}
	if n, _, _, err := f.s.bulkChange(t.Context(), raced.Shard, BulkOp{Kind: BulkShift, Shift: time.Hour}, []any{"raced", v, "nats:tick"}, nil); err != nil || n != 0 {
		t.Fatalf("shift of an older version = %d, %v; want fenced", n, err)
	}
	if n, _, _, err := f.s.bulkChange(t.Context(), raced.Shard, BulkOp{Kind: BulkCancel}, []any{"raced", v, f.s.targetKey(raced.Shard, "nats:tick")}, nil); err != nil || n != 1 {
		t.Fatalf("cancel of the occurrence parked since the scan = %d, %v; want 1", n, err)
	}
	if _, err := f.s.Get(t.Context(), "raced"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("next occurrence after the cancel: %v", err)
	}
	if z, m := f.counts(t); z != 1 || m != 1 {
		t.Fatalf("store holds z %d, m %d; want only the one-shot message", z, m)
	}
}

// TestBulkCancelPassFence: a cancel pass picks entries newer than its fence (the shard's
// version when the pass began) only when they are recurring messages that re-parked
// themselves (a firing renews the version): a one-shot message parked after the pass
// began is left alone and not matched, as by every bulk change.
func TestBulkCancelPassFence(t *testing.T) {
	f := setup(t)
	park := func(id, every string, delay time.Duration) Message {
		env := sampleEnvelope(2)
		env.Target, env.Every, env.Headers = "nats:tick", every, nil
		f.park(t, ParkRequest{ID: id, Replace: true, Delay: delay, Envelope: env})
		m, err := f.s.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	rec := park("rec", "1s", 0)
	// The pass over rec's shard begins now: its fence is the shard's version counter.
	cur := BulkCursor{Shard: rec.Shard, Pass: "z"}
	if err := f.s.bulkBegin(t.Context(), &cur); err != nil {
		t.Fatal(err)
	}
	// rec fires and re-parks itself (a newer version) before the scan reaches it; a
	// one-shot message of the same shard is parked after the pass began.
	claimed, c := f.claimID(t, "rec", time.Second)
	if r, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: claimed.Receipt, Next: c.Now + 60_000}}); err != nil || r.N != 1 {
		t.Fatalf("re-park: %+v, %v", r, err)
	}
	late := ""
	for i := 0; late == ""; i++ {
		if id := "late-" + strconv.Itoa(i); ShardOf(id, len(f.s.keys)) == rec.Shard {
			late = id
		}
	}
	park(late, "", time.Hour)
	res, err := f.s.Bulk(t.Context(), Selector{Match: func(string) bool { return true }}, BulkOp{Kind: BulkCancel}, false, &cur, time.Minute)
	if err != nil || res.Matched != 1 || res.Changed != 1 {
		t.Fatalf("cancel pass = %+v, %v; want the re-parked recurring message alone matched and changed", res, err)
	}
	if _, err := f.s.Get(t.Context(), "rec"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("re-parked recurring message after the cancel: %v", err)
	}
	if _, err := f.s.Get(t.Context(), late); err != nil {
		t.Fatalf("one-shot message parked after the pass began: %v; want left alone", err)
	}
}
