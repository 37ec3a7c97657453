package ingress

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// TestRedeliveryOfDeliveredMessage: a source message is parked with its source id in the
// envelope; once delivered (claimed and acked, as egress does), the same source message
// redelivered (its source ack was lost) is acknowledged and counted as already_delivered,
// not parked again; a new message reusing its x-delay-id is parked.
func TestRedeliveryOfDeliveredMessage(t *testing.T) {
	st, gc, reg := runCounted(t, Delayed)

	hs := headers.List{{Key: "x-delay", Value: "0"}, {Key: "x-target", Value: "a.b"}, {Key: "x-delay-id", Value: "order-1"}}
	send(t, gc, "delay.in", "x", hs, map[string]string{headers.MetaSourceID: "js:IN:5"})
	m := waitGet(t, st, "order-1")
	if m.Envelope.SourceID != "js:IN:5" {
		t.Fatalf("parked envelope source id %q, want js:IN:5", m.Envelope.SourceID)
	}
	deliver(t, st, "order-1")

	count := func(result string) float64 {
		return counterValue(t, reg, "delaybridge_messages_in_total", "broker", intake.BrokerNATS, "result", result)
	}
	send(t, gc, "delay.in", "x", hs, map[string]string{headers.MetaSourceID: "js:IN:5"})
	for deadline := time.Now().Add(5 * time.Second); count("already_delivered") < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("redelivery not counted as already_delivered (parked %v)", count("parked"))
		}
	}
	if _, err := st.Get(context.Background(), "order-1"); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("the redelivered message was parked again: %v", err)
	}
	send(t, gc, "delay.in", "y", hs, map[string]string{headers.MetaSourceID: "js:IN:6"})
	if m := waitGet(t, st, "order-1"); m.Envelope.SourceID != "js:IN:6" {
		t.Fatalf("new message with the id: source id %q", m.Envelope.SourceID)
	}
	for deadline := time.Now().Add(5 * time.Second); count("parked") < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	if p, d := count("parked"), count("already_delivered"); p != 2 || d != 1 {
		t.Fatalf("parked %v already_delivered %v, want 2 and 1", p, d)
	}
}

// deliver claims id and acks it, as egress does once the target confirmed.
func deliver(t *testing.T, st *delaystore.Store, id string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		c, err := st.Claim(context.Background(), st.ShardOf(id), 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			if m.ID == id {
				if a, err := st.Ack(context.Background(), []delaystore.Receipt{m.Receipt}); err != nil || a.N != 1 {
					t.Fatalf("ack: %+v %v", a, err)
				}
				return
			}
		}
	}
	t.Fatalf("%s not claimed", id)
}

// runCounted runs an ingress on a real store and a gochannel broker, reading "delay.in"
// (and "delay.cancel" with cancels) from NATS, its counters in the returned registry;
// it stops at the end of the test.
func runCounted(t *testing.T, kinds ...Kind) (*delaystore.Store, *gochannel.GoChannel, *prometheus.Registry) {
	t.Helper()
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	topics := map[Kind]string{Delayed: "delay.in", Cancels: "delay.cancel"}
	var sources []Source
	for _, k := range kinds {
		sources = append(sources, Source{Broker: intake.BrokerNATS, Topic: topics[k], Kind: k, Subscriber: gc})
	}
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq"}, st, sources,
		map[string]message.Publisher{intake.BrokerNATS: gc}, nil, metrics)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(50 * time.Millisecond) // gochannel drops messages published before Subscribe
	return st, gc, reg
}
