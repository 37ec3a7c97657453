package egress

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/events"
)

// TestDeliveryEvents: each outcome is told to cfg.Events: a confirmed publish as
// delivered (with its due and attempt), an expired message as expired, a message out of
// attempts as dead_lettered with its reason; a retried or put-back message is not (its
// story is not over).
func TestDeliveryEvents(t *testing.T) {
	gc := newBroker(t)
	collect(t, gc, "out")
	collect(t, gc, "delay.dlq")
	hub := events.NewHub(nil)
	tail, err := hub.Tail()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DLQSubject: "delay.dlq", TargetInflight: 2, MaxAttempts: 3, Events: hub}
	cfg.defaults()
	d, err := newDelivery(cfg, map[string]message.Publisher{"nats": gc}, nil, &redisClock{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().UnixMilli() - 1000
	claimed := func(id, target string, attempts int, expires time.Duration) delaystore.Claimed {
		return delaystore.Claimed{Receipt: delaystore.Receipt{ID: id, Shard: 1, Version: 1}, Due: due, Attempts: attempts,
			Envelope: delaystore.Envelope{Target: target, Source: "nats:delay.in", Expires: expires, Payload: []byte(id)}}
	}
	b := batch{shard: 1, fence: time.Now(), claimed: []delaystore.Claimed{
		claimed("ok", "nats:out", 0, 0),
		claimed("late", "nats:out", 0, 500*time.Millisecond),
		claimed("spent", "kafka:out", 2, 0), // no kafka publisher: its third failure, the last
		claimed("again", "kafka:out", 0, 0), // a retry: no event
	}}
	var c collectSettlements
	d.submit(context.Background(), b, c.settle)
	c.wait(t, len(b.claimed), 10*time.Second)
	var got []string
	for len(tail.Events()) > 0 {
		e := <-tail.Events()
		got = append(got, strings.Join([]string{e.Type, e.ID, e.Target, e.Reason}, " "))
		if e.Due != due || e.At == 0 {
			t.Errorf("%s: due %d at %d, want due %d and a time", e.ID, e.Due, e.At, due)
		}
	}
	sort.Strings(got)
	want := []string{"dead_lettered spent kafka:out publish_failed", "delivered ok nats:out ", "expired late nats:out expired"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events %q, want %q", got, want)
	}
}
