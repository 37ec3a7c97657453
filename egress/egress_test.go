package egress

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/headers"
)

func newBroker(t *testing.T) *gochannel.GoChannel {
	t.Helper()
	gc := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10000}, watermill.NopLogger{})
	t.Cleanup(func() { gc.Close() })
	return gc
}

type got struct {
	msg *message.Message
	at  time.Time
}

func collect(t *testing.T, sub message.Subscriber, topic string) chan got {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	in, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan got, 10000)
	go func() {
		for m := range in {
			out <- got{m, time.Now()}
			m.Ack()
		}
	}()
	return out
}

func runEgress(t *testing.T, cfg Config, st Claimer, pubs map[string]message.Publisher) {
	t.Helper()
	startEgress(t, cfg, st, pubs)
}

func park(t *testing.T, st *delaystore.Store, id string, delay time.Duration, target string, hs headers.List) delaystore.Parked {
	t.Helper()
	p, err := st.Park(context.Background(), []delaystore.ParkRequest{{
		ID: id, Replace: true, Delay: delay,
		Envelope: delaystore.Envelope{Target: target, Source: "nats:delay.in", Headers: hs, Payload: []byte("body-" + id)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

func waitFor(t *testing.T, ch chan got, within time.Duration) got {
	t.Helper()
	select {
	case g := <-ch:
		return g
	case <-time.After(within):
		t.Fatalf("nothing arrived within %s", within)
		return got{}
	}
}

func waitEmpty(t *testing.T, st *delaystore.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := st.Stats(context.Background())
		if err == nil && s.Parked == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("store still holds %d messages", s.Parked)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeliversEachOnceNeverEarly: due messages are published once each, with the output
// headers of docs/contract.md section 2, never before their due time, and removed from the store.
func TestDeliversEachOnceNeverEarly(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "orders.timeout")
	const n = 300
	due := map[string]int64{}
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		p := park(t, st, id, time.Duration(i%50)*10*time.Millisecond, "nats:orders.timeout",
			headers.List{{Key: "k", Value: "1"}, {Key: "k", Value: "2"}})
		due[id] = p.Due
	}
	runEgress(t, Config{BatchSize: 32}, st, map[string]message.Publisher{"nats": gc})
	seen := map[string]bool{}
	for len(seen) < n {
		g := waitFor(t, out, 10*time.Second)
		hs := headers.FromMetadata(g.msg.Metadata)
		id, _ := hs.Get(contract.HeaderID)
		if seen[id] {
			t.Fatalf("%s delivered twice", id)
		}
		seen[id] = true
		if g.at.UnixMilli() < due[id] {
			t.Fatalf("%s delivered %dms early", id, due[id]-g.at.UnixMilli())
		}
		if d, _ := hs.Get(contract.HeaderDue); d != strconv.FormatInt(due[id], 10) {
			t.Fatalf("%s: x-delay-due %q, want %d", id, d, due[id])
		}
		if s, _ := hs.Get(contract.HeaderSource); s != "nats:delay.in" {
			t.Fatalf("x-delay-source %q", s)
		}
		if v := hs.Values("k"); len(v) != 2 || v[0] != "1" || v[1] != "2" {
			t.Fatalf("repeated header = %v", v)
		}
		if string(g.msg.Payload) != "body-"+id {
			t.Fatalf("payload %q", g.msg.Payload)
		}
	}
	waitEmpty(t, st)
}

// TestWokenByParkNotByPolling: with the safety resync an hour away, a message parked after
// egress went to sleep on an empty store still goes out, so the wake-up channel works.
func TestWokenByParkNotByPolling(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "wake.test")
	runEgress(t, Config{ResyncInterval: time.Hour}, st, map[string]message.Publisher{"nats": gc})
	time.Sleep(100 * time.Millisecond) // let the workers find the store empty and sleep
	park(t, st, "late", 200*time.Millisecond, "nats:wake.test", nil)
	park(t, st, "early", 20*time.Millisecond, "nats:wake.test", nil) // earlier head on a shard
	for range 2 {
		waitFor(t, out, 5*time.Second)
	}
}

// flaky is a target broker that fails topics listed in failTopic, and can report a
// partial failure for listed UUIDs.
type flaky struct {
	message.Publisher
	mu        sync.Mutex
	failTopic map[string]bool
	failUUID  map[string]bool
	forbid    map[string]bool // topics rejected for good (a Rejection)
	calls     atomic.Int64
}

type forbidden struct{}

func (forbidden) Error() string        { return "permissions violation" }
func (forbidden) RejectReason() string { return "forbidden" }

type partialErr map[string]error

func (p partialErr) Error() string                    { return fmt.Sprintf("%d messages failed", len(p)) }
func (p partialErr) FailedMessages() map[string]error { return p }

func (f *flaky) Publish(topic string, msgs ...*message.Message) error {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failTopic[topic] {
		return errors.New("broker says no")
	}
	if f.forbid[topic] {
		return fmt.Errorf("publish to %s: %w", topic, forbidden{})
	}
	failed := partialErr{}
	var ok []*message.Message
	for _, m := range msgs {
		if f.failUUID[m.UUID] {
			failed[m.UUID] = errors.New("rejected")
		} else {
			ok = append(ok, m)
		}
	}
	if err := f.Publisher.Publish(topic, ok...); err != nil {
		return err
	}
	if len(failed) > 0 {
		return failed
	}
	return nil
}

// TestRetryThenDeadLetter: a target that always fails makes the message go to the
// dead-letter subject of its source broker after MaxAttempts, with x-delay-error and
// x-target; the store is then empty.
func TestRetryThenDeadLetter(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	dlq := collect(t, gc, "delay.dlq")
	f := &flaky{Publisher: gc, failTopic: map[string]bool{"broken": true}}
	runEgress(t, Config{MaxAttempts: 3, BackoffMin: 10 * time.Millisecond}, st, map[string]message.Publisher{"nats": f})
	park(t, st, "doomed", 0, "nats:broken", headers.List{{Key: "tenant", Value: "acme"}})
	g := waitFor(t, dlq, 10*time.Second)
	hs := headers.FromMetadata(g.msg.Metadata)
	if e, _ := hs.Get(contract.HeaderError); e == "" {
		t.Fatalf("dead letter without %s: %v", contract.HeaderError, hs)
	}
	if tg, _ := hs.Get(contract.HeaderTarget); tg != "nats:broken" {
		t.Fatalf("dead letter x-target = %q", tg)
	}
	if v, _ := hs.Get("tenant"); v != "acme" {
		t.Fatalf("dead letter lost headers: %v", hs)
	}
	waitEmpty(t, st)
	if c := f.calls.Load(); c < 3 {
		t.Fatalf("%d publish calls, want at least 3 (attempts) + 1 (dead letter)", c)
	}
}

// TestRejectionDeadLettersAtOnce: a permanent rejection by the target (here: forbidden)
// dead-letters the message after one attempt, with the reason first in x-delay-error,
// although MaxAttempts would allow many more.
func TestRejectionDeadLettersAtOnce(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	dlq := collect(t, gc, "delay.dlq")
	f := &flaky{Publisher: gc, forbid: map[string]bool{"secret": true}}
	runEgress(t, Config{MaxAttempts: 100, BackoffMin: time.Hour}, st, map[string]message.Publisher{"nats": f})
	park(t, st, "nope", 0, "nats:secret", nil)
	g := waitFor(t, dlq, 5*time.Second)
	if e, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderError); !strings.HasPrefix(e, "forbidden: ") {
		t.Fatalf("%s = %q, want forbidden: ...", contract.HeaderError, e)
	}
	waitEmpty(t, st)
	if c := f.calls.Load(); c != 2 {
		t.Fatalf("%d publish calls, want 1 attempt + 1 dead letter", c)
	}
}

// TestPartialFailureRetriesOnlyFailed: when the publisher reports which messages failed,
// only those are retried; the others are acked once.
func TestPartialFailureRetriesOnlyFailed(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "mixed")
	p := park(t, st, "bad", 0, "nats:mixed", nil)
	park(t, st, "good", 0, "nats:mixed", nil)
	m, err := st.Get(context.Background(), "bad")
	if err != nil {
		t.Fatal(err)
	}
	f := &flaky{Publisher: gc, failUUID: map[string]bool{"bad:" + strconv.FormatInt(m.Version, 10): true}}
	_ = p
	runEgress(t, Config{MaxAttempts: 100, BackoffMin: time.Hour}, st, map[string]message.Publisher{"nats": f})
	g := waitFor(t, out, 5*time.Second)
	if id, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderID); id != "good" {
		t.Fatalf("delivered %q", id)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := st.Get(context.Background(), "bad")
		if err == nil && m.Attempts == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bad message not retried: %+v %v", m, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := st.Get(context.Background(), "good"); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("good message still stored: %v", err)
	}
}

