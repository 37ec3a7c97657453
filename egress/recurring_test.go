package egress

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/schedule"
)

// TestRecurringFirings: a message with Every "1s" fires once per second, each firing
// with its own x-delay-due (the first due + k s, whatever the lateness) and its own
// UUID (a new version), never early; it stays parked between firings, and a cancel stops
// it.
func TestRecurringFirings(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "tick")
	runEgress(t, Config{}, st, map[string]message.Publisher{"nats": gc})
	first := time.Now().Add(200 * time.Millisecond).UnixMilli()
	if _, err := st.Park(context.Background(), []delaystore.ParkRequest{{
		ID: "tick", Replace: true, Absolute: true, At: first,
		Envelope: delaystore.Envelope{Target: "nats:tick", Source: "http", Payload: []byte("t"), Every: "1s"},
	}}); err != nil {
		t.Fatal(err)
	}
	uuids := map[string]bool{}
	for k := range 3 {
		g := waitFor(t, out, 5*time.Second)
		hs := headers.FromMetadata(g.msg.Metadata)
		due, _ := hs.Get(contract.HeaderDue)
		if want := strconv.FormatInt(first+int64(k)*1000, 10); due != want {
			t.Fatalf("firing %d: %s %s, want %s", k, contract.HeaderDue, due, want)
		}
		if id, _ := hs.Get(contract.HeaderID); id != "tick" {
			t.Fatalf("firing %d: id %q", k, id)
		}
		if ms, _ := strconv.ParseInt(due, 10, 64); g.at.UnixMilli() < ms {
			t.Fatalf("firing %d early: arrived %d, due %s", k, g.at.UnixMilli(), due)
		}
		if uuids[g.msg.UUID] {
			t.Fatalf("firing %d reuses UUID %s: the target's dedup would drop it", k, g.msg.UUID)
		}
		uuids[g.msg.UUID] = true
	}
	if _, err := st.Get(context.Background(), "tick"); err != nil {
		t.Fatalf("between firings: %v", err)
	}
	stopRecurring(t, st, "tick")
	drained := time.After(1500 * time.Millisecond)
	for {
		select {
		case g := <-out: // at most a firing already in flight at the cancel
			if due, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderDue); due != strconv.FormatInt(first+3000, 10) {
				t.Fatalf("fired after the cancel: due %s", due)
			}
		case <-drained:
			waitEmpty(t, st)
			return
		}
	}
}

func TestNextFiringFromSchedule(t *testing.T) {
	c := delaystore.Claimed{Due: 10_000, Envelope: delaystore.Envelope{Every: "1s"}}
	for done, want := range map[int64]int64{10_003: 11_000, 10_999: 11_000, 11_000: 12_000, 15_500: 16_000} {
		if got, err := nextFiring(c, done); err != nil || got != want {
			t.Errorf("confirmed at %d: next %d, %v; want %d", done, got, err, want)
		}
	}
	c.Envelope.Every = "not a schedule"
	if _, err := nextFiring(c, 10_003); err == nil {
		t.Error("a bad schedule gave a next firing")
	}
}

