package kafka_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	wmkafka "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// logCount is a slog handler that counts records by message and level.
type logCount struct {
	mu  *sync.Mutex
	got map[string]int // "LEVEL message" -> count
}

func newLogCount() logCount { return logCount{mu: &sync.Mutex{}, got: map[string]int{}} }

func (h logCount) Enabled(context.Context, slog.Level) bool { return true }
func (h logCount) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.got[r.Level.String()+" "+r.Message]++
	h.mu.Unlock()
	return nil
}
func (h logCount) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logCount) WithGroup(string) slog.Handler      { return h }

// count returns how many records at level contain s in their message.
func (h logCount) count(level slog.Level, s string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for k, c := range h.got {
		if strings.HasPrefix(k, level.String()+" ") && strings.Contains(k, s) {
			n += c
		}
	}
	return n
}

// A Subscribe to a topic that does not exist (auto-creation off) does not join the group
// (no generations, so no rebalance of the group's other members): it warns once and looks
// again every MissingTopicInterval; once the topic is created, its records are read.
// Before issue 24 item 1 kafka-go's partition watcher ended every generation at once and
// the member rejoined in a tight loop.
func TestMissingTopicIsAwaitedWithoutJoining(t *testing.T) {
	t.Parallel()
	c := testkafka.StartStrict(t)
	brokers := c.Brokers()
	logs := newLogCount()
	cfg := wmkafka.SubscriberConfig{Brokers: brokers, GroupID: "late-g", SessionTimeout: 3 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond, RebalanceTimeout: 5 * time.Second, DrainTimeout: time.Second,
		MissingTopicInterval: 300 * time.Millisecond}
	s, err := wmkafka.NewSubscriber(cfg, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ch, err := s.Subscribe(context.Background(), "late")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wmkafka.Partitions(context.Background(), brokers, wmkafka.Security{}, "late"); err == nil {
		t.Fatal("Partitions of a missing topic: no error")
	}
	time.Sleep(1500 * time.Millisecond)
	if n := logs.count(slog.LevelInfo, "generation"); n != 0 {
		t.Fatalf("%d generations while the topic is missing, want 0", n)
	}
	if n := logs.count(slog.LevelWarn, "does not exist"); n != 1 {
		t.Fatalf("%d warnings about the missing topic, want 1", n)
	}

	testkafka.CreateTopic(t, brokers, "late", 2)
	if n, err := wmkafka.Partitions(context.Background(), brokers, wmkafka.Security{}, "late"); err != nil || n != 2 {
		t.Fatalf("Partitions = %d, %v; want 2", n, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "late", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		m.Ack()
	case <-time.After(15 * time.Second):
		t.Fatal("no record 15 s after the topic was created")
	}
	if n := logs.count(slog.LevelInfo, "generation"); n > 2 {
		t.Errorf("%d generations, want 1 (2 at most)", n)
	}
}

// A tombstone (a record with a null value) is received as one (metadata
// headers.MetaKafkaTombstone, empty payload) and published as one (null value); an empty
// value stays empty and not null, both ways (issue 24 item 4). kafka-go reads both as a
// nil Value: the subscriber asks the broker again for such records.
func TestTombstoneRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "ts.in", 1)
	testkafka.CreateTopic(t, e.brokers, "ts.out", 1)
	e.produceRecords(t,
		&kgo.Record{Topic: "ts.in", Key: []byte("k1"), Value: nil},
		&kgo.Record{Topic: "ts.in", Key: []byte("k2"), Value: []byte{}},
		&kgo.Record{Topic: "ts.in", Key: []byte("k3"), Value: []byte("v")},
	)
	_, ch := e.subscribe(t, e.subCfg("ts"), nil, "ts.in")
	msgs := receiveByOffset(t, ch, 3)
	for i, m := range msgs {
		m.Ack()
		_, tomb := m.Metadata[headers.MetaKafkaTombstone]
		if tomb != (i == 0) {
			t.Errorf("record %d: tombstone metadata %v, want %v", i, tomb, i == 0)
		}
		m.SetContext(context.Background())
	}
	if err := e.publisher(t, wmkafka.PublisherConfig{}).Publish("ts.out", msgs...); err != nil {
		t.Fatal(err)
	}
	out := consume(t, e, "ts.out", 3)
	if out[0].Value != nil {
		t.Errorf("tombstone arrived with value %q (non-null), want null", out[0].Value)
	}
	if out[1].Value == nil || len(out[1].Value) != 0 {
		t.Errorf("empty value arrived as %v, want empty and not null", out[1].Value)
	}
	if string(out[2].Value) != "v" {
		t.Errorf("value %q", out[2].Value)
	}
}
