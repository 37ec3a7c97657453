package admin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

func targetIs(prefix string) func(string) bool {
	return func(t string) bool { return strings.HasPrefix(t, prefix) }
}

// parkFor parks ids with target at the absolute due time at.
func (f *fixture) parkFor(t *testing.T, target string, at int64, ids ...string) {
	t.Helper()
	var reqs []delaystore.ParkRequest
	for _, id := range ids {
		env := sampleEnvelope(0)
		env.Target, env.SourceID = target, "js:IN:"+id
		reqs = append(reqs, delaystore.ParkRequest{ID: id, Replace: true, Absolute: true, At: at, Envelope: env})
	}
	f.park(t, reqs...)
}

func names(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// TestBulkSelectAndChange: the selector picks by target and stored due; dry run counts
// only; shift moves each picked message once with a new version; cancel deletes and
// leaves tombstones; deliver-now makes them due at once.
func TestBulkSelectAndChange(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	hour := int64(time.Hour / time.Millisecond)
	f.parkFor(t, "nats:a.x", now+hour, names("a1", 10)...)
	f.parkFor(t, "nats:b.x", now+hour, names("b1", 10)...)
	f.parkFor(t, "nats:a.y", now+2*hour, names("a2", 10)...)
	sel := Selector{Match: targetIs("nats:a"), DueFrom: now + hour/2, DueTo: now + 3*hour/2}

	res, err := f.a.Bulk(t.Context(), sel, delaystore.BulkOp{Kind: delaystore.BulkShift, Shift: time.Hour, MaxDelay: 24 * time.Hour}, true, nil, time.Minute)
	if err != nil || res.Matched != 10 || res.Changed != 0 || res.Next != nil {
		t.Fatalf("dry run = %+v, %v", res, err)
	}
	before, _ := f.s.Get(t.Context(), "a1-0")
	res, err = f.a.Bulk(t.Context(), sel, delaystore.BulkOp{Kind: delaystore.BulkShift, Shift: time.Hour, MaxDelay: 24 * time.Hour}, false, nil, time.Minute)
	if err != nil || res.Matched != 10 || res.Changed != 10 {
		t.Fatalf("shift = %+v, %v", res, err)
	}
	for _, id := range names("a1", 10) {
		m, err := f.s.Get(t.Context(), id)
		if err != nil || m.Due != now+2*hour {
			t.Fatalf("%s after a shift of 1h: due %d, want %d (%v)", id, m.Due-now, 2*hour, err)
		}
	}
	if after, _ := f.s.Get(t.Context(), "a1-0"); after.Version <= before.Version {
		t.Fatalf("version %d -> %d: a moved message needs a new one", before.Version, after.Version)
	}
	if m, _ := f.s.Get(t.Context(), "b1-0"); m.Due != now+hour {
		t.Fatalf("b1-0 moved: due %d", m.Due-now)
	}

	res, err = f.a.Bulk(t.Context(), Selector{Match: targetIs("nats:b")}, delaystore.BulkOp{Kind: delaystore.BulkCancel}, false, nil, time.Minute)
	if err != nil || res.Changed != 10 {
		t.Fatalf("cancel = %+v, %v", res, err)
	}
	if z, _ := f.counts(t); z != 20 {
		t.Fatalf("%d parked after cancelling 10 of 30", z)
	}
	if !f.tombstoned(t, "b1-3", "js:IN:b1-3") {
		t.Fatal("a cancelled message left no tombstone")
	}

	res, err = f.a.Bulk(t.Context(), Selector{Match: targetIs("nats:a.y")}, delaystore.BulkOp{Kind: delaystore.BulkDeliverNow}, false, nil, time.Minute)
	if err != nil || res.Changed != 10 {
		t.Fatalf("deliver-now = %+v, %v", res, err)
	}
	if m, _ := f.claimID(t, "a2-7", time.Second); m.Due > f.now(t) {
		t.Fatalf("delivered now, but due %d", m.Due)
	}
}

// TestBulkLeavesDeliveryAlone: a claimed message and one put back by egress are matched,
// not changed; a message waiting for its retry is changed; with a due range, the retried
// one is found through the retry set (its score is its retry time).
func TestBulkLeavesDeliveryAlone(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	f.parkFor(t, "nats:t", now-10, "claimed", "retried", "put-back")
	got := map[string]delaystore.Claimed{}
	for sh := range f.s.Shards() {
		c, err := f.s.Claim(t.Context(), sh, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			got[m.ID] = m
		}
	}
	c := got["claimed"]
	if _, err := f.s.Retry(t.Context(), []delaystore.RetryRequest{{Receipt: got["retried"].Receipt, Backoff: time.Hour},
		{Receipt: got["put-back"].Receipt, Backoff: time.Hour, PutBack: true}}); err != nil || len(got) != 3 {
		t.Fatalf("set-up: %d claimed, %v", len(got), err)
	}
	at := now + int64(2*time.Hour/time.Millisecond)
	res, err := f.a.Bulk(t.Context(), Selector{DueFrom: now - 1000, DueTo: now}, delaystore.BulkOp{Kind: delaystore.BulkDeliverAt, At: at, MaxDelay: 24 * time.Hour}, false, nil, time.Minute)
	if err != nil || res.Matched != 1 || res.Changed != 1 {
		t.Fatalf("by due range = %+v, %v; want the retried one (through the retry set)", res, err)
	}
	if m, _ := f.s.Get(t.Context(), "retried"); m.Due != at || m.Attempts != 1 {
		t.Fatalf("retried: due %d attempts %d, want %d, 1", m.Due, m.Attempts, at)
	}
	res, err = f.a.Bulk(t.Context(), Selector{Match: targetIs("nats:t")}, delaystore.BulkOp{Kind: delaystore.BulkShift, Shift: time.Minute, MaxDelay: 24 * time.Hour}, false, nil, time.Minute)
	if err != nil || res.Matched != 3 || res.Changed != 1 {
		t.Fatalf("by target = %+v, %v; want 3 matched, 1 changed (the two in delivery left alone)", res, err)
	}
	for _, id := range []string{"claimed", "put-back"} {
		if m, _ := f.s.Get(t.Context(), id); m.Due != c.Due || m.Version != got[id].Version {
			t.Fatalf("%s changed: %+v", id, m)
		}
	}
}

// TestBulkResumes: with no time budget every call does one chunk and hands out a cursor;
// following it changes every message exactly once, 1,200 of them at one due time on one
// shard (paging within a score).
func TestBulkResumes(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	ids := idsOnShard(f.s, 2, 1200, "same")
	f.parkFor(t, "nats:t", now+60_000, ids...)
	var total BulkResult
	var cur *BulkCursor
	for calls := 0; ; calls++ {
		res, err := f.a.Bulk(t.Context(), Selector{}, delaystore.BulkOp{Kind: delaystore.BulkShift, Shift: time.Minute, MaxDelay: 24 * time.Hour}, false, cur, 0)
		if err != nil || calls > 100 {
			t.Fatalf("call %d: %+v %v", calls, res, err)
		}
		total.Matched += res.Matched
		total.Changed += res.Changed
		if res.Next == nil {
			break
		}
		cur = res.Next
	}
	if total.Matched != 1200 || total.Changed != 1200 {
		t.Fatalf("in all: %+v, want 1200 matched and changed", total)
	}
	for _, id := range ids {
		if m, err := f.s.Get(t.Context(), id); err != nil || m.Due != now+120_000 {
			t.Fatalf("%s: due +%d ms, want +120000 (shifted once) %v", id, m.Due-now, err)
		}
	}
}

// TestBulkCancelPassFence: a cancel pass picks entries newer than its fence (the shard's
// version when the pass began) only when they are recurring messages that re-parked
// themselves (a firing renews the version): a one-shot message parked after the pass
// began is left alone and not matched, as by every bulk change.
func TestBulkCancelPassFence(t *testing.T) {
	f := setup(t)
	park := func(id, every string, delay time.Duration) delaystore.Message {
		env := sampleEnvelope(2)
		env.Target, env.Every, env.Headers = "nats:tick", every, nil
		f.park(t, delaystore.ParkRequest{ID: id, Replace: true, Delay: delay, Envelope: env})
		m, err := f.s.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	rec := park("rec", "1s", 0)
	// The pass over rec's shard begins now: its fence is the shard's version counter.
	cur := BulkCursor{Shard: rec.Shard, Pass: "z"}
	if err := f.a.bulkBegin(t.Context(), &cur); err != nil {
		t.Fatal(err)
	}
	// rec fires and re-parks itself (a newer version) before the scan reaches it; a
	// one-shot message of the same shard is parked after the pass began.
	claimed, c := f.claimID(t, "rec", time.Second)
	if r, err := f.s.Retry(t.Context(), []delaystore.RetryRequest{{Receipt: claimed.Receipt, Next: c.Now + 60_000}}); err != nil || r.N != 1 {
		t.Fatalf("re-park: %+v, %v", r, err)
	}
	late := ""
	for i := 0; late == ""; i++ {
		if id := "late-" + strconv.Itoa(i); f.s.ShardOf(id) == rec.Shard {
			late = id
		}
	}
	park(late, "", time.Hour)
	res, err := f.a.Bulk(t.Context(), Selector{Match: func(string) bool { return true }}, delaystore.BulkOp{Kind: delaystore.BulkCancel}, false, &cur, time.Minute)
	if err != nil || res.Matched != 1 || res.Changed != 1 {
		t.Fatalf("cancel pass = %+v, %v; want the re-parked recurring message alone matched and changed", res, err)
	}
	if _, err := f.s.Get(t.Context(), "rec"); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("re-parked recurring message after the cancel: %v", err)
	}
	if _, err := f.s.Get(t.Context(), late); err != nil {
		t.Fatalf("one-shot message parked after the pass began: %v; want left alone", err)
	}
}
