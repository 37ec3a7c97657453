// Package testkafka runs an in-process Kafka cluster (franz-go's kfake) for tests.
//
// Each [Start] gives the test its own cluster: 3 brokers on random loopback ports,
// automatic topic creation allowed (not with [StartStrict]), group session timeouts
// down to 500 ms accepted, and its data in t.TempDir(), so that [Cluster.Restart]
// brings it back on the same ports with its topics, records and committed offsets. The cluster is closed when the test
// ends. Helpers take testing.TB, call t.Helper and fail the test on error; nothing here
// skips.
//
// Admin requests ([CreateTopic]) use their own kafka-go Transport: kafka-go's shared
// DefaultTransport caches metadata for seconds and would hide topics created later.
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

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
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
// brokers, through a private kafka-go Transport, and fails the test unless the topic
// was created (an existing topic is an error too).
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int) {
	t.Helper()
	if err := createTopic(brokers, topic, partitions); err != nil {
		t.Fatalf("testkafka: %v", err)
	}
}

func createTopic(brokers []string, topic string, partitions int) error {
	if len(brokers) == 0 {
		return errors.New("create topic: no brokers")
	}
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	cl := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr, Timeout: adminTimeout}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	resp, err := cl.CreateTopics(ctx, &kafkago.CreateTopicsRequest{
		Topics: []kafkago.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: -1}},
	})
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	if err := resp.Errors[topic]; err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}
