package api

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/internal/redrive"
	"github.com/delaybridge/delaybridge/internal/testkafka"
	"github.com/delaybridge/delaybridge/internal/testnats"
)

// benchLetters is how many dead letters a listing benchmark pages through.
const benchLetters = 100_000

// serveDeadLetters serves the message API over d (the operator's side only seals cursors).
func serveDeadLetters(b *testing.B, broker string, d DeadLetters) *client.Client {
	st := storetest.New(b, time.Second)
	h := New(Config{DefaultBroker: broker, DeadLetters: map[string]DeadLetters{broker: d}}, st, adminOf(b, st), nil)
	srv := serveAPI(b, h)
	return &client.Client{Base: srv.URL, HTTP: srv.Client}
}

// listEvery pages through GET /v1/dead-letters with the largest limit and returns how
// many letters it saw.
func listEvery(b *testing.B, c *client.Client) int {
	q := url.Values{"limit": {fmt.Sprint(deadLettersMax)}}
	n := 0
	for {
		res, err := c.DeadLetters(context.Background(), q)
		if err != nil {
			b.Fatal(err)
		}
		n += len(res.DeadLetters)
		if res.NextCursor == nil {
			return n
		}
		q.Set("cursor", *res.NextCursor)
	}
}

// BenchmarkDeadLettersList100k: the time to list 100,000 dead letters through the API, in
// pages of the largest limit (api), against reading the same letters without the API
// (direct: NATS one get by sequence per letter on one connection, as the listing does on a
// stream without allow_direct; Kafka a franz-go consumer of the topic). NATS runs on a
// stream without and with allow_direct (the listing then uses batched direct gets). One
// op = the whole 100,000.
func BenchmarkDeadLettersList100k(b *testing.B) {
	for _, direct := range []bool{false, true} {
		b.Run(fmt.Sprint("nats/allow_direct=", direct), func(b *testing.B) { benchNATSList(b, direct) })
	}
	b.Run("kafka", benchKafkaList)
}

// benchNATSList lists 100,000 NATS dead letters from a stream that allows direct gets or
// not (batched direct gets, or one get per letter).
func benchNATSList(b *testing.B, direct bool) {
	{
		srv := testnats.Start(b)
		nc := testnats.Connect(b, srv.URL())
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"delay.dlq"}, AllowDirect: direct}); err != nil {
			b.Fatal(err)
		}
		for i := range benchLetters {
			m := natsgo.NewMsg("delay.dlq")
			m.Header.Set("x-target", "out.bench")
			m.Header.Set("x-delay-error", "publish_failed: 10 attempts, last: timeout")
			m.Data = []byte(fmt.Sprintf(`{"order":%d,"pad":"................................................................"}`, i))
			if _, err := js.PublishMsgAsync(m); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
		cfg := redrive.NATSConfig{DLQSubject: "delay.dlq"}
		b.Run("direct", func(b *testing.B) {
			s, err := js.Stream(context.Background(), "DLQ")
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				n := 0
				for seq := uint64(1); ; n++ {
					m, err := s.GetMsg(context.Background(), seq, jetstream.WithGetMsgSubject("delay.dlq"))
					if err != nil {
						break
					}
					seq = m.Sequence + 1
				}
				if n != benchLetters {
					b.Fatalf("read %d letters", n)
				}
			}
		})
		b.Run("api", func(b *testing.B) {
			c := serveDeadLetters(b, "nats", redrive.NATSLetters{Conn: nc, Config: cfg})
			for b.Loop() {
				if n := listEvery(b, c); n != benchLetters {
					b.Fatalf("listed %d letters", n)
				}
			}
		})
	}
}

// benchKafkaList lists 100,000 Kafka dead letters (3 partitions).
func benchKafkaList(b *testing.B) {
	{
		brokers := testkafka.Start(b).Brokers()
		testkafka.CreateTopic(b, brokers, "delay.dlq", 3)
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		recs := make([]*kgo.Record, 0, benchLetters)
		for i := range benchLetters {
			recs = append(recs, &kgo.Record{Topic: "delay.dlq", Value: []byte(fmt.Sprintf(`{"order":%d,"pad":"................................................................"}`, i)),
				Headers: []kgo.RecordHeader{{Key: "x-target", Value: []byte("out.bench")}, {Key: "x-delay-error", Value: []byte("publish_failed: 10 attempts, last: timeout")}}})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		b.Run("direct", func(b *testing.B) {
			for b.Loop() {
				rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("delay.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
				if err != nil {
					b.Fatal(err)
				}
				for n := 0; n < benchLetters; {
					fs := rd.PollFetches(context.Background())
					n += fs.NumRecords()
				}
				rd.Close()
			}
		})
		b.Run("api", func(b *testing.B) {
			c := serveDeadLetters(b, "kafka", redrive.KafkaLetters{Config: redrive.KafkaConfig{Brokers: brokers, DLQTopic: "delay.dlq", Group: "bench-redrive"}})
			for b.Loop() {
				if n := listEvery(b, c); n != benchLetters {
					b.Fatalf("listed %d letters", n)
				}
			}
		})
	}
}