// TestRecurringCatchesUpAll: with x-delay-misfire all, occurrences missed while nothing
// fired (here: the first due time lies 3.5 s back) fire late, each once and in order;
// with x-delay-expires, one expired firing is dead-lettered and the occurrences that
// expired with it are skipped.
func TestRecurringCatchesUpAll(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "tick")
	dlq := collect(t, gc, "delay.dlq")
	runEgress(t, Config{}, st, map[string]message.Publisher{"nats": gc})
	park := func(id string, first int64, expires time.Duration) {
		if _, err := st.Park(context.Background(), []delaystore.ParkRequest{{
			ID: id, Replace: true, Absolute: true, At: first,
			Envelope: delaystore.Envelope{Target: "nats:tick", Source: "http", Payload: []byte(id), Every: "1s", Expires: expires, Misfire: "all"},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	first := time.Now().Add(-3500 * time.Millisecond).UnixMilli()
	park("all", first, 0)
	for k := range 5 {
		g := waitFor(t, out, 5*time.Second)
		if due, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderDue); due != strconv.FormatInt(first+int64(k)*1000, 10) {
			t.Fatalf("firing %d: due %s, want %d", k, due, first+int64(k)*1000)
		}
	}
	stopRecurring(t, st, "all")
	time.Sleep(300 * time.Millisecond)
	for len(out) > 0 {
		<-out
	}

	first = time.Now().Add(-5200 * time.Millisecond).UnixMilli()
	park("fresh", first, 700*time.Millisecond)
	g := waitFor(t, dlq, 5*time.Second)
	hs := headers.FromMetadata(g.msg.Metadata)
	if due, _ := hs.Get(contract.HeaderDue); due != strconv.FormatInt(first, 10) {
		t.Fatalf("dead letter of due %s, want the first, %d", due, first)
	}
	g = waitFor(t, out, 5*time.Second)
	due, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderDue)
	if ms, _ := strconv.ParseInt(due, 10, 64); ms < first+5000 || ms > first+6000 {
		t.Fatalf("after the expired firing: due %s, want the first occurrence not expired (%d or %d)", due, first+5000, first+6000)
	}
	select {
	case g := <-dlq:
		t.Fatalf("a second dead letter: %v", g.msg.Metadata)
	case <-time.After(300 * time.Millisecond):
	}
}

// firingDue is the x-delay-due of a published firing, and its arrival, in unix ms.
func firingDue(t *testing.T, g got) (due, at int64) {
	t.Helper()
	v, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderDue)
	due, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("x-delay-due %q: %v", v, err)
	}
	if at = g.at.UnixMilli(); at < due {
		t.Fatalf("firing early: arrived %d, due %d", at, due)
	}
	return due, at
}