// lostAcks is the store with its first n acks lost: the process "died" after the target
// confirmed and before Redis heard about it.
type lostAcks struct {
	*delaystore.Store
	lose atomic.Int64
}

func (l *lostAcks) Exchange(ctx context.Context, acks []delaystore.Receipt, retries []delaystore.RetryRequest,
	claims []delaystore.ClaimRequest) delaystore.Exchanged {
	if len(acks) > 0 && l.lose.Add(-1) >= 0 {
		x := l.Store.Exchange(ctx, nil, retries, claims)
		x.AckErr = errors.New("crashed before ack")
		return x
	}
	return l.Store.Exchange(ctx, acks, retries, claims)
}

// TestCrashBetweenPublishAndAck: the message is published again after the lease, with
// the same x-delay-id and the same UUID (Nats-Msg-Id), then removed: a duplicate, no loss.
func TestCrashBetweenPublishAndAck(t *testing.T) {
	st := storetest.New(t, 300*time.Millisecond)
	gc := newBroker(t)
	out := collect(t, gc, "dup")
	l := &lostAcks{Store: st}
	l.lose.Store(1)
	park(t, st, "once", 0, "nats:dup", nil)
	runEgress(t, Config{ResyncInterval: 50 * time.Millisecond}, l, map[string]message.Publisher{"nats": gc})
	a := waitFor(t, out, 5*time.Second)
	b := waitFor(t, out, 5*time.Second)
	if a.msg.UUID != b.msg.UUID {
		t.Fatalf("redelivery UUID %q != %q", b.msg.UUID, a.msg.UUID)
	}
	ida, _ := headers.FromMetadata(a.msg.Metadata).Get(contract.HeaderID)
	idb, _ := headers.FromMetadata(b.msg.Metadata).Get(contract.HeaderID)
	if ida != "once" || idb != "once" {
		t.Fatalf("ids %q %q", ida, idb)
	}
	waitEmpty(t, st)
}

