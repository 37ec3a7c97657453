package egress

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/headers"
)

func parkExpiring(t *testing.T, st *delaystore.Store, id string, at time.Time, expires time.Duration, target string) {
	t.Helper()
	_, err := st.Park(context.Background(), []delaystore.ParkRequest{{
		ID: id, Replace: true, Absolute: true, At: at.UnixMilli(),
		Envelope: delaystore.Envelope{Target: target, Source: "nats:delay.in", Payload: []byte("body-" + id), Expires: expires},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// TestExpiredAtClaim: a message claimed past its due time + x-delay-expires is not
// published: it goes to the dead-letter subject with reason expired, its due time and
// lateness; one still within its expiry, and one without, are delivered.
func TestExpiredAtClaim(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "orders")
	dlq := collect(t, gc, "delay.dlq")
	runEgress(t, Config{}, st, map[string]message.Publisher{"nats": gc})
	due := time.Now().Add(-time.Minute)
	parkExpiring(t, st, "stale", due, 30*time.Second, "nats:orders")
	parkExpiring(t, st, "fresh", due, time.Hour, "nats:orders")
	parkExpiring(t, st, "forever", due, 0, "nats:orders")
	g := waitFor(t, dlq, 10*time.Second)
	hs := headers.FromMetadata(g.msg.Metadata)
	if id, _ := hs.Get(contract.HeaderID); id != "stale" {
		t.Fatalf("dead letter of %q, want stale", id)
	}
	e, _ := hs.Get(contract.HeaderError)
	want := "expired: due " + time.UnixMilli(due.UnixMilli()).UTC().Format(time.RFC3339Nano) + ", 1m"
	if !strings.HasPrefix(e, want) || !strings.Contains(e, "late, expires 30s") {
		t.Fatalf("%s = %q, want %q... late, expires 30s", contract.HeaderError, e, want)
	}
	delivered := map[string]bool{}
	for range 2 {
		g := waitFor(t, out, 10*time.Second)
		id, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderID)
		delivered[id] = true
		if _, ok := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderExpires); ok {
			t.Fatalf("%s delivered with %s", id, contract.HeaderExpires)
		}
	}
	if !delivered["fresh"] || !delivered["forever"] {
		t.Fatalf("delivered %v, want fresh and forever", delivered)
	}
	waitEmpty(t, st)
	select {
	case g := <-out:
		t.Fatalf("also delivered %s", g.msg.UUID)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestExpiredBeforeRetry: a publish fails and the retry would come after due + expires
// (BackoffMin is an hour): the message is dead-lettered as expired at once, with the
// publish error; a message without expiry is kept for its retry.
func TestExpiredBeforeRetry(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	dlq := collect(t, gc, "delay.dlq")
	f := &flaky{Publisher: gc, failTopic: map[string]bool{"broken": true}}
	runEgress(t, Config{MaxAttempts: 100, BackoffMin: time.Hour}, st, map[string]message.Publisher{"nats": f})
	parkExpiring(t, st, "soon-stale", time.Now(), 10*time.Minute, "nats:broken")
	parkExpiring(t, st, "patient", time.Now(), 0, "nats:broken")
	g := waitFor(t, dlq, 10*time.Second)
	hs := headers.FromMetadata(g.msg.Metadata)
	if id, _ := hs.Get(contract.HeaderID); id != "soon-stale" {
		t.Fatalf("dead letter of %q, want soon-stale", id)
	}
	e, _ := hs.Get(contract.HeaderError)
	if !strings.HasPrefix(e, "expired: ") || !strings.Contains(e, "next attempt in 1h0m0s") || !strings.Contains(e, "broker says no") {
		t.Fatalf("%s = %q", contract.HeaderError, e)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := st.Get(context.Background(), "patient")
		if err == nil && m.Attempts == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("patient not kept for a retry: %+v, %v", m, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := st.Get(context.Background(), "soon-stale"); err == nil {
		t.Fatal("soon-stale still parked after its dead letter")
	}
}

func TestDeadline(t *testing.T) {
	c := delaystore.Claimed{Due: 1000, Envelope: delaystore.Envelope{Expires: 2 * time.Second}}
	if dl, ok := deadline(c); !ok || dl != 3000 {
		t.Fatalf("deadline = %d, %v", dl, ok)
	}
	if expiredAt(c, 3000) != nil || expiredAt(c, 3001) == nil {
		t.Fatal("a message may be published up to its deadline, not after")
	}
	if _, ok := deadline(delaystore.Claimed{Due: 1000}); ok {
		t.Fatal("no expires: no deadline")
	}
	c.Due, c.Envelope.Expires = math.MaxInt64-5, time.Hour
	if dl, _ := deadline(c); dl != math.MaxInt64 {
		t.Fatalf("deadline overflowed to %d", dl)
	}
}