// TestRecurringMisfire (issue 23 item 2): x-deliver-at 0 with every 1s, through a real
// Redis. once: exactly one firing at once, as the latest occurrence, then one per
// second; skip: nothing at once, the first firing at the next occurrence after the park;
// all: exactly the latest 100 occurrences at once, in order, then one per second. Before
// x-delay-misfire each fired every second since 1970 (hundreds a second).
func TestRecurringMisfire(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	outs := map[string]chan got{}
	for _, m := range []string{"once", "skip", "all"} {
		outs[m] = collect(t, gc, "tick."+m)
	}
	runEgress(t, Config{}, st, map[string]message.Publisher{"nats": gc})
	parked := time.Now().UnixMilli()
	for m, stored := range map[string]string{"once": "", "skip": "skip", "all": "all"} {
		if _, err := st.Park(context.Background(), []delaystore.ParkRequest{{
			ID: m, Replace: true, Absolute: true, At: 0,
			Envelope: delaystore.Envelope{Target: "nats:tick." + m, Source: "http", Payload: []byte(m), Every: "1s", Misfire: stored},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	// once: the latest occurrence (a whole second, at most a second before the park)...
	first, _ := firingDue(t, waitFor(t, outs["once"], 5*time.Second))
	if first%1000 != 0 || first <= parked-1000 || first > parked+1000 {
		t.Fatalf("once: first firing due %d, want the latest whole second at the park (%d)", first, parked)
	}
	// ... then one per second.
	for k := int64(1); k <= 2; k++ {
		if due, _ := firingDue(t, waitFor(t, outs["once"], 3*time.Second)); due != first+k*1000 {
			t.Fatalf("once: firing %d due %d, want %d", k, due, first+k*1000)
		}
	}
	// skip: nothing at or before the park; the first firing is the next occurrence.
	if due, _ := firingDue(t, waitFor(t, outs["skip"], 3*time.Second)); due <= parked || due > parked+2000 {
		t.Fatalf("skip: first firing due %d, want the first whole second after the park (%d)", due, parked)
	}
	// all: 100 in a row, the last of them the latest occurrence at the first claim, and
	// nothing older.
	var dues []int64
	for range 101 {
		due, _ := firingDue(t, waitFor(t, outs["all"], 3*time.Second))
		dues = append(dues, due)
	}
	oldest, latest := dues[0], dues[99]
	for k, due := range dues {
		if due != oldest+int64(k)*1000 {
			t.Fatalf("all: firing %d due %d, want %d (in order, none twice, none left out)", k, due, oldest+int64(k)*1000)
		}
	}
	if latest <= parked-1000 || latest > parked+1000 {
		t.Fatalf("all: 100th firing due %d, want the latest occurrence at the park (%d)", latest, parked)
	}
	t.Logf("once from %d, all from %d to %d (%d at once), parked at %d", first, oldest, latest, len(dues)-1, parked)
}

// TestMisfires: at the claim, a missed firing of a recurring message fires as its
// policy says (once: as the latest occurrence; all: from the oldest of the latest 100)
// or is parked for the next occurrence after the claim unpublished (skip); a late firing
// that was not missed, a one-shot message, and a schedule that does not parse pass
// unchanged.
func TestMisfires(t *testing.T) {
	d := &delivery{log: slog.New(slog.DiscardHandler)}
	const now = 1_700_000_000_400 // ms; every 1s from 0 (whole seconds): latest 1_700_000_000_000
	claim := func(id string, due int64, every, misfire string) delaystore.Claimed {
		return delaystore.Claimed{Receipt: delaystore.Receipt{ID: id}, Due: due,
			Envelope: delaystore.Envelope{Target: "nats:t", Every: every, Misfire: misfire}}
	}
	fire, skipped := d.misfires([]delaystore.Claimed{
		claim("once", 0, "1s", ""), claim("skip", 0, "1s", "skip"), claim("all", 0, "1s", "all"),
		claim("late", now-900, "1s", "skip"), claim("one-shot", 0, "", ""), claim("bad", 0, "never", ""),
		claim("hourly", now-30_000, "1h", "skip"), claim("hourly-missed", now-61_000, "1h", "skip"),
	}, now)
	got := map[string]int64{}
	for _, c := range fire {
		got[c.ID] = c.Due
	}
	want := map[string]int64{"once": now - 400, "all": now - 400 - 99_000, "late": now - 900, "one-shot": 0, "bad": 0, "hourly": now - 30_000}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fired as %v, want %v", got, want)
	}
	next := map[string]int64{}
	for _, r := range skipped {
		next[r.ID] = r.Next
	}
	if want := map[string]int64{"skip": now + 600, "hourly-missed": now - 61_000 + 3_600_000}; !reflect.DeepEqual(next, want) {
		t.Errorf("skipped to %v, want %v", next, want)
	}
}

// TestRecurringWindow: a recurring message with a spread window fires once per
// occurrence, each firing at a time drawn in its own occurrence's window (x-delay-due in
// [first + k s, first + k s + 500 ms], never arriving before it), and the firings do not
// all sit at the same place in their windows.
func TestRecurringWindow(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "tick")
	runEgress(t, Config{}, st, map[string]message.Publisher{"nats": gc})
	const window = 500 * time.Millisecond
	first := time.Now().Add(200 * time.Millisecond).UnixMilli()
	at, _ := schedule.Spread("tick", first, window)
	if _, err := st.Park(context.Background(), []delaystore.ParkRequest{{
		ID: "tick", Replace: true, Absolute: true, At: at,
		Envelope: delaystore.Envelope{Target: "nats:tick", Source: "http", Payload: []byte("t"), Every: "1s", Window: window, Anchor: first},
	}}); err != nil {
		t.Fatal(err)
	}
	offsets := map[int64]bool{}
	for k := range int64(6) {
		due, arrived := firingDue(t, waitFor(t, out, 5*time.Second))
		occ := first + k*1000
		if due < occ || due > occ+window.Milliseconds() {
			t.Fatalf("firing %d: due %d, outside its window [%d, %d]", k, due, occ, occ+window.Milliseconds())
		}
		if arrived < due {
			t.Fatalf("firing %d early: arrived %d, due %d", k, arrived, due)
		}
		offsets[due-occ] = true
	}
	if len(offsets) < 2 {
		t.Fatalf("six firings all drew the same offset %v", offsets)
	}
	stopRecurring(t, st, "tick")
}

// TestNextFiringWindow: the next firing of a windowed recurring message lies in the
// window of the schedule's next occurrence, counted from the anchor (not from the drawn
// due time, which would move the schedule by the spread at every firing).
func TestNextFiringWindow(t *testing.T) {
	const anchor = 1_795_273_445_000
	c := delaystore.Claimed{Receipt: delaystore.Receipt{ID: "w"}, Due: anchor + 7_000,
		Envelope: delaystore.Envelope{Every: "1m", Window: 10 * time.Second, Anchor: anchor}}
	for done, occ := range map[int64]int64{anchor + 7_003: anchor + 60_000, anchor + 61_000: anchor + 120_000} {
		got, err := nextFiring(c, done)
		if err != nil || got < occ || got > occ+10_000 {
			t.Errorf("confirmed at %d: next %d, %v; want in [%d, %d]", done, got, err, occ, occ+10_000)
		}
	}
}

// stopRecurring cancels the recurring message id: cancelled, or, when a firing is in
// delivery (claimed ahead, or published and its settlement not yet sent), an
// InDeliveryError with Stopped (that firing may still be published, no later one).
func stopRecurring(t *testing.T, st *delaystore.Store, id string) {
	t.Helper()
	ok, err := st.Cancel(context.Background(), id)
	var busy *delaystore.InDeliveryError
	if errors.As(err, &busy) && busy.Stopped {
		return
	}
	if err != nil || !ok {
		t.Fatalf("cancel %s = %v, %v", id, ok, err)
	}
}

// TestRecurringNextBeyondMaxDelay (issue 37 item 7): a recurring message whose next
// occurrence lies more than BRIDGE_MAX_DELAY after its firing (an interval parked before
// the bound, a cron expression's gap: 29 February, then years) fires this once and is not
// parked again (it was parked for 2028 and 2319); one whose next occurrence is within the
// bound goes on. Through a real store: the message is gone after its firing.
func TestRecurringNextBeyondMaxDelay(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "rare")
	runEgress(t, Config{MaxDelay: 8760 * time.Hour}, st, map[string]message.Publisher{"nats": gc})
	at := time.Now().Add(200 * time.Millisecond).UnixMilli()
	for _, every := range []string{"0 0 29 2 *", "9000h", "2562047h47m16s"} {
		if _, err := st.Park(context.Background(), []delaystore.ParkRequest{{
			ID: every, Replace: true, Absolute: true, At: at,
			Envelope: delaystore.Envelope{Target: "nats:rare", Source: "http", Payload: []byte("r"), Every: every},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		waitFor(t, out, 5*time.Second)
	}
	waitEmpty(t, st)

	// The settlement itself, at fixed times: ended (acked) or parked for the next.
	d := &delivery{cfg: Config{MaxDelay: 8760 * time.Hour}, log: slog.New(slog.DiscardHandler)}
	leap := time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC).UnixMilli()
	for _, tt := range []struct {
		every     string
		due, now  int64
		wantNext  int64 // 0: ended
		wantEnded bool
	}{
		{every: "0 0 29 2 *", due: leap, now: leap + 100, wantEnded: true},
		{every: "0 0 1 3 *", due: leap, now: leap + 100, wantNext: leap + 86_400_000},
		{every: "9000h", due: leap, now: leap + 100, wantEnded: true},
		{every: "2562047h47m16s", due: leap, now: leap + 100, wantEnded: true},
		{every: "8760h", due: leap, now: leap + 100, wantNext: leap + 8760*3_600_000},
		{every: "1s", due: leap, now: leap + 100, wantNext: leap + 1000},
	} {
		st := &settlement{}
		d.fired(st, &outgoing{claimed: delaystore.Claimed{Receipt: delaystore.Receipt{ID: tt.every}, Due: tt.due,
			Envelope: delaystore.Envelope{Every: tt.every}}}, tt.now)
		switch {
		case tt.wantEnded && (len(st.acks) != 1 || len(st.retries) != 0):
			t.Errorf("%s: acks %v retries %v, want it ended (acked)", tt.every, st.acks, st.retries)
		case !tt.wantEnded && (len(st.retries) != 1 || st.retries[0].Next != tt.wantNext):
			t.Errorf("%s: retries %+v acks %v, want next %d", tt.every, st.retries, st.acks, tt.wantNext)
		}
	}
	// Under x-delay-misfire skip, a next occurrence beyond the bound is not parked either.
	_, skipped := d.misfires([]delaystore.Claimed{{Receipt: delaystore.Receipt{ID: "s"}, Due: leap - 3_600_000,
		Envelope: delaystore.Envelope{Target: "nats:t", Every: "0 0 29 2 *", Misfire: "skip"}}}, leap+120_000)
	if len(skipped) != 0 {
		t.Errorf("skip parked %+v beyond BRIDGE_MAX_DELAY", skipped)
	}
}
