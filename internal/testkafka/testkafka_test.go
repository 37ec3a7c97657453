package testkafka

import (
	"context"
	"slices"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

const waitFor = 10 * time.Second

func TestCreateTopicAndRestartKeepData(t *testing.T) {
	c := Start(t)
	brokers := c.Brokers()
	if len(brokers) != 3 {
		t.Fatalf("brokers = %v, want 3", brokers)
	}
	CreateTopic(t, brokers, "keep", 2)
	if n := partitions(t, brokers, "keep"); n != 2 {
		t.Fatalf("partitions = %d, want 2", n)
	}
	if err := createTopic(brokers, "keep", 2); err == nil {
		t.Fatal("creating an existing topic succeeded")
	}

	tr := &kafkago.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafkago.RequireAll}
	t.Cleanup(func() { _ = w.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := w.WriteMessages(ctx, kafkago.Message{Topic: "keep", Partition: 0, Value: []byte("a")}); err != nil {
		t.Fatalf("write: %v", err)
	}
	cl := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr}
	if _, err := cl.OffsetCommit(ctx, &kafkago.OffsetCommitRequest{
		GroupID: "g", GenerationID: -1,
		Topics: map[string][]kafkago.OffsetCommit{"keep": {{Partition: 0, Offset: 1}, {Partition: 1, Offset: 0}}},
	}); err != nil {
		t.Fatalf("commit: %v", err)
	}

	c.Restart(t)
	if got := c.Brokers(); !slices.Equal(got, brokers) {
		t.Fatalf("brokers after restart = %v, want %v", got, brokers)
	}

	tr2 := &kafkago.Transport{}
	t.Cleanup(tr2.CloseIdleConnections)
	cl2 := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr2}
	var end int64 = -1
	var committed int64 = -1
	for deadline := time.Now().Add(waitFor); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		lo, err := cl2.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{"keep": {kafkago.LastOffsetOf(0)}}})
		if err != nil || len(lo.Topics["keep"]) != 1 || lo.Topics["keep"][0].Error != nil {
			continue
		}
		end = lo.Topics["keep"][0].LastOffset
		of, err := cl2.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: "g", Topics: map[string][]int{"keep": {0}}})
		if err != nil || of.Error != nil || len(of.Topics["keep"]) != 1 {
			continue
		}
		committed = of.Topics["keep"][0].CommittedOffset
		break
	}
	if end != 1 || committed != 1 {
		t.Fatalf("after restart: end offset %d, committed %d; want 1 and 1", end, committed)
	}
}

func TestStartOptions(t *testing.T) {
	c := Start(t, kfake.NumBrokers(1), kfake.SeedTopics(4, "seeded"))
	if n := len(c.Brokers()); n != 1 {
		t.Fatalf("brokers = %d, want 1", n)
	}
	if n := partitions(t, c.Brokers(), "seeded"); n != 4 {
		t.Fatalf("seeded partitions = %d, want 4", n)
	}
	c.Close()
	c.Close() // idempotent
}

func partitions(t *testing.T, brokers []string, topic string) int {
	t.Helper()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	cl := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	md, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	for _, tp := range md.Topics {
		if tp.Name == topic {
			if tp.Error != nil {
				t.Fatalf("metadata %s: %v", topic, tp.Error)
			}
			return len(tp.Partitions)
		}
	}
	t.Fatalf("metadata: no topic %s", topic)
	return 0
}
