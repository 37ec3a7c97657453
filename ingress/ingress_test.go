package ingress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// broker is an in-process watermill Pub/Sub that redelivers nacked messages.
func newBroker(t *testing.T) *gochannel.GoChannel {
	t.Helper()
	gc := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1000}, watermill.NopLogger{})
	t.Cleanup(func() { gc.Close() })
	return gc
}

func testRules() intake.Rules {
	return intake.Rules{
		MaxDelay:   24 * time.Hour,
		MaxPayload: 1 << 20,
		Targets: intake.TargetPolicy{
			Brokers: map[string]bool{intake.BrokerNATS: true},
			Allow:   []string{"*"},
			Own:     map[string][]string{intake.BrokerNATS: {"delay.in", "delay.cancel", "delay.dlq"}},
		},
	}
}

// send publishes a message with headers hs and reserved metadata extra.
func send(t *testing.T, gc *gochannel.GoChannel, topic string, payload string, hs headers.List, extra map[string]string) *message.Message {
	t.Helper()
	m := message.NewMessage(watermill.NewUUID(), []byte(payload))
	m.Metadata = headers.ToMetadata(hs, extra)
	if err := gc.Publish(topic, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func runIngress(t *testing.T, st Parker, gc *gochannel.GoChannel) {
	t.Helper()
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq"}, st, []Source{
		{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: gc},
		{Broker: intake.BrokerNATS, Topic: "delay.cancel", Kind: Cancels, Subscriber: gc},
	}, map[string]message.Publisher{intake.BrokerNATS: gc}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	time.Sleep(50 * time.Millisecond) // gochannel drops messages published before Subscribe
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ingress Run: %v", err)
		}
	})
}

func waitGet(t *testing.T, st *delaystore.Store, id string) delaystore.Message {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := st.Get(context.Background(), id)
		if err == nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not parked: %v", id, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestParksWithForwardedHeaders(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	runIngress(t, st, gc)
	before := time.Now()
	send(t, gc, "delay.in", "hello", headers.List{
		{Key: "X-Delay", Value: "PT2S"}, {Key: "X-Target", Value: "orders.timeout"}, {Key: "x-delay-id", Value: "o-1"},
		{Key: "trace", Value: "a"}, {Key: "trace", Value: "b"}, {Key: "Nats-Rollup", Value: "all"},
		{Key: "x-delay-due", Value: "1"}, {Key: "x-delay-source", Value: "forged"},
		{Key: "x-delay-error", Value: "forged"}, {Key: "x-delay-hops", Value: "2"},
	}, nil)
	m := waitGet(t, st, "o-1")
	if m.Envelope.Target != "nats:orders.timeout" || m.Envelope.Source != "nats:delay.in" || string(m.Envelope.Payload) != "hello" {
		t.Fatalf("envelope = %+v", m.Envelope)
	}
	want := headers.List{{Key: "trace", Value: "a"}, {Key: "trace", Value: "b"}, {Key: "x-delay-hops", Value: "3"}}
	if !slices.Equal(m.Envelope.Headers, want) {
		t.Fatalf("forwarded headers = %v, want %v", m.Envelope.Headers, want)
	}
	if d := time.UnixMilli(m.Due).Sub(before); d < 1900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("due %s after sending, want ~2s", d)
	}
}

