package ingress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// fastSource is a Subscriber with the fast path (ReceivedSubscriber): Delayed messages come
// from ch as headers.Received. Its watermill Subscribe is never used for them.
type fastSource struct {
	ch      chan *headers.Received
	watered chan string // topics subscribed through Subscribe
}

func newFastSource() *fastSource {
	return &fastSource{ch: make(chan *headers.Received, 100), watered: make(chan string, 10)}
}

// SubscribeReceived hands out what comes on s.ch until ctx ends, then closes the channel
// (as the adapters do).
func (s *fastSource) SubscribeReceived(ctx context.Context, _ string) (<-chan *headers.Received, bool, error) {
	out := make(chan *headers.Received)
	go func() {
		defer close(out)
		for {
			select {
			case r := <-s.ch:
				select {
				case out <- r:
				case <-ctx.Done():
					r.Nack() // not handed out: handed back
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, true, nil
}

// Subscribe records topic and returns a channel that closes when ctx ends.
func (s *fastSource) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.watered <- topic
	out := make(chan *message.Message)
	context.AfterFunc(ctx, func() { close(out) })
	return out, nil
}

func (s *fastSource) Close() error { return nil }

// events records, in order, what happened to fast-path messages: "ack <name>", "nack
// <name>", "dlq <name>".
type events struct {
	mu  sync.Mutex
	log []string
	ch  chan string
}

func newEvents() *events { return &events{ch: make(chan string, 100)} }

func (e *events) add(ev string) {
	e.mu.Lock()
	e.log = append(e.log, ev)
	e.mu.Unlock()
	e.ch <- ev
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

// next returns the next event, failing after 5s.
func (e *events) next(t *testing.T) string {
	t.Helper()
	select {
	case ev := <-e.ch:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatalf("no event within 5s (so far %v)", e.list())
	}
	return ""
}

// recorded is a Settler that records its Ack or Nack (each once, as adapters do), after
// running onAck.
type recorded struct {
	name    string
	ev      *events
	once    sync.Once
	onAck   func()
	replied string
}

func (r *recorded) Ack(reply string) {
	r.once.Do(func() {
		if r.onAck != nil {
			r.onAck()
		}
		r.replied = reply
		r.ev.add("ack " + r.name)
	})
}

func (r *recorded) Nack() { r.once.Do(func() { r.ev.add("nack " + r.name) }) }

// received is a fast-path message named name with source id sid and headers hs.
func receivedMsg(ev *events, name, sid string, hs headers.List) (*headers.Received, *recorded) {
	rec := &recorded{name: name, ev: ev}
	return &headers.Received{Message: headers.Message{ID: name, Headers: hs, Payload: []byte(name)},
		SourceID: sid, SourceTime: "1700000000000", Settle: rec}, rec
}

// dlqRecorder is a dead-letter publisher that records each dead letter by its UUID.
type dlqRecorder struct {
	ev  *events
	mu  sync.Mutex
	got []*message.Message
}

func (d *dlqRecorder) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		d.mu.Lock()
		d.got = append(d.got, m)
		d.mu.Unlock()
		d.ev.add("dlq " + m.UUID)
	}
	return nil
}

func (d *dlqRecorder) Close() error { return nil }

// runFast runs an ingress over src (delay.in, Delayed, and delay.cancel, Cancels) and
// store st; the returned cancel stops it and waits for Run.
func runFast(t *testing.T, st Parker, src *fastSource, ev *events) (*prometheus.Registry, func()) {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq", RetryMin: 5 * time.Millisecond, RetryMax: 10 * time.Millisecond},
		st, []Source{
			{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: src},
			{Broker: intake.BrokerNATS, Topic: "delay.cancel", Kind: Cancels, Subscriber: src},
		}, map[string]message.Publisher{intake.BrokerNATS: &dlqRecorder{ev: ev}}, nil, metrics)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ingress Run: %v", err)
		}
	})
	t.Cleanup(stop)
	return reg, stop
}

