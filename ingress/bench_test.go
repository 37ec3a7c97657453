package ingress

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// fakeParker parks nothing: it answers every request at once and counts them, so that
// the park benchmark measures ingress (the store's cost has its own benchmarks).
type fakeParker struct {
	mu     sync.Mutex
	cond   *sync.Cond
	parked int
}

func newFakeParker() *fakeParker {
	p := &fakeParker{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *fakeParker) Park(_ context.Context, reqs []delaystore.ParkRequest) ([]delaystore.Parked, error) {
	out := make([]delaystore.Parked, len(reqs))
	for i, r := range reqs {
		out[i] = delaystore.Parked{ID: r.ID, Due: 1}
	}
	p.mu.Lock()
	p.parked += len(reqs)
	p.mu.Unlock()
	p.cond.Broadcast()
	return out, nil
}

func (p *fakeParker) CancelKeyAt(context.Context, string, string, int64) (bool, error) {
	return false, nil
}
func (p *fakeParker) LaneOf(id string, lanes int) int   { return len(id) % lanes }
func (p *fakeParker) ShardOfMessage(id, key string) int { return len(id) }
func (p *fakeParker) ShardOfKey(key string) int         { return len(key) }

func (p *fakeParker) wait(n int) {
	p.mu.Lock()
	for p.parked < n {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

// chanSubscriber hands out the messages of one channel.
type chanSubscriber struct{ ch chan *message.Message }

func (s chanSubscriber) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return s.ch, nil
}
func (s chanSubscriber) Close() error { return nil }

// BenchmarkPark is the park hot path from a received watermill message to its ack:
// consume (incoming, lookalike check, Prepare, span) -> group (lanes, group commit) ->
// park -> Parker.Park (a fake that answers at once) -> ackParked. One op is one message
// of a typical shape (x-delay, x-target, a source id and time, two producer headers,
// 100 B payload); building the messages is not timed.
func BenchmarkPark(b *testing.B) {
	sub := chanSubscriber{ch: make(chan *message.Message, 1024)}
	st := newFakeParker()
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq"}, st,
		[]Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: sub}},
		map[string]message.Publisher{intake.BrokerNATS: nopPublisher{}}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	hs := headers.List{{Key: contract.HeaderDelay, Value: "10s"}, {Key: contract.HeaderTarget, Value: "nats:out"},
		{Key: "content-type", Value: "application/json"}, {Key: "x-tenant", Value: "t-42"}}
	payload := make([]byte, 100)
	msgs := make([]*message.Message, b.N)
	for i := range msgs {
		m := message.NewMessage(watermill.NewULID(), payload)
		m.Metadata = headers.ToMetadata(hs, map[string]string{headers.MetaSourceID: "js:IN:" + m.UUID,
			headers.MetaSourceTime: "1700000000000"})
		msgs[i] = m
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- in.Run(ctx) }()
	b.ReportAllocs()
	b.ResetTimer()
	for _, m := range msgs {
		sub.ch <- m
	}
	st.wait(b.N)
	for _, m := range msgs {
		<-m.Acked()
	}
	b.StopTimer()
	close(sub.ch)
	cancel()
	<-done
}

// BenchmarkParkReceived is BenchmarkPark on the fast path (ReceivedSubscriber): the same
// messages come as headers.Received, as the NATS adapter hands out JetStream messages,
// and are settled through a Settler that counts the acks.
func BenchmarkParkReceived(b *testing.B) {
	src := &fastBenchSource{ch: make(chan *headers.Received, 1024)}
	st := newFakeParker()
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq"}, st,
		[]Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: src}},
		map[string]message.Publisher{intake.BrokerNATS: nopPublisher{}}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	hs := headers.List{{Key: "content-type", Value: "application/json"}, {Key: contract.HeaderDelay, Value: "10s"},
		{Key: contract.HeaderTarget, Value: "nats:out"}, {Key: "x-tenant", Value: "t-42"}}
	payload := make([]byte, 100)
	acks := &countingSettler{want: int64(b.N), done: make(chan struct{})}
	msgs := make([]*headers.Received, b.N)
	for i := range msgs {
		id := watermill.NewULID()
		msgs[i] = &headers.Received{Message: headers.Message{ID: id, Headers: hs, Payload: payload},
			SourceID: "js:IN:" + id, SourceTime: "1700000000000", Settle: acks}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- in.Run(ctx) }()
	b.ReportAllocs()
	b.ResetTimer()
	for _, m := range msgs {
		src.ch <- m
	}
	st.wait(b.N)
	<-acks.done
	b.StopTimer()
	close(src.ch)
	cancel()
	<-done
}

// fastBenchSource hands out the Received messages of one channel (ReceivedSubscriber).
type fastBenchSource struct{ ch chan *headers.Received }

func (s *fastBenchSource) SubscribeReceived(context.Context, string) (<-chan *headers.Received, bool, error) {
	return s.ch, true, nil
}
func (s *fastBenchSource) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return nil, errors.New("fast path only")
}
func (s *fastBenchSource) Close() error { return nil }

// countingSettler counts acks and closes done at want; a nack fails nothing but is not
// counted (the benchmark then never ends: it would show).
type countingSettler struct {
	acked atomic.Int64
	want  int64
	done  chan struct{}
}

func (c *countingSettler) Ack(string) {
	if c.acked.Add(1) == c.want {
		close(c.done)
	}
}
func (c *countingSettler) Nack() {}

// nopPublisher is a dead-letter publisher that drops what it is given.
type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }
