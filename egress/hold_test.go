package egress

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
)

// aheadRun parks n messages due 300 ms + i x 10 ms from now in a 1-shard store and runs
// a scheduler with ClaimAhead ahead until every one was handed and acked. It returns the
// fake delivery and the recorder.
func aheadRun(t *testing.T, ahead time.Duration, n int) (*fakeDelivery, *ackRecorder) {
	t.Helper()
	st := storetest.NewWith(t, delaystore.Config{Lease: 10 * time.Second, Shards: 1})
	for i := range n {
		park(t, st, "a"+strconv.Itoa(i), 300*time.Millisecond+time.Duration(i)*10*time.Millisecond, "nats:t", nil)
	}
	f, rec, _, _ := recordedScheduler(t, st, Config{Lease: 10 * time.Second, ClaimAhead: ahead}, ackHold)
	waitHanded(t, f, n, 10*time.Second)
	requireEmpty(t, st, 5*time.Second)
	return f, rec
}

// waitClaimed polls until the scheduler under rec claimed n messages (within 5 s).
func waitClaimed(t *testing.T, rec *ackRecorder, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec.mu.Lock()
		claimed := rec.claimed
		rec.mu.Unlock()
		if claimed == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("claimed %d of %d", claimed, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestClaimAheadNeverEarly (issue 26 item 2): claiming ahead, a shard is claimed about
// once per span, not once per message, and yet no message is handed to delivery before
// its due time (the holder waits for it by the Redis clock estimate, which runs behind).
func TestClaimAheadNeverEarly(t *testing.T) {
	const n = 50 // 10 ms apart: 500 ms of them
	f, rec := aheadRun(t, 200*time.Millisecond, n)
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, c := range f.got {
		if early := c.Due - f.at[id]; early > 0 {
			t.Errorf("%s handed %d ms before its due time", id, early)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.claimed != n || rec.claimRuns > n/5 {
		t.Fatalf("claimed %d in %d shard claims; want %d in at most %d (a 200 ms span holds ~20)", rec.claimed, rec.claimRuns, n, n/5)
	}
	t.Logf("%d messages in %d shard claims", rec.claimed, rec.claimRuns)
}

// TestClaimAheadOff: a negative ClaimAhead claims only what is due: nothing is held, and
// messages 10 ms apart take many claims.
func TestClaimAheadOff(t *testing.T) {
	const n = 50
	if got := (Config{ClaimAhead: -time.Millisecond, Lease: time.Minute}).ahead(); got != 0 {
		t.Fatalf("ahead() of a negative ClaimAhead = %s, want 0", got)
	}
	if got := (Config{ClaimAhead: time.Second, Lease: time.Second}).ahead(); got != 250*time.Millisecond {
		t.Fatalf("ahead() with a 1 s lease = %s, want a quarter of it", got)
	}
	_, rec := aheadRun(t, -time.Millisecond, n)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.claimRuns <= n/5 {
		t.Fatalf("%d shard claims for %d messages 10 ms apart without claiming ahead; want more than %d", rec.claimRuns, n, n/5)
	}
}

// TestClaimAheadShutdown: messages claimed ahead and held when Run's context ends are
// handed at their due times (never early), settled and acked before run returns.
func TestClaimAheadShutdown(t *testing.T) {
	st := storetest.NewWith(t, delaystore.Config{Lease: 10 * time.Second, Shards: 1})
	f, rec, cancel, done := recordedScheduler(t, st, Config{Lease: 10 * time.Second, ClaimAhead: time.Second}, ackHold)
	const n = 10
	for i := range n {
		park(t, st, "s"+strconv.Itoa(i), 400*time.Millisecond+time.Duration(i)*20*time.Millisecond, "nats:t", nil)
	}
	waitClaimed(t, rec, n)
	if f.handed() == n {
		t.Fatalf("all %d handed at once; want them held until due", n)
	}
	cancel()
	<-done
	if f.handed() != n {
		t.Fatalf("run returned having handed %d of %d held messages", f.handed(), n)
	}
	f.mu.Lock()
	for id, c := range f.got {
		if early := c.Due - f.at[id]; early > 0 {
			t.Errorf("%s handed %d ms before its due time at shutdown", id, early)
		}
	}
	f.mu.Unlock()
	requireEmpty(t, st, time.Second)
}

// TestSplit: the eligible prefix of a claim goes at once (the batch itself when all of it
// is), the rest as one held batch per eligible millisecond, in order.
func TestSplit(t *testing.T) {
	c := func(id string, at int64) delaystore.Claimed {
		return delaystore.Claimed{Receipt: delaystore.Receipt{ID: id}, Eligible: at}
	}
	all := batch{shard: 3, claimed: []delaystore.Claimed{c("a", 5), c("b", 10)}}
	if now, later := split(all, 10); len(later) != 0 || &now.claimed[0] != &all.claimed[0] || len(now.claimed) != 2 {
		t.Fatalf("all eligible: %+v, %+v", now, later)
	}
	b := batch{shard: 3, claimed: []delaystore.Claimed{c("a", 5), c("b", 11), c("c", 11), c("d", 12)}}
	now, later := split(b, 10)
	if len(now.claimed) != 1 || now.claimed[0].ID != "a" || now.shard != 3 {
		t.Fatalf("eligible part: %+v", now)
	}
	if len(later) != 2 || later[0].due != 11 || len(later[0].b.claimed) != 2 || later[1].due != 12 || later[1].b.claimed[0].ID != "d" || later[1].b.shard != 3 {
		t.Fatalf("held parts: %+v", later)
	}
	now, later = split(batch{claimed: []delaystore.Claimed{c("x", 20)}}, 10)
	if len(now.claimed) != 0 || len(later) != 1 {
		t.Fatalf("none eligible: %+v, %+v", now, later)
	}
}

// TestClaimAheadWithdrawn: a message claimed ahead and held is in delivery: a cancel
// before its due time does not stop it (ErrInDelivery) and it is published; a replace
// (reschedule) answers InDelivery and both versions are published, each at its own due
// time. A recurring one that a bulk cancel takes in delivery is withdrawn on the shard's
// wake channel and not published, and the withdrawn copy settles (run returns, nothing
// left handed).
func TestClaimAheadWithdrawn(t *testing.T) {
	st := storetest.NewWith(t, delaystore.Config{Lease: 10 * time.Second, Shards: 1})
	f, rec, cancel, done := recordedScheduler(t, st, Config{Lease: 10 * time.Second, ClaimAhead: time.Second}, ackHold)
	park(t, st, "w-cancel", 400*time.Millisecond, "nats:t", nil)
	park(t, st, "w-replace", 400*time.Millisecond, "nats:t", nil)
	if _, err := st.Park(t.Context(), []delaystore.ParkRequest{{ID: "w-recurring", Replace: true, Delay: 400 * time.Millisecond,
		Envelope: delaystore.Envelope{Target: "nats:rec", Source: "http", Payload: []byte("x"), Every: "1s"}}}); err != nil {
		t.Fatal(err)
	}
	park(t, st, "w-first", 300*time.Millisecond, "nats:t", nil) // its claim takes the others ahead
	waitClaimed(t, rec, 4)
	if ok, err := st.Cancel(t.Context(), "w-cancel"); ok || !errors.Is(err, delaystore.ErrInDelivery) {
		t.Fatalf("cancel of a held message: %v %v, want ErrInDelivery", ok, err)
	}
	newer := park(t, st, "w-replace", 600*time.Millisecond, "nats:t", nil)
	if !newer.InDelivery {
		t.Fatalf("replace of a held message: %+v, want InDelivery", newer)
	}
	r, err := admin.New(st).Bulk(t.Context(), admin.Selector{Match: func(t string) bool { return t == "nats:rec" }}, delaystore.BulkOp{Kind: delaystore.BulkCancel}, false, nil, time.Minute)
	if err != nil || r.Changed != 1 {
		t.Fatalf("bulk cancel of the recurring message in delivery: %+v, %v", r, err)
	}
	time.Sleep(time.Second) // past both the old due times and the new one
	f.mu.Lock()
	_, inDelivery := f.got["w-cancel"]
	_, fired := f.got["w-recurring"]
	got, replaced := f.got["w-replace"]
	handed := f.n
	f.mu.Unlock()
	if !inDelivery || fired {
		t.Errorf("w-cancel (in delivery) published %v, want true; w-recurring (bulk-cancelled, withdrawn) %v, want false", inDelivery, fired)
	}
	if !replaced || got.Due != newer.Due || handed != 4 {
		t.Errorf("w-replace handed %v (due %d, want the replacement's %d last); %d handed in all, want 4", replaced, got.Due, newer.Due, handed)
	}
	cancel()
	<-done
	requireEmpty(t, st, time.Second)
}
