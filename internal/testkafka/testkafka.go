// Package testkafka runs an in-process Kafka cluster (franz-go's kfake) for tests.
//
// Each [Start] gives the test its own cluster: 3 brokers on random loopback ports,
// automatic topic creation allowed (not with [StartStrict]), group session timeouts
// down to 500 ms accepted, and its data in t.TempDir(), so that [Cluster.Restart]
// brings it back on the same ports with its topics, records and committed offsets. The cluster is closed when the test
// ends. Helpers take testing.TB, call t.Helper and fail the test on error; nothing here
// skips.
//
// Admin requests ([CreateTopic], [Committed], [EndOffsets]) go through a franz-go client
// of their own, closed after each.
package testkafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

const (
	// restartTimeout bounds the wait for the old ports to be free again.
	restartTimeout = 10 * time.Second
	// adminTimeout bounds one admin request.
	adminTimeout = 10 * time.Second
	// MinSessionTimeout is the smallest group session timeout the cluster accepts
	// (kfake's own default minimum is 6 s).
	MinSessionTimeout = 500 * time.Millisecond
)

// Cluster is a kfake cluster. Its methods are safe for concurrent use.
type Cluster struct {
	mu      sync.Mutex
	c       *kfake.Cluster
	opts    []kfake.Opt // everything but the ports
	ports   []int
	brokers []string
}

// Start runs a kfake cluster with 3 brokers (unless opts say otherwise), automatic
// topic creation, a minimum group session timeout of [MinSessionTimeout], and its data
// in a fresh t.TempDir(). opts come after these defaults, so they win. The cluster is
// closed when the test ends.
func Start(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	return start(t, append([]kfake.Opt{kfake.AllowAutoTopicCreation()}, opts...))
}

// StartStrict is [Start] without automatic topic creation, as a production cluster with
// auto.create.topics.enable=false: a topic exists only once [CreateTopic] made it.
func StartStrict(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	return start(t, opts)
}

func start(t testing.TB, opts []kfake.Opt) *Cluster {
	t.Helper()
	base := []kfake.Opt{
		kfake.NumBrokers(3),
		kfake.GroupMinSessionTimeout(MinSessionTimeout),
		kfake.DataDir(t.TempDir()),
	}
	c := &Cluster{opts: append(base, opts...)}
	kc, err := kfake.NewCluster(c.opts...)
	if err != nil {
		t.Fatalf("testkafka: start: %v", err)
	}
	c.c = kc
	c.brokers = kc.ListenAddrs()
	for _, a := range c.brokers {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			kc.Close()
			t.Fatalf("testkafka: listen address %q: %v", a, err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			kc.Close()
			t.Fatalf("testkafka: listen address %q: %v", a, err)
		}
		c.ports = append(c.ports, port)
	}
	t.Cleanup(c.Close)
	return c
}

// Brokers returns the bootstrap addresses (host:port) of every broker. They stay the
// same across [Cluster.Restart].
func (c *Cluster) Brokers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.brokers...)
}

// Kfake returns the running kfake cluster (for faults and controls). After a
// [Cluster.Restart] it is a different value.
func (c *Cluster) Kfake() *kfake.Cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

// Restart closes the cluster, which writes its state to its data directory, and starts
// a new one on the same ports from that directory: topics, records and committed
// offsets survive, connections do not (clients reconnect on their own). Faults and
// controls installed on the old cluster are gone.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c.Close()
	opts := append(append([]kfake.Opt(nil), c.opts...), kfake.Ports(c.ports...))
	var err error
	for deadline := time.Now().Add(restartTimeout); ; {
		var kc *kfake.Cluster
		kc, err = kfake.NewCluster(opts...)
		if err == nil {
			c.c = kc
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // a port may linger for a moment
	}
	t.Fatalf("testkafka: restart on ports %v: %v", c.ports, err)
}

// Close shuts the cluster down. It is idempotent; Start registers it as a cleanup.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c.Close()
}

// CreateTopic creates topic with the given number of partitions on the cluster at
// brokers and fails the test unless the topic was created (an existing topic is an error
// too).
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int) {
	t.Helper()
	if err := createTopic(brokers, topic, partitions); err != nil {
		t.Fatalf("testkafka: %v", err)
	}
}

// admin runs fn with a client of its own for the cluster at brokers, closed after, and a
// context bounded by the admin timeout.
func admin(brokers []string, fn func(ctx context.Context, cl *kgo.Client) error) error {
	if len(brokers) == 0 {
		return errors.New("no brokers")
	}
	v := kversion.Stable() // offset requests by topic name, not id
	v.SetMaxKeyVersion(int16(kmsg.OffsetCommit), 9)
	v.SetMaxKeyVersion(int16(kmsg.OffsetFetch), 9)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MaxVersions(v))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	return fn(ctx, cl)
}

func createTopic(brokers []string, topic string, partitions int) error {
	err := admin(brokers, func(ctx context.Context, cl *kgo.Client) error {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic = topic
		rt.NumPartitions = int32(partitions)
		rt.ReplicationFactor = -1
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = int32(adminTimeout.Milliseconds())
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		for _, rt := range resp.Topics {
			if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// Committed returns group's committed offset of each of the first partitions partitions
// of topic (-1: none, also when the group does not exist). It retries until the cluster answers (it may be restarting), and
// fails the test after the admin timeout.
func Committed(t testing.TB, brokers []string, group, topic string, partitions int) []int64 {
	t.Helper()
	var out []int64
	var last error
	for deadline := time.Now().Add(adminTimeout); ; {
		last = admin(brokers, func(ctx context.Context, cl *kgo.Client) error {
			req := kmsg.NewPtrOffsetFetchRequest()
			req.Group = group
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic = topic
			for p := range partitions {
				rt.Partitions = append(rt.Partitions, int32(p))
			}
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				return err
			}
			out = make([]int64, partitions)
			for i := range out {
				out[i] = -1
			}
			if err := kerr.ErrorForCode(resp.ErrorCode); errors.Is(err, kerr.GroupIDNotFound) {
				return nil // nothing committed yet
			} else if err != nil {
				return err
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						return err
					}
					if int(p.Partition) < partitions {
						out[p.Partition] = p.Offset
					}
				}
			}
			return nil
		})
		if last == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("testkafka: committed offsets of %s: %v", group, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// EndOffsets returns the end offset (the next offset to be written) of each of the first
// partitions partitions of topic.
func EndOffsets(t testing.TB, brokers []string, topic string, partitions int) []int64 {
	t.Helper()
	var out []int64
	err := admin(brokers, func(ctx context.Context, cl *kgo.Client) error {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for p := range partitions {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = int32(p)
			rp.Timestamp = -1 // the end
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		out = make([]int64, partitions)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return fmt.Errorf("partition %d: %w", p.Partition, err)
				}
				if int(p.Partition) < partitions {
					out[p.Partition] = p.Offset
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testkafka: end offsets of %s: %v", topic, err)
	}
	return out
}
