package egress

import (
	"context"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/delaystore"
	wmkafka "github.com/delaybridge/delaybridge/internal/broker/kafka"
	wmnats "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testnats"
	"github.com/delaybridge/delaybridge/internal/tracing"
)

// watermillOnly hides a publisher's fast path: delivery takes Publish.
type watermillOnly struct{ message.Publisher }

// countingList counts the PublishList calls of a NATS publisher.
type countingList struct {
	*wmnats.Publisher
	calls atomic.Int64
}

func (c *countingList) PublishList(ctx context.Context, topic string, msgs []headers.Message) error {
	c.calls.Add(1)
	return c.Publisher.PublishList(ctx, topic, msgs)
}

var _ envelopePublisher = (*wmnats.Publisher)(nil)

// TestFastPathSameWire publishes the same claimed messages through the NATS publisher's
// fast path (PublishList) and through watermill (Publish) to an embedded server, core and
// JetStream, and compares what a subscriber receives: subject, headers (every key, its
// values in order, Nats-Msg-Id) and payload.
func TestFastPathSameWire(t *testing.T) {
	srv := testnats.Start(t)
	nc := testnats.Connect(t, srv.URL())
	testnats.CreateStream(t, nc, "FAST", "fast.js")
	pub, err := wmnats.NewPublisher(testnats.Connect(t, srv.URL()), wmnats.PublisherConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	fast := &countingList{Publisher: pub}

	claimed := func(target string) []delaystore.Claimed {
		return []delaystore.Claimed{
			{Receipt: delaystore.Receipt{ID: "plain", Shard: 1, Version: 3}, Due: 1_700_000_000_000,
				Envelope: delaystore.Envelope{Target: target, Source: "nats:delay.in", Payload: []byte("body-1"),
					Headers: headers.List{{Key: "content-type", Value: "application/json"}, {Key: "X-Tenant", Value: "t-42"}}}},
			{Receipt: delaystore.Receipt{ID: "repeats", Shard: 1, Version: 1}, Due: 1_700_000_000_001,
				Envelope: delaystore.Envelope{Target: target, Source: "kafka:in", Payload: []byte("body-2"), Key: []byte("k1"),
					Headers: headers.List{{Key: "x-multi", Value: "b"}, {Key: "X-Other", Value: "1"}, {Key: "x-multi", Value: "a"},
						{Key: "x-multi", Value: "c"}, {Key: "x-Mixed", Value: "lower"}, {Key: "X-MIXED", Value: "upper"},
						{Key: tracing.IngressSpanKey, Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
						{Key: "nats-msg-id", Value: "not-this-one"}}}},
			{Receipt: delaystore.Receipt{ID: "tombstone", Shard: 1, Version: 2}, Due: 1_700_000_000_002,
				Envelope: delaystore.Envelope{Target: target, Source: "kafka:in", Tombstone: true}},
		}
	}
	receive := func(t *testing.T, p message.Publisher, subject string) map[string]*natsgo.Msg {
		t.Helper()
		sub, err := nc.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		cfg := Config{DLQSubject: "delay.dlq", Lease: 30 * time.Second}
		cfg.defaults()
		d, err := newDelivery(cfg, map[string]message.Publisher{"nats": p}, nil, &redisClock{},
			slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		w := newSettleWaiter()
		c := claimed("nats:" + subject)
		d.submit(context.Background(), batch{shard: 1, claimed: c, fence: time.Now()}, w.settle)
		w.wait(len(c))
		if w.acks != len(c) {
			t.Fatalf("acked %d of %d", w.acks, len(c))
		}
		got := map[string]*natsgo.Msg{}
		for range c {
			m, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got[m.Header.Get(wmnats.MsgIDHeader)] = m
		}
		return got
	}

	for _, subject := range []string{"fast.core", "fast.js"} {
		t.Run(subject, func(t *testing.T) {
			before := fast.calls.Load()
			viaList := receive(t, fast, subject)
			if fast.calls.Load() == before {
				t.Fatal("the fast path was not taken")
			}
			// JetStream deduplicates this second publish (same Nats-Msg-Id, acknowledged as a
			// duplicate), but a core subscriber on the subject still receives it.
			viaWatermill := receive(t, watermillOnly{pub}, subject)
			for _, id := range []string{"plain:3", "repeats:1", "tombstone:2"} {
				a, b := viaList[id], viaWatermill[id]
				if a == nil || b == nil {
					t.Fatalf("%s: fast path %v, watermill %v", id, a, b)
				}
				if a.Subject != b.Subject || !reflect.DeepEqual(a.Header, b.Header) || string(a.Data) != string(b.Data) {
					t.Errorf("%s differs:\nfast path %s %v %q\nwatermill %s %v %q", id, a.Subject, a.Header, a.Data,
						b.Subject, b.Header, b.Data)
				}
			}
			r := viaList["repeats:1"].Header
			if got := r.Values("x-multi"); !reflect.DeepEqual(got, []string{"b", "a", "c"}) {
				t.Errorf("x-multi %v, want [b a c]", got)
			}
			if r["x-Mixed"][0] != "lower" || r["X-MIXED"][0] != "upper" || r.Get("x-kafka-key") != "k1" {
				t.Errorf("names or key header changed: %v", r)
			}
			if _, ok := r[tracing.IngressSpanKey]; ok {
				t.Errorf("reserved header sent: %v", r)
			}
			if got := viaList["tombstone:2"].Header.Get("x-kafka-tombstone"); got != "true" {
				t.Errorf("x-kafka-tombstone %q", got)
			}
		})
	}
}

var _ envelopePublisher = (*wmkafka.Publisher)(nil)
