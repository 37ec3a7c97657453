package egress

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
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
	if ok, err := st.Cancel(context.Background(), "tick"); err != nil || !ok {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
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

// TestRecurringCatchesUp: occurrences missed while nothing fired (here: the first due
// time lies 3.5 s back) fire late, each once and in order; with x-delay-expires, one
// expired firing is dead-lettered and the occurrences that expired with it are skipped.
func TestRecurringCatchesUp(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "tick")
	dlq := collect(t, gc, "delay.dlq")
	runEgress(t, Config{}, st, map[string]message.Publisher{"nats": gc})
	park := func(id string, first int64, expires time.Duration) {
		if _, err := st.Park(context.Background(), []delaystore.ParkRequest{{
			ID: id, Replace: true, Absolute: true, At: first,
			Envelope: delaystore.Envelope{Target: "nats:tick", Source: "http", Payload: []byte(id), Every: "1s", Expires: expires},
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
	if ok, err := st.Cancel(context.Background(), "all"); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
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
