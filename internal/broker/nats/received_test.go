package nats_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/internal/broker/brokertest"
	wmnats "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// subscribeReceived subscribes to topic through the fast path, which it must have.
func (e *env) subscribeReceived(t *testing.T, ctx context.Context, cfg wmnats.SubscriberConfig, topic string) (*wmnats.Subscriber, <-chan *headers.Received) {
	t.Helper()
	s := e.subscriber(t, cfg)
	ch, ok, err := s.SubscribeReceived(ctx, topic)
	if err != nil || !ok {
		t.Fatalf("SubscribeReceived(%s) = %v, %v; want the fast path", topic, ok, err)
	}
	return s, ch
}

func nextReceived(t *testing.T, ch <-chan *headers.Received) *headers.Received {
	t.Helper()
	return brokertest.NextReceived(t, ch, waitFor)
}

// The fast path gives what Subscribe's metadata gives: Nats-Msg-Id as the ID, the headers
// in sorted key order with a repeated key's values in order, no Nats-Msg-Id header, a
// producer's reserved ones as headers (intake refuses them; never taken as the source id
// or request mark), the source id and time (unix ms); its Ack moves the consumer's ack
// floor.
func TestSubscribeReceivedMessage(t *testing.T) {
	e := newEnv(t)
	_, ch := e.subscribeReceived(t, context.Background(), wmnats.SubscriberConfig{Stream: "S"}, "js.fast")
	m := natsgo.NewMsg("js.fast")
	m.Header["x"] = []string{"1", "2"}
	m.Header["B-Key"] = []string{"b"}
	m.Header["Nats-Msg-Id"] = []string{"id-1"}
	m.Header[headers.MetaSourceID] = []string{"js:X:666"} // a header, never the source id
	m.Header[headers.MetaRequest] = []string{"1"}         // a header, never the request mark
	m.Data = []byte("payload")
	sent := time.Now()
	if err := e.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	got := nextReceived(t, ch)
	want := headers.List{{Key: "B-Key", Value: "b"}, {Key: headers.MetaRequest, Value: "1"}, {Key: headers.MetaSourceID, Value: "js:X:666"},
		{Key: "x", Value: "1"}, {Key: "x", Value: "2"}}
	if got.ID != "id-1" || string(got.Payload) != "payload" || !slices.Equal(got.Headers, want) {
		t.Fatalf("got id %q payload %q headers %v; want id-1, payload, %v", got.ID, got.Payload, got.Headers, want)
	}
	if got.SourceID != "js:S:1" || got.Request {
		t.Fatalf("source id %q request %v, want js:S:1, not a request", got.SourceID, got.Request)
	}
	if st, err := strconv.ParseInt(got.SourceTime, 10, 64); err != nil || st < sent.UnixMilli()-1000 || st > time.Now().UnixMilli()+1000 {
		t.Fatalf("source time %q, want the message time near %d", got.SourceTime, sent.UnixMilli())
	}
	got.Ack("ignored")
	pollConsumerAcked(t, e, "S", "js_fast", 1)
}

// A Nack is a Nak: the same message (same source id) comes again at once (AckWait is 30s).
func TestSubscribeReceivedNackRedelivers(t *testing.T) {
	e := newEnv(t)
	_, ch := e.subscribeReceived(t, context.Background(), wmnats.SubscriberConfig{Stream: "S"}, "js.nack")
	if err := e.nc.Publish("js.nack", []byte("x")); err != nil {
		t.Fatal(err)
	}
	first := nextReceived(t, ch)
	first.Nack()
	again := nextReceived(t, ch)
	if again.SourceID != first.SourceID || again.SourceID != "js:S:1" {
		t.Fatalf("redelivered %q, want %q", again.SourceID, first.SourceID)
	}
	again.Ack("")
	pollConsumerAcked(t, e, "S", "js_nack", 1)
}

// Only the first Ack or Nack settles a message and frees its place: with MaxAckPending 1,
// a second Ack neither blocks nor frees a place twice, and the next message comes after
// the first is settled.
func TestSubscribeReceivedSettlesOnce(t *testing.T) {
	e := newEnv(t)
	_, ch := e.subscribeReceived(t, context.Background(), wmnats.SubscriberConfig{Stream: "S", MaxAckPending: 1}, "js.once")
	for i := range 3 {
		if err := e.nc.Publish("js.once", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		r := nextReceived(t, ch)
		if string(r.Payload) != strconv.Itoa(i) {
			t.Fatalf("message %d: payload %q", i, r.Payload)
		}
		select {
		case extra := <-ch:
			t.Fatalf("message %q handed out while %d is unsettled (MaxAckPending 1)", extra.Payload, i)
		case <-time.After(50 * time.Millisecond):
		}
		r.Ack("")
		r.Ack("")
		r.Nack() // settled already: no Nak, no second release
	}
	pollConsumerAcked(t, e, "S", "js_once", 3)
}

// A topic the stream does not capture has no fast path: ok false and nothing subscribed;
// so has a Subscriber without a stream.
func TestSubscribeReceivedCoreTopic(t *testing.T) {
	e := newEnv(t)
	for _, cfg := range []wmnats.SubscriberConfig{{Stream: "S"}, {}} {
		s := e.subscriber(t, cfg)
		ch, ok, err := s.SubscribeReceived(context.Background(), "core.x")
		if ch != nil || ok || err != nil {
			t.Fatalf("stream %q: SubscribeReceived(core.x) = %v, %v, %v; want no fast path", cfg.Stream, ch, ok, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		expectNoGoroutinesOf(t, s)
	}
}

// Cancelling the context closes the channel; a message handed out before can still be
// acked; a message in a batch fetched but not handed out is handed back (Nak) and comes
// again to the next subscription at once.
func TestSubscribeReceivedCancelMidBatch(t *testing.T) {
	e := newEnv(t)
	for i := range 5 {
		if err := e.nc.Publish("js.cancel", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg := wmnats.SubscriberConfig{Stream: "S"}
	s, ch := e.subscribeReceived(t, ctx, cfg, "js.cancel")
	held := nextReceived(t, ch)
	cancel()
	for r := range ch { // the channel closes; what was not taken is handed back
		r.Nack()
	}
	held.Ack("")
	pollConsumerAcked(t, e, "S", "js_cancel", 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, ch2 := e.subscribeReceived(t, context.Background(), cfg, "js.cancel")
	r := nextReceived(t, ch2) // long before AckWait (30s): handed back, not timed out
	if r.SourceID == held.SourceID {
		t.Fatalf("the acked message %s came again", r.SourceID)
	}
	r.Ack("")
}

// After Close, Ack sends nothing (as Subscribe's messages): the message is redelivered
// after AckWait.
func TestSubscribeReceivedAckAfterClose(t *testing.T) {
	e := newEnv(t)
	cfg := wmnats.SubscriberConfig{Stream: "S", AckWait: 500 * time.Millisecond, MaxProgress: -1}
	s, ch := e.subscribeReceived(t, context.Background(), cfg, "js.closed")
	if err := e.nc.Publish("js.closed", []byte("x")); err != nil {
		t.Fatal(err)
	}
	held := nextReceived(t, ch)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	held.Ack("")
	_, ch2 := e.subscribeReceived(t, context.Background(), cfg, "js.closed")
	again := nextReceived(t, ch2)
	if again.SourceID != held.SourceID {
		t.Fatalf("got %s, want %s again", again.SourceID, held.SourceID)
	}
	again.Ack("")
}
