package e2e

import (
	"context"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestOrderingKeyStuckHead: the head of a key goes to a target that fails every publish
// (a JetStream stream that is full and discards new messages); its successors, to a
// healthy target, wait however long: the listing shows each held_by the one before, the
// head with its failed attempts. A bulk deliver-now of the held successors changes them
// (their due time, not their place): they stay held. Cancelling the head (with its key)
// releases them: both are delivered, in parking order.
func TestOrderingKeyStuckHead(t *testing.T) {
	s := newStack(t)
	full := s.name("stuck.full")
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream := s.streamName("STUCKFULL")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{full}, MaxMsgs: 1, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	if s.ns != "" {
		t.Cleanup(func() { deleteStream(t, s.nc, stream) })
	}
	if _, err := js.Publish(ctx, full, []byte("fills the stream")); err != nil {
		t.Fatal(err)
	}
	env := maps.Clone(s.env)
	env["BRIDGE_MAX_ATTEMPTS"] = "1000"
	env["BRIDGE_RETRY_BACKOFF"] = "100ms"
	b := startBridge(t, env)
	c := &client.Client{Base: "http://" + b.APIAddr}
	healthy := s.name("stuck.ok")
	out := subscribe(t, s.nc, healthy)
	const key = "order-stuck"
	for _, m := range []struct{ id, target, delay string }{
		{"head", full, "0"},
		{"next-1", healthy, "0"},
		{"next-2", healthy, `"1h"`},
	} {
		if _, err := c.Send(t.Context(), httpapi.PostRequest{ID: m.id, Target: m.target, OrderingKey: key, Delay: []byte(m.delay), Payload: &m.id}); err != nil {
			t.Fatalf("send %s: %v", m.id, err)
		}
	}

	listed := func() map[string]httpapi.ListedMessage {
		t.Helper()
		l, err := c.List(t.Context(), url.Values{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]httpapi.ListedMessage{}
		for _, m := range l.Messages {
			got[m.ID] = m
		}
		return got
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		if l := listed(); l["head"].Attempts >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the head was not retried: %+v", listed())
		}
		time.Sleep(100 * time.Millisecond)
	}
	l := listed()
	if len(l) != 3 || l["head"].HeldBy != "" || l["next-1"].HeldBy != "head" || l["next-2"].HeldBy != "next-1" {
		t.Fatalf("while the head is stuck: %+v; want next-1 held by head, next-2 by next-1", l)
	}
	select {
	case a := <-out:
		t.Fatalf("%s delivered while the head was stuck", a.msg.Data)
	default:
	}

	res, err := c.Bulk(t.Context(), "deliver-now", httpapi.BulkRequest{Target: healthy})
	if err != nil || res.Matched != 2 || res.Changed != 2 {
		t.Fatalf("bulk deliver-now of the held successors = %+v, %v; want 2 matched and changed", res, err)
	}
	l = listed()
	if l["next-2"].HeldBy != "next-1" || l["next-1"].HeldBy != "head" || l["next-2"].Due > time.Now().UnixMilli() {
		t.Fatalf("after the bulk change: %+v; want both still held, next-2 due now", l)
	}
	select {
	case a := <-out:
		t.Fatalf("%s delivered after a bulk change, while the head was stuck", a.msg.Data)
	case <-time.After(time.Second):
	}

	if ok, err := c.CancelKey(t.Context(), "head", key); !ok || err != nil {
		t.Fatalf("cancel the stuck head = %v, %v", ok, err)
	}
	for _, want := range []string{"next-1", "next-2"} {
		if a := receive(t, out, 15*time.Second); string(a.msg.Data) != want {
			t.Fatalf("delivered %q, want %q", a.msg.Data, want)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); len(listed()) != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("left parked after delivery: %+v", listed())
		}
	}
}
