package egress

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/delaystore"
	wmnats "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testnats"
)

// benchBatch is the claimed batch size of the release benchmarks (the default BatchSize
// order of magnitude: a shard's claim).
const benchBatch = 100

// benchClaimed is a batch of n claimed messages for target, of a typical shape (100 B
// payload, a source id, three producer headers), with ids unique per seq.
func benchClaimed(seq, n int, target string) []delaystore.Claimed {
	payload := make([]byte, 100)
	hs := headers.List{{Key: "content-type", Value: "application/json"}, {Key: "x-tenant", Value: "t-42"},
		{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	out := make([]delaystore.Claimed, n)
	for i := range out {
		id := fmt.Sprintf("b%d-%d", seq, i)
		out[i] = delaystore.Claimed{Receipt: delaystore.Receipt{ID: id, Shard: 1, Version: 1}, Due: time.Now().UnixMilli(),
			Envelope: delaystore.Envelope{Target: target, Source: "nats:delay.in", SourceID: "js:IN:" + id,
				Headers: hs, Payload: payload}}
	}
	return out
}

// settleWaiter counts settled messages; wait blocks until n more are settled.
type settleWaiter struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
	acks int
}

func newSettleWaiter() *settleWaiter {
	w := &settleWaiter{}
	w.cond = sync.NewCond(&w.mu)
	return w
}

func (w *settleWaiter) settle(st *settlement) {
	w.mu.Lock()
	w.n += st.n
	w.acks += len(st.acks)
	w.mu.Unlock()
	w.cond.Broadcast()
}

func (w *settleWaiter) wait(n int) {
	w.mu.Lock()
	for w.n < n {
		w.cond.Wait()
	}
	w.mu.Unlock()
}

// BenchmarkRelease is the release hot path from a claimed batch to its settlement:
// delivery.submit (split by target, output messages, spans) -> the NATS publisher ->
// JetStream async publishes to an embedded server (memory stream) and their PubAcks ->
// outcomes -> settle. One op is one message (batches of benchBatch); allocs/op include
// the embedded server's and the client's.
func BenchmarkRelease(b *testing.B) {
	srv := testnats.Start(b)
	nc := testnats.Connect(b, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"bench.out"},
		Storage: jetstream.MemoryStorage, MaxMsgs: 100_000, Duplicates: time.Second}); err != nil {
		b.Fatal(err)
	}
	pub, err := wmnats.NewPublisher(testnats.Connect(b, srv.URL()), wmnats.PublisherConfig{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	cfg := Config{DLQSubject: "delay.dlq", Lease: 30 * time.Second}
	cfg.defaults()
	d, err := newDelivery(cfg, map[string]message.Publisher{"nats": pub}, nil, &redisClock{},
		slog.New(slog.DiscardHandler), nil)
	if err != nil {
		b.Fatal(err)
	}
	w := newSettleWaiter()
	batches := (b.N + benchBatch - 1) / benchBatch
	claims := make([][]delaystore.Claimed, batches)
	for i := range claims {
		claims[i] = benchClaimed(i, min(benchBatch, b.N-i*benchBatch), "nats:bench.out")
	}
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	for _, c := range claims {
		d.submit(ctx, batch{shard: 1, claimed: c, fence: time.Now()}, w.settle)
		sent += len(c)
		w.wait(sent)
	}
	b.StopTimer()
	if w.acks != b.N {
		b.Fatalf("acked %d of %d", w.acks, b.N)
	}
}
