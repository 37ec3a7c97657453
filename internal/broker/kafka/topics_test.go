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