// TestKafkaKeyMapping: docs/contract.md section 1 key rules, on the message egress hands to a publisher.
func TestKafkaKeyMapping(t *testing.T) {
	tests := []struct {
		name       string
		target     string
		key        []byte
		hs         headers.List
		wantMeta   string // MetaKafkaKey, "-" for absent
		wantHeader string // x-kafka-key header, "-" for absent
	}{
		{"kafka to kafka keeps the key", "kafka:t", []byte("k1"), nil, "k1", "-"},
		{"kafka to kafka keeps an empty key", "kafka:t", []byte{}, nil, "", "-"},
		{"kafka to nats: key as header", "nats:s", []byte("k1"), nil, "-", "k1"},
		{"nats to kafka: header becomes the key", "kafka:t", nil, headers.List{{Key: "X-Kafka-Key", Value: "h1"}}, "h1", "h1"},
		{"nats to kafka without header: no key", "kafka:t", nil, nil, "-", "-"},
		{"nats to nats: nothing added", "nats:s", nil, nil, "-", "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := outputMessage(delaystore.Claimed{
				Receipt:  delaystore.Receipt{ID: "i", Version: 1},
				Envelope: delaystore.Envelope{Target: tt.target, Source: "x", Key: tt.key, Headers: tt.hs},
			})
			meta, ok := m.Metadata[headers.MetaKafkaKey]
			if !ok {
				meta = "-"
			}
			h, ok := headers.FromMetadata(m.Metadata).Get(contract.HeaderKafkaKey)
			if !ok {
				h = "-"
			}
			if meta != tt.wantMeta || h != tt.wantHeader {
				t.Fatalf("key metadata %q header %q, want %q %q", meta, h, tt.wantMeta, tt.wantHeader)
			}
		})
	}
}

// deadlineRecorder records how far away the context deadline of the first published
// message was.
type deadlineRecorder struct {
	message.Publisher
	once sync.Once
	left chan time.Duration
}

func (d *deadlineRecorder) Publish(topic string, msgs ...*message.Message) error {
	d.once.Do(func() {
		dl, ok := msgs[0].Context().Deadline()
		if !ok {
			dl = time.Now().Add(time.Hour)
		}
		d.left <- time.Until(dl)
	})
	return d.Publisher.Publish(topic, msgs...)
}

// TestMessageContextEndsWithinLease: a claimed message's context ends at 4/5 of the
// lease, so its publish cannot outlive the claim.
func TestMessageContextEndsWithinLease(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	d := &deadlineRecorder{Publisher: gc, left: make(chan time.Duration, 1)}
	runEgress(t, Config{Lease: 5 * time.Second, DrainTimeout: time.Minute}, st, map[string]message.Publisher{"nats": d})
	park(t, st, "leased", 0, "nats:leased", nil)
	select {
	case left := <-d.left:
		if left > 4*time.Second || left <= 0 {
			t.Fatalf("message context ends in %s, want at most 4/5 of the 5s lease", left)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing published")
	}
}