func TestInvalidToDeadLetterAndAcked(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	dctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dlq, err := gc.Subscribe(dctx, "delay.dlq")
	if err != nil {
		t.Fatal(err)
	}
	runIngress(t, st, gc)
	send(t, gc, "delay.in", "bad", headers.List{{Key: "x-delay", Value: "1d"}, {Key: "x-target", Value: "a.b"}, {Key: "k", Value: "v"}}, nil)
	select {
	case m := <-dlq:
		m.Ack()
		hs := headers.FromMetadata(m.Metadata)
		e, _ := hs.Get(contract.HeaderError)
		if !strings.HasPrefix(e, "invalid_delay: ") {
			t.Fatalf("x-delay-error = %q", e)
		}
		if v, _ := hs.Get("x-delay"); v != "1d" {
			t.Fatalf("original header lost: %v", hs)
		}
		if string(m.Payload) != "bad" {
			t.Fatalf("payload %q", m.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no dead letter")
	}
	s, err := st.Stats(context.Background())
	if err != nil || s.Parked != 0 {
		t.Fatalf("invalid message parked: %+v %v", s, err)
	}
}

// A producer's header named with the reserved prefix (lower case: the adapters' own
// metadata names) reaches intake as a header and is refused, dead-lettered with
// invalid_headers naming it, never dropped silently; a forged source id header is not
// taken as the source id (the message is not parked under it).
func TestReservedHeaderOfAProducerIsRefused(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	dctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dlq, err := gc.Subscribe(dctx, "delay.dlq")
	if err != nil {
		t.Fatal(err)
	}
	runIngress(t, st, gc)
	for _, name := range []string{headers.ReservedPrefix + "x", headers.MetaSourceID, headers.MetaHeaders} {
		t.Run(name, func(t *testing.T) {
			send(t, gc, "delay.in", "p", headers.List{{Key: "x-delay", Value: "1h"}, {Key: "x-target", Value: "a.b"}, {Key: name, Value: "js:S:1"}},
				map[string]string{headers.MetaSourceID: "js:S:2"})
			select {
			case m := <-dlq:
				m.Ack()
				e, _ := headers.FromMetadata(m.Metadata).Get(contract.HeaderError)
				if !strings.HasPrefix(e, "invalid_headers: ") || !strings.Contains(e, `"`+name+`"`) {
					t.Fatalf("x-delay-error = %q, want invalid_headers naming %s", e, name)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no dead letter")
			}
			for _, id := range []string{"js:S:1", "js:S:2"} {
				if _, err := st.Get(context.Background(), id); !errors.Is(err, delaystore.ErrNotFound) {
					t.Fatalf("%s: %v, want not parked", id, err)
				}
			}
		})
	}
}

func TestCancel(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	runIngress(t, st, gc)
	send(t, gc, "delay.in", "x", headers.List{{Key: "x-delay", Value: "1h"}, {Key: "x-target", Value: "a.b"}, {Key: "x-delay-id", Value: "c-1"}}, nil)
	waitGet(t, st, "c-1")
	send(t, gc, "delay.cancel", "", headers.List{{Key: "X-Delay-Id", Value: "c-1"}}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := st.Get(context.Background(), "c-1"); errors.Is(err, delaystore.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not cancelled")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// flakyParker fails the first fail calls; with crashAfterPark it applies the park and
// still reports an error (the process "died" after Redis had the message, before the ack).
type flakyParker struct {
	*delaystore.Store
	fail           atomic.Int64
	crashAfterPark bool
	calls          atomic.Int64
}

func (f *flakyParker) Park(ctx context.Context, reqs []delaystore.ParkRequest) ([]delaystore.Parked, error) {
	f.calls.Add(1)
	if f.fail.Add(-1) >= 0 {
		if f.crashAfterPark {
			if _, err := f.Store.Park(ctx, reqs); err != nil {
				return nil, err
			}
		}
		return nil, errors.New("redis unavailable")
	}
	return f.Store.Park(ctx, reqs)
}

// TestStoreOutageNeitherAcksNorLoses: while the store fails nothing is acked; after it
// recovers the message is parked exactly once, even when the failure happened after
// Redis applied the park (idempotent by source id).
func TestStoreOutageNeitherAcksNorLoses(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "store down"
		if crash {
			name = "crash between park and ack"
		}
		t.Run(name, func(t *testing.T) {
			st := storetest.New(t, 5*time.Second)
			gc := newBroker(t)
			f := &flakyParker{Store: st, crashAfterPark: crash}
			f.fail.Store(3)
			runIngress(t, f, gc)
			send(t, gc, "delay.in", "x", headers.List{{Key: "x-delay", Value: "1h"}, {Key: "x-target", Value: "a.b"}},
				map[string]string{headers.MetaSourceID: "js:IN:42"})
			deadline := time.Now().Add(10 * time.Second)
			for f.calls.Load() < 4 {
				if time.Now().After(deadline) {
					t.Fatalf("%d park calls, want retries until the store answers", f.calls.Load())
				}
				time.Sleep(5 * time.Millisecond)
			}
			waitGet(t, st, "js:IN:42")
			s, err := st.Stats(context.Background())
			if err != nil || s.Parked != 1 {
				t.Fatalf("parked %d, want exactly 1 (%v)", s.Parked, err)
			}
		})
	}
}

// orderedSource is a message.Subscriber that hands out msgs in order on one topic.
type orderedSource struct{ msgs []*message.Message }

func (o *orderedSource) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	ch := make(chan *message.Message)
	go func() {
		defer close(ch)
		for _, m := range o.msgs {
			select {
			case ch <- m:
			case <-ctx.Done():
				return
			}
		}
		<-ctx.Done()
	}()
	return ch, nil
}

func (o *orderedSource) Close() error { return nil }

// TestSameIDKeepsOrder: batches are parked in parallel lanes, yet the messages of one id
// are parked in the order they came, so the last one wins.
func TestSameIDKeepsOrder(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	const ids, versions = 200, 5
	src := &orderedSource{}
	for i := range ids {
		for v := range versions {
			m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(v)))
			m.Metadata = headers.ToMetadata(headers.List{
				{Key: "x-delay", Value: "1h"}, {Key: "x-target", Value: "orders.timeout"},
				{Key: "x-delay-id", Value: fmt.Sprintf("id-%d", i)},
			}, nil)
			src.msgs = append(src.msgs, m)
		}
	}
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq", BatchSize: 16}, st,
		[]Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: src}},
		map[string]message.Publisher{intake.BrokerNATS: newBroker(t)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	for i, m := range src.msgs {
		select {
		case <-m.Acked():
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d not acked", i)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint(versions - 1)
	for i := range ids {
		m, err := st.Get(context.Background(), fmt.Sprintf("id-%d", i))
		if err != nil || string(m.Envelope.Payload) != want {
			t.Fatalf("id-%d: parked %q (err %v), want the last version %q", i, m.Envelope.Payload, err, want)
		}
	}
}

// TestRetriedParkKeepsDueFromReceipt: a relative delay counts from the moment ingress
// received the message, not from the park attempt that finally succeeded after the store
// failed for a while.
func TestRetriedParkKeepsDueFromReceipt(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	f := &flakyParker{Store: st}
	f.fail.Store(5) // backoff 50+100+200+400+800 ms
	runIngress(t, f, gc)
	sent := time.Now()
	send(t, gc, "delay.in", "x", headers.List{{Key: "x-delay", Value: "2s"}, {Key: "x-target", Value: "a.b"}},
		map[string]string{headers.MetaSourceID: "js:IN:7"})
	m := waitGet(t, st, "js:IN:7")
	if f.calls.Load() < 6 {
		t.Fatalf("%d park calls, want 5 failures then success", f.calls.Load())
	}
	if late := time.UnixMilli(m.Due).Sub(sent.Add(2 * time.Second)); late > 500*time.Millisecond {
		t.Fatalf("due %s after receipt + delay: the retries' 1.5 s were added", late)
	}
}

// runUntilCleanup runs in until the test ends: its cleanup (registered now, so it runs
// before those registered earlier, such as the store's) cancels Run and reports its error.
func runUntilCleanup(t *testing.T, in *Ingress) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
