package testkafka

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
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

	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.OffsetCommit), 9)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxVersions(v))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "keep", Partition: 0, Value: []byte("a")}).FirstErr(); err != nil {
		t.Fatalf("write: %v", err)
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = "g", -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "keep"
	for p, o := range []int64{1, 0} {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = int32(p), o
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("commit partition %d: %v", rp.Partition, err)
			}
		}
	}

	c.Restart(t)
	if got := c.Brokers(); !slices.Equal(got, brokers) {
		t.Fatalf("brokers after restart = %v, want %v", got, brokers)
	}
	end := EndOffsets(t, brokers, "keep", 1)[0]
	committed := Committed(t, brokers, "g", "keep", 1)[0]
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
	var n int
	err := admin(brokers, func(ctx context.Context, cl *kgo.Client) error {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		for _, tp := range resp.Topics {
			if tp.Topic != nil && *tp.Topic == topic {
				n = len(tp.Partitions)
				return kerr.ErrorForCode(tp.ErrorCode)
			}
		}
		return fmt.Errorf("no topic %s", topic)
	})
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	return n
}
