package nats_test

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	wmnats "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/testnats"
)

// BenchmarkSubscribeJetStream is the subscriber's part of the park hot path: b.N messages
// waiting in a stream are fetched, handed out, acked by the receiver and settled (the
// JetStream ack sent and confirmed by the consumer's ack floor). One op is one message;
// allocs/op include the embedded server's and the client's. Publishing is not timed.
func BenchmarkSubscribeJetStream(b *testing.B) {
	benchSubscribe(b, func(ctx context.Context, s *wmnats.Subscriber) {
		ch, err := s.Subscribe(ctx, "bench.in")
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			(<-ch).Ack()
		}
	})
}

// BenchmarkSubscribeReceivedJetStream is BenchmarkSubscribeJetStream through the fast path
// (SubscribeReceived).
func BenchmarkSubscribeReceivedJetStream(b *testing.B) {
	benchSubscribe(b, func(ctx context.Context, s *wmnats.Subscriber) {
		ch, ok, err := s.SubscribeReceived(ctx, "bench.in")
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		for i := 0; i < b.N; i++ {
			(<-ch).Ack("")
		}
	})
}

// benchSubscribe publishes b.N messages to a stream and times receive (subscribe, take
// and ack b.N messages) and the acks' arrival at the consumer's ack floor.
func benchSubscribe(b *testing.B, receive func(context.Context, *wmnats.Subscriber)) {
	srv := testnats.Start(b)
	nc := testnats.Connect(b, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"bench.in"},
		Storage: jetstream.MemoryStorage}); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 100)
	for i := 0; i < b.N; i++ {
		m := &natsgo.Msg{Subject: "bench.in", Data: payload, Header: natsgo.Header{
			"x-delay": {"10s"}, "x-target": {"nats:out"}, "content-type": {"application/json"}}}
		if _, err := js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publish did not complete")
	}
	s, err := wmnats.NewSubscriber(testnats.Connect(b, srv.URL()), wmnats.SubscriberConfig{Stream: "IN", AckWait: 30 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	b.ReportAllocs()
	b.ResetTimer()
	receive(ctx, s)
	cons, err := js.Consumer(ctx, "IN", wmnats.DefaultConsumerName("bench.in"))
	if err != nil {
		b.Fatal(err)
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if info.AckFloor.Stream >= uint64(b.N) {
			break
		}
		time.Sleep(time.Millisecond)
	}
}
