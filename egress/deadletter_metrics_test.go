package egress

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
)

// TestDeadLettersCountedByReason: a message the target rejects for good (forbidden) and
// one out of attempts (publish_failed) are counted in delaybridge_dead_letters_out_total by
// their reason, and in delaybridge_messages_out_total as dead_lettered (the fleet view's
// dead letters by reason come from the first).
func TestDeadLettersCountedByReason(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	dlq := collect(t, gc, "delay.dlq")
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	f := &flaky{Publisher: gc, forbid: map[string]bool{"secret": true}, failTopic: map[string]bool{"down": true}}
	e, err := New(Config{DLQSubject: "delay.dlq", MaxAttempts: 1, BackoffMin: time.Millisecond},
		st, map[string]message.Publisher{"nats": f}, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	park(t, st, "nope", 0, "nats:secret", nil)
	park(t, st, "gone", 0, "nats:down", nil)
	waitFor(t, dlq, 5*time.Second)
	waitFor(t, dlq, 5*time.Second)
	waitEmpty(t, st)

	got := deadByReason(t, reg)
	if len(got) != 2 || got["forbidden"] != 1 || got["publish_failed"] != 1 || counter(t, reg, "dead_lettered") != 2 {
		t.Fatalf("dead letters by reason %v, dead_lettered %g; want forbidden 1, publish_failed 1, 2", got, counter(t, reg, "dead_lettered"))
	}
}
