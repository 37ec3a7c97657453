package e2e

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delaybridge/delaybridge/internal/testkafka"
	"github.com/delaybridge/delaybridge/internal/testnats"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// The e2e stories run against a real stack when these variables are set (e.g. the one of
// deploy/docker-compose.yml: `make e2e` with E2E_REDIS_URL=redis://127.0.0.1:6379/0,
// E2E_NATS_URL=nats://127.0.0.1:4222, E2E_KAFKA_BROKERS=127.0.0.1:9092), else against
// servers of their own: a spawned redis-server, an embedded nats-server with JetStream, kfake.
// Tests that kill, restart or specially configure a server keep their own local one.
const (
	envRedisURL     = "E2E_REDIS_URL"
	envNATSURL      = "E2E_NATS_URL"
	envKafkaBrokers = "E2E_KAFKA_BROKERS"
)

// externalStack reports whether any E2E_* endpoint is set. Then every stack gets its own
// namespace of subjects and topics (see stack.name), so that the tests neither see nor feed
// a bridge already running on the shared stack (the compose service `bridge`), nor an earlier
// run's leftovers.
func externalStack() bool {
	return os.Getenv(envRedisURL) != "" || os.Getenv(envNATSURL) != "" || os.Getenv(envKafkaBrokers) != ""
}

// redisURL is E2E_REDIS_URL or a redis-server spawned for t. Keys never collide: every
// stack has its own BRIDGE_KEY_PREFIX.
func redisURL(t *testing.T) string {
	t.Helper()
	if u := os.Getenv(envRedisURL); u != "" {
		return u
	}
	return testredis.Start(t).URL()
}

// natsURL is E2E_NATS_URL (JetStream enabled) or an embedded nats-server started for t.
func natsURL(t *testing.T) string {
	t.Helper()
	if u := os.Getenv(envNATSURL); u != "" {
		return u
	}
	return testnats.Start(t).URL()
}

// kafkaBrokers is E2E_KAFKA_BROKERS (comma-separated) or a kfake cluster started for t.
func kafkaBrokers(t *testing.T) []string {
	t.Helper()
	if b := os.Getenv(envKafkaBrokers); b != "" {
		return strings.Split(b, ",")
	}
	return testkafka.Start(t).Brokers()
}

// name is base ("delay.in", "OUT", ...) in this stack's namespace: base itself on a local
// stack, "<prefix>.<base>" (streams: "<prefix>_<base>") on an external one.
func (s *stack) name(base string) string {
	if s.ns == "" {
		return base
	}
	return s.ns + "." + base
}

// streamName is like name for JetStream stream names, which may not contain dots.
func (s *stack) streamName(base string) string {
	if s.ns == "" {
		return base
	}
	return s.ns + "_" + base
}

// consumer is the bridge's durable JetStream consumer name in this stack.
func (s *stack) consumer() string {
	if c := s.env["BRIDGE_NATS_CONSUMER"]; c != "" {
		return c
	}
	return "delaybridge"
}

// createStream creates a stream and, on an external server, deletes it when t ends.
func (s *stack) createStream(t *testing.T, base string, subjects ...string) string {
	t.Helper()
	name := s.streamName(base)
	testnats.CreateStream(t, s.nc, name, subjects...)
	if s.ns != "" {
		t.Cleanup(func() { deleteStream(t, s.nc, name) })
	}
	return name
}

func deleteStream(t *testing.T, nc *nats.Conn, name string) {
	js, err := jetstream.New(nc)
	if err != nil {
		t.Logf("delete stream %s: %v", name, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, name); err != nil {
		t.Logf("delete stream %s: %v", name, err)
	}
}

// createTopic creates a Kafka topic and, on an external cluster, deletes it when t ends.
func (s *stack) createTopic(t *testing.T, brokers []string, topic string, partitions int) {
	t.Helper()
	testkafka.CreateTopic(t, brokers, topic, partitions)
	if os.Getenv(envKafkaBrokers) != "" {
		t.Cleanup(func() { deleteTopic(t, brokers, topic) })
	}
}

func deleteTopic(t *testing.T, brokers []string, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err == nil {
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.TopicNames = []string{topic}
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		var resp *kmsg.DeleteTopicsResponse
		if resp, err = req.RequestWith(ctx, cl); err == nil {
			for _, r := range resp.Topics {
				err = errors.Join(err, kerr.ErrorForCode(r.ErrorCode))
			}
		}
	}
	if err != nil {
		t.Logf("delete topic %s: %v", topic, err)
	}
}

// cleanupKeys deletes the keys of prefix when t ends if url is E2E_REDIS_URL's server.
func cleanupKeys(t *testing.T, url, prefix string) {
	if url == os.Getenv(envRedisURL) {
		t.Cleanup(func() { deleteKeys(t, url, prefix) })
	}
}

// deleteKeys removes the keys of a bridge with BRIDGE_KEY_PREFIX prefix from an external
// Redis ("<prefix>:..." and the sharded "{<prefix>:N}:...").
func deleteKeys(t *testing.T, url, prefix string) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Logf("delete keys %s: %v", prefix, err)
		return
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	for _, match := range []string{prefix + ":*", "{" + prefix + ":*"} {
		it := rdb.Scan(ctx, 0, match, 1000).Iterator()
		for it.Next(ctx) {
			if err := rdb.Del(ctx, it.Val()).Err(); err != nil {
				t.Logf("delete keys %s: %v", prefix, err)
				return
			}
			n++
		}
		if err := it.Err(); err != nil {
			t.Logf("delete keys %s: %v", prefix, err)
			return
		}
	}
	t.Logf("deleted %d keys of prefix %s", n, prefix)
}
