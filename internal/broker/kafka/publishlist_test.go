package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	wmkafka "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// PublishList (egress's fast path) writes the same records as Publish does with the
// watermill message of each (headers.Message's Key and Tombstone as the reserved metadata
// MetaKafkaKey and MetaKafkaTombstone): headers in order with repeats, no reserved keys,
// the UUID header replacing one of that name, the key (null, empty, set), the value (null
// for a tombstone, empty and not null for an empty payload).
func TestPublishListSameRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "list", 1)
	pub := e.publisher(t, wmkafka.PublisherConfig{UUIDHeader: "wm-uuid"})
	msgs := []headers.Message{
		{ID: "plain", Payload: []byte("one"), Key: []byte("k1"),
			Headers: headers.List{{Key: "x-multi", Value: "b"}, {Key: "X-Other", Value: "1"}, {Key: "x-multi", Value: "a"},
				{Key: headers.ReservedPrefix + "secret", Value: "no"}, {Key: "WM-UUID", Value: "not-this-one"}}},
		{ID: "nullkey", Payload: []byte("two")},
		{ID: "emptykey", Payload: nil, Key: []byte{}},
		{ID: "tombstone", Payload: []byte("ignored"), Key: []byte("k4"), Tombstone: true},
	}
	if err := pub.PublishList(context.Background(), "list", msgs); err != nil {
		t.Fatal(err)
	}
	wm := make([]*message.Message, len(msgs))
	for i, m := range msgs {
		wm[i] = message.NewMessage(m.ID, m.Payload)
		wm[i].Metadata = headers.ToMetadata(m.Headers, nil)
		if m.Key != nil {
			wm[i].Metadata[headers.MetaKafkaKey] = string(m.Key)
		}
		if m.Tombstone {
			wm[i].Metadata[headers.MetaKafkaTombstone] = "1"
		}
	}
	if err := pub.Publish("list", wm...); err != nil {
		t.Fatal(err)
	}
	recs := consume(t, e, "list", 2*len(msgs))
	for i := range msgs {
		a, b := recs[i], recs[len(msgs)+i]
		if describe(a) != describe(b) {
			t.Errorf("%s differs:\nPublishList %s\nPublish     %s", msgs[i].ID, describe(a), describe(b))
		}
	}
	if d := describe(recs[0]); d != `key "k1" value "one" headers [x-multi=b X-Other=1 x-multi=a wm-uuid=plain]` {
		t.Errorf("record 0 = %s", d)
	}
	if recs[1].Key != nil || recs[2].Key == nil || len(recs[2].Key) != 0 || recs[2].Value == nil || recs[3].Value != nil {
		t.Errorf("keys %v %v, values %v %v: want null key, empty key, empty value, null value",
			recs[1].Key, recs[2].Key, recs[2].Value, recs[3].Value)
	}
}

// describe is a record's key, value and headers; nil and empty told apart.
func describe(r *kgo.Record) string {
	q := func(b []byte) string {
		if b == nil {
			return "null"
		}
		return fmt.Sprintf("%q", b)
	}
	var hs bytes.Buffer
	for i, h := range r.Headers {
		if i > 0 {
			hs.WriteByte(' ')
		}
		fmt.Fprintf(&hs, "%s=%s", h.Key, h.Value)
	}
	return fmt.Sprintf("key %s value %s headers [%s]", q(r.Key), q(r.Value), hs.String())
}

// PublishList reports as Publish does: a message of a done context fails by its ID, the
// others are written; after Close it fails with ErrClosed.
func TestPublishListErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "listerr", 1)
	pub := e.publisher(t, wmkafka.PublisherConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := pub.PublishList(ctx, "listerr", []headers.Message{{ID: "late", Payload: []byte("x")}})
	var perr interface{ FailedMessages() map[string]error }
	if !errors.As(err, &perr) || perr.FailedMessages()["late"] == nil {
		t.Fatalf("PublishList with a done context = %v, want a failure of \"late\"", err)
	}
	if err := pub.PublishList(context.Background(), "listerr", []headers.Message{{ID: "ok", Payload: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	if r := consume(t, e, "listerr", 1)[0]; string(r.Value) != "y" {
		t.Fatalf("record = %q", r.Value)
	}
	_ = pub.Close()
	if err := pub.PublishList(context.Background(), "listerr", []headers.Message{{ID: "closed"}}); !errors.Is(err, wmkafka.ErrClosed) {
		t.Fatalf("PublishList after Close = %v, want ErrClosed", err)
	}
}
