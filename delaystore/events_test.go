package delaystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/events"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// TestFleetNotices: a relay's announcement of tails and a change of the pause set reach
// every replica's Wakeups as notices (WakeTails with the relay's id, WakePauses); a pause
// that changes nothing tells nobody.
func TestFleetNotices(t *testing.T) {
	st := storetest.New(t, time.Second)
	ctx := t.Context()
	wakes, err := st.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wakes.Close() })
	next := func() delaystore.Wake {
		t.Helper()
		for {
			select {
			case w := <-wakes.C:
				if w.Shard != delaystore.WakeResync && w.Shard != delaystore.WakeFleet {
					return w
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no notice")
			}
		}
	}
	if err := st.AnnounceTails(ctx, "relay-a"); err != nil {
		t.Fatal(err)
	}
	if w := next(); w.Shard != delaystore.WakeTails || w.ID != "relay-a" {
		t.Fatalf("after AnnounceTails: %+v", w)
	}
	for _, change := range []func() (delaystore.PauseChange, error){
		func() (delaystore.PauseChange, error) { return st.PauseTarget(ctx, "orders.*") },
		func() (delaystore.PauseChange, error) { return st.PauseTarget(ctx, "orders.*") }, // no change
		func() (delaystore.PauseChange, error) { return st.ResumeTarget(ctx, "orders.*") },
	} {
		if _, err := change(); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if w := next(); w.Shard != delaystore.WakePauses {
			t.Fatalf("after a pause change: %+v", w)
		}
	}
	if err := st.AnnounceTails(ctx, "relay-b"); err != nil {
		t.Fatal(err)
	}
	if w := next(); w.Shard != delaystore.WakeTails || w.ID != "relay-b" { // not a third WakePauses
		t.Fatalf("after a pause that changed nothing: %+v, want the next announcement", w)
	}
}

// TestRelayAcrossReplicas: two replicas (hubs and relays) over one Redis. With no tail
// anywhere neither publishes (no outbound subscriber on its hub); a tail on A gets B's
// events (through Redis) and A's own (from A's hub, once); when the tail goes, B stops
// publishing.
func TestRelayAcrossReplicas(t *testing.T) {
	srv := testredis.Start(t)
	stA, stB := replicaOn(t, srv), replicaOn(t, srv)
	hubA, hubB := events.NewHub(nil), events.NewHub(nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{}, 4)
	relays := map[*delaystore.Store]*events.Relay{stA: events.NewRelay(hubA, stA, 20*time.Millisecond, nil),
		stB: events.NewRelay(hubB, stB, 20*time.Millisecond, nil)}
	for st, r := range relays {
		go func() { _ = r.Run(ctx); done <- struct{}{} }()
		wakes, err := st.Wakeups(ctx) // as egress hands the relays' announcements on
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for w := range wakes.C {
				if w.Shard == delaystore.WakeTails {
					r.Heard(w.ID)
				}
			}
			done <- struct{}{}
		}()
	}
	t.Cleanup(func() { cancel(); <-done; <-done; <-done; <-done })
	time.Sleep(100 * time.Millisecond) // several checks with nobody tailing
	if hubA.Active() || hubB.Active() {
		t.Fatal("a relay publishes while no replica has tails")
	}
	tail, err := hubA.Tail()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B publishing for A's tail", hubB.Active)
	hubB.Emit(events.Event{Type: events.Delivered, ID: "from-b", Target: "nats:x"})
	hubA.Emit(events.Event{Type: events.Delivered, ID: "from-a", Target: "nats:x"})
	seen := map[string]int{}
	deadline := time.After(10 * time.Second)
	for seen["from-b"] == 0 {
		select {
		case e := <-tail.Events():
			seen[e.ID]++
		case <-deadline:
			t.Fatalf("A's tail got %v, not B's event", seen)
		}
	}
	time.Sleep(100 * time.Millisecond) // A's own event, echoed by Redis, must be dropped
	for len(tail.Events()) > 0 {
		seen[(<-tail.Events()).ID]++
	}
	if seen["from-a"] != 1 || seen["from-b"] != 1 {
		t.Fatalf("A's tail got %v, want each event once", seen)
	}
	// Both replicas tail: A publishes too, and its own batches come back from Redis to
	// its relay, which must drop them (A's tail has A's events from A's hub).
	tailB, err := hubB.Tail()
	if err != nil {
		t.Fatal(err)
	}
	emitted := 0
	for got := false; !got; {
		hubA.Emit(events.Event{Type: events.Delivered, ID: "a2", Target: "nats:x"})
		emitted++
		select {
		case e := <-tailB.Events():
			got = e.ID == "a2"
		case <-time.After(20 * time.Millisecond):
		}
		if emitted > 500 {
			t.Fatal("B's tail never got A's events")
		}
	}
	time.Sleep(100 * time.Millisecond)
	n := 0
	for len(tail.Events()) > 0 {
		if (<-tail.Events()).ID == "a2" {
			n++
		}
	}
	if n != emitted {
		t.Fatalf("A's tail got A's event %d times for %d emitted", n, emitted)
	}
	tailB.Close()
	tail.Close()
	waitFor(t, "B to stop publishing", func() bool { return !hubB.Active() })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// replicaOn is one replica's store on srv (its own client), prefix "ev".
func replicaOn(t *testing.T, srv *testredis.Server) *delaystore.Store {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: "ev", Shards: 4, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	return st
}