// A Delayed source whose Subscriber has the fast path is read through it (the cancel
// source through Subscribe); each message is acked only once the store has it, with its
// headers, source id and time as given; a redelivery of a delivered message (same source
// id) is acked and not parked again.
func TestFastPathParksThenAcks(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	cp := &capturingParker{Store: st, reqs: make(chan delaystore.ParkRequest, 10)}
	src, ev := newFastSource(), newEvents()
	reg, _ := runFast(t, cp, src, ev)
	if topic := <-src.watered; topic != "delay.cancel" {
		t.Fatalf("Subscribe(%q), want only the cancel topic through watermill", topic)
	}
	hs := headers.List{{Key: "trace", Value: "a"}, {Key: "trace", Value: "b"}, {Key: "x-delay", Value: "0"},
		{Key: "x-delay-id", Value: "f-1"}, {Key: "x-target", Value: "a.b"}}
	r, rec := receivedMsg(ev, "m1", "js:IN:7", hs)
	rec.onAck = func() {
		if _, err := st.Get(context.Background(), "f-1"); err != nil {
			t.Errorf("acked before the store had it: %v", err)
		}
	}
	src.ch <- r
	if e := ev.next(t); e != "ack m1" {
		t.Fatalf("event %q, want ack m1", e)
	}
	m := waitGet(t, st, "f-1")
	want := headers.List{{Key: "trace", Value: "a"}, {Key: "trace", Value: "b"}, {Key: "x-delay-hops", Value: "1"}}
	if !slices.Equal(m.Envelope.Headers, want) || m.Envelope.SourceID != "js:IN:7" || string(m.Envelope.Payload) != "m1" ||
		m.Envelope.Source != "nats:delay.in" {
		t.Fatalf("parked %+v, want headers %v from js:IN:7", m.Envelope, want)
	}
	if r := <-cp.reqs; r.Published != 1700000000000 {
		t.Fatalf("published %d, want the source time 1700000000000", r.Published)
	}

	deliver(t, st, "f-1")
	again, _ := receivedMsg(ev, "m1-again", "js:IN:7", hs)
	src.ch <- again
	if e := ev.next(t); e != "ack m1-again" {
		t.Fatalf("event %q, want ack m1-again", e)
	}
	if _, err := st.Get(context.Background(), "f-1"); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("the redelivery was parked again: %v", err)
	}
	// The batch's counts follow its acks (ingress/park.go): wait for them.
	n := counterValue(t, reg, "delaybridge_messages_in_total", "broker", intake.BrokerNATS, "result", "already_delivered")
	for deadline := time.Now().Add(5 * time.Second); n != 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // poll interval
		n = counterValue(t, reg, "delaybridge_messages_in_total", "broker", intake.BrokerNATS, "result", "already_delivered")
	}
	if n != 1 {
		t.Fatalf("already_delivered %v, want 1", n)
	}
}

// A message that fails validation is dead-lettered (its id, headers, payload and
// x-delay-error) and only then acked, with the error as reply.
func TestFastPathRejectDeadLettersThenAcks(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	src, ev := newFastSource(), newEvents()
	runFast(t, st, src, ev)
	r, rec := receivedMsg(ev, "bad", "js:IN:8", headers.List{{Key: "Nats-Rollup", Value: "all"}, {Key: "x-delay", Value: "1d"}, {Key: "x-target", Value: "a.b"}})
	src.ch <- r
	if a, b := ev.next(t), ev.next(t); a != "dlq bad" || b != "ack bad" {
		t.Fatalf("events %q, %q; want the dead letter, then the ack", a, b)
	}
	if rec.replied == "" {
		t.Fatal("no error reply with the ack")
	}
	s, err := st.Stats(context.Background())
	if err != nil || s.Parked != 0 {
		t.Fatalf("invalid message parked: %+v %v", s, err)
	}
}

// capturingParker parks and keeps the requests on reqs (when there is room).
type capturingParker struct {
	*delaystore.Store
	reqs chan delaystore.ParkRequest
}

func (c *capturingParker) Park(ctx context.Context, reqs []delaystore.ParkRequest) ([]delaystore.Parked, error) {
	for _, r := range reqs {
		select {
		case c.reqs <- r:
		default:
		}
	}
	return c.Store.Park(ctx, reqs)
}

// failingParker fails every park, counting the calls.
type failingParker struct {
	*delaystore.Store
	calls chan int
}

func (f *failingParker) Park(_ context.Context, reqs []delaystore.ParkRequest) ([]delaystore.Parked, error) {
	select {
	case f.calls <- len(reqs):
	default:
	}
	return nil, errors.New("redis unavailable")
}

// While the store fails nothing is acked; when ingress stops (ctx cancelled) with a
// batch still being retried, every message of the batch is nacked, none acked.
func TestFastPathFailedParkNacksOnStop(t *testing.T) {
	st := &failingParker{Store: storetest.New(t, 5*time.Second), calls: make(chan int, 1)}
	src, ev := newFastSource(), newEvents()
	_, stop := runFast(t, st, src, ev)
	for i := range 3 {
		r, _ := receivedMsg(ev, fmt.Sprintf("n%d", i), fmt.Sprintf("js:IN:%d", 20+i), headers.List{
			{Key: "x-delay", Value: "1h"}, {Key: "x-target", Value: "a.b"}})
		src.ch <- r
	}
	select {
	case <-st.calls:
	case <-time.After(5 * time.Second):
		t.Fatal("no park attempt")
	}
	time.Sleep(20 * time.Millisecond) // a few retries
	if got := ev.list(); len(got) != 0 {
		t.Fatalf("settled while the store fails: %v", got)
	}
	stop()
	got := ev.list()
	slices.Sort(got)
	if want := []string{"nack n0", "nack n1", "nack n2"}; !slices.Equal(got, want) {
		t.Fatalf("after stop %v, want %v", got, want)
	}
}

// A core request (Received.Request) gets the park's answer as the ack's reply.
func TestFastPathRequestReply(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	src, ev := newFastSource(), newEvents()
	runFast(t, st, src, ev)
	r, rec := receivedMsg(ev, "q", "", headers.List{{Key: contract.HeaderDelay, Value: "1h"}, {Key: contract.HeaderTarget, Value: "a.b"},
		{Key: contract.HeaderID, Value: "q-1"}})
	r.Request = true
	src.ch <- r
	if e := ev.next(t); e != "ack q" {
		t.Fatalf("event %q", e)
	}
	if want := `{"id":"q-1","due":`; len(rec.replied) < len(want) || rec.replied[:len(want)] != want {
		t.Fatalf("reply %q, want the park's answer", rec.replied)
	}
}
