package ingress

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// gatedParker counts the Park calls to a real store and their sizes; its first call
// waits until gate is closed (a round trip in flight), after telling entered.
type gatedParker struct {
	*delaystore.Store
	gate    chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	sizes   []int
}

func (g *gatedParker) Park(ctx context.Context, reqs []delaystore.ParkRequest) ([]delaystore.Parked, error) {
	g.mu.Lock()
	g.sizes = append(g.sizes, len(reqs))
	first := len(g.sizes) == 1
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.gate
	}
	return g.Store.Park(ctx, reqs)
}

func (g *gatedParker) calls() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sizes)
}

// chanSource is a message.Subscriber whose messages the test hands in one by one.
type chanSource struct{ ch chan *message.Message }

func (c *chanSource) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for {
			select {
			case m := <-c.ch:
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (c *chanSource) Close() error { return nil }

// idOnShard returns an id of shard sh (of 4), different for every n.
func idOnShard(t *testing.T, sh, n int) string {
	t.Helper()
	for i := 0; ; i++ {
		id := fmt.Sprintf("g-%d-%d-%d", sh, n, i)
		if delaystore.ShardOf(id, 4) == sh {
			return id
		}
	}
}

func delayedMsg(id string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(id))
	m.Metadata = headers.ToMetadata(headers.List{
		{Key: "x-delay", Value: "1h"}, {Key: "x-target", Value: "orders.timeout"}, {Key: "x-delay-id", Value: id},
	}, nil)
	return m
}

func waitAcked(t *testing.T, what string, ms ...*message.Message) {
	t.Helper()
	for i, m := range ms {
		select {
		case <-m.Acked():
		case <-m.Nacked():
			t.Fatalf("%s: message %d nacked", what, i)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: message %d not acked", what, i)
		}
	}
}

func notAcked(t *testing.T, what string, ms ...*message.Message) {
	t.Helper()
	for i, m := range ms {
		select {
		case <-m.Acked():
			t.Fatalf("%s: message %d acked", what, i)
		case <-m.Nacked():
			t.Fatalf("%s: message %d nacked", what, i)
		default:
		}
	}
}

// TestGroupCommitMergesLanes: while a park call is in flight, the batches that become
// ready in the other lanes wait for it and then go together in one Park call; when that
// merged call fails for one shard (shard 1's script fails), the messages of the other
// shards are acked, those of shard 1 are not, and the lanes of the parked shards go on
// parking while shard 1 is retried.
func TestGroupCommitMergesLanes(t *testing.T) {
	// Shard 1's version counter of the wrong type: its park script fails (WRONGTYPE).
	st, repair := storetest.NewBrokenShard(t, 5*time.Second, 1)
	g := &gatedParker{Store: st, gate: make(chan struct{}), entered: make(chan struct{})}
	src := &chanSource{ch: make(chan *message.Message)}
	const linger = 300 * time.Millisecond // ready after 300 ms, no longer waiting for the call in flight after 600 ms
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq", Lanes: 4, Linger: linger,
		RetryMin: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond}, g,
		[]Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: src}},
		map[string]message.Publisher{intake.BrokerNATS: newBroker(t)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	release := sync.OnceFunc(func() { close(g.gate) })
	defer func() {
		release() // a failed test does not leave the first call waiting
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	first := delayedMsg(idOnShard(t, 0, 0))
	src.ch <- first
	select {
	case <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no park call")
	}
	// Lanes 1, 2, 3 (shards 1, 2, 3) fill while lane 0's call is in flight.
	var bad, good []*message.Message
	for n := range 3 {
		bad = append(bad, delayedMsg(idOnShard(t, 1, n)))
		good = append(good, delayedMsg(idOnShard(t, 2, n)), delayedMsg(idOnShard(t, 3, n)))
	}
	sent := time.Now()
	for i := range 3 {
		src.ch <- bad[i]
		src.ch <- good[2*i]
		src.ch <- good[2*i+1]
	}
	time.Sleep(linger + 100*time.Millisecond - time.Since(sent)) // ready, waiting for the call in flight
	if c := g.calls(); len(c) != 1 {
		t.Fatalf("park calls %v while the first is in flight, want the ready lanes to wait for it", c)
	}
	release()
	waitAcked(t, "first call", first)
	waitAcked(t, "parked shards of the merged call", good...)
	if c := g.calls(); len(c) < 2 || c[1] != 9 {
		t.Fatalf("park calls %v, want the 9 messages of lanes 1-3 in the second call", c)
	}
	time.Sleep(100 * time.Millisecond) // shard 1 is retried meanwhile
	notAcked(t, "failing shard", bad...)
	if c := g.calls(); len(c) < 3 || slices.ContainsFunc(c[2:], func(n int) bool { return n != 3 }) {
		t.Fatalf("park calls %v, want the retries to carry shard 1's 3 messages only", c)
	}
	// The lanes of parked shards are free while shard 1 is retried.
	later := delayedMsg(idOnShard(t, 2, 9))
	src.ch <- later
	waitAcked(t, "a message of a parked shard while another is retried", later)
	notAcked(t, "failing shard", bad...)

	repair()
	waitAcked(t, "failing shard after it recovered", bad...)
	for _, m := range append(append([]*message.Message{first, later}, good...), bad...) {
		if _, err := st.Get(t.Context(), string(m.Payload)); err != nil {
			t.Fatalf("%s acked but not parked: %v", m.Payload, err)
		}
	}
}

// TestGroupCommitIdleSendsAtLinger: with nothing in flight a batch is parked Linger after
// its first message, not later.
func TestGroupCommitIdleSendsAtLinger(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	g := &gatedParker{Store: st, gate: make(chan struct{}), entered: make(chan struct{})}
	close(g.gate)
	src := &chanSource{ch: make(chan *message.Message)}
	const linger = 100 * time.Millisecond
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq", Linger: linger}, g,
		[]Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: src}},
		map[string]message.Publisher{intake.BrokerNATS: newBroker(t)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, in)
	for n := range 3 {
		start := time.Now()
		m := delayedMsg(idOnShard(t, n, n))
		src.ch <- m
		waitAcked(t, "idle", m)
		if took := time.Since(start); took < linger || took > linger+300*time.Millisecond {
			t.Fatalf("message %d acked after %s, want Linger (%s) plus a round trip", n, took, linger)
		}
	}
	if c := g.calls(); !slices.Equal(c, []int{1, 1, 1}) {
		t.Fatalf("park calls %v, want one per message", c)
	}
}
