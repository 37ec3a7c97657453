//go:build fault

package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// newStrictKafkaStack is newKafkaStack on a cluster that never creates topics by itself
// (auto.create.topics.enable=false), with only the given topics (3 partitions each).
func newStrictKafkaStack(t *testing.T, topics ...string) *kstack {
	t.Helper()
	s := newStack(t)
	delete(s.env, "BRIDGE_NATS_URL")
	delete(s.env, "BRIDGE_NATS_STREAM")
	k := &kstack{stack: s, kafka: testkafka.StartStrict(t)}
	k.brokers = k.kafka.Brokers()
	for _, topic := range topics {
		testkafka.CreateTopic(t, k.brokers, topic, 3)
	}
	k.group = "bridge-" + strconv.Itoa(rand.IntN(1e9))
	s.env["BRIDGE_KAFKA_BROKERS"] = strings.Join(k.brokers, ",")
	s.env["BRIDGE_KAFKA_GROUP"] = k.group
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	k.cl = cl
	return k
}

// produceSync produces one record and waits for its ack.
func (k *kstack) produceSync(t *testing.T, r *kgo.Record) {
	t.Helper()
	if err := k.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", r.Topic, err)
	}
}

// K1 (issue 24 item 1): the cancel topic is missing (auto-creation off). Ingress records
// flow at once: parked within 3 s of being sent, with a bounded log (no rebalance churn:
// the cancel topic has its own consumer group, and it is only joined once the topic
// exists). The missing topic is named in a warning; once created it is read within the
// look-again interval (BRIDGE_KAFKA_MISSING_TOPIC_INTERVAL, 2 s here) and a cancel
// removes its message.
func TestK1KafkaCancelTopicMissing(t *testing.T) {
	k := newStrictKafkaStack(t, "delay.in", "delay.dlq", "out.fault")
	b := e2etest.StartReady(t, bridgeBin, k.envWith("BRIDGE_KAFKA_MISSING_TOPIC_INTERVAL", "2s"))
	const n = 200
	sent := time.Now()
	for i := range n {
		k.produceSync(t, &kgo.Record{Topic: "delay.in", Value: []byte("k1"), Headers: []kgo.RecordHeader{
			{Key: "x-delay", Value: []byte("10m")}, {Key: "x-target", Value: []byte("out.fault")},
			{Key: "x-delay-id", Value: []byte(fmt.Sprintf("k1-%d", i))}}})
	}
	for parkedCount(t, b) < int64(n) {
		if time.Since(sent) > 30*time.Second {
			t.Fatalf("%d of %d parked 30 s after they were sent", parkedCount(t, b), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	park := time.Since(sent)
	before := strings.Count(b.Out.String(), "\n")
	time.Sleep(5 * time.Second)
	out := b.Out.String()
	lines := strings.Count(out, "\n") - before
	generations := strings.Count(out, "kafka consumer group generation")
	t.Logf("K1: %d records parked %s after the first was sent; %d log lines in the next 5 s; %d generations in all",
		n, park.Round(time.Millisecond), lines, generations)
	if park > 3*time.Second {
		t.Errorf("parking %d records took %s with the cancel topic missing, want under 3 s", n, park)
	}
	if lines > 10 || generations > 3 {
		t.Errorf("%d log lines in 5 s, %d generations: the missing cancel topic churns the group\n%s", lines, generations, out)
	}
	if !strings.Contains(out, "delay.cancel") || !strings.Contains(out, "level=WARN") {
		t.Errorf("no warning naming the missing cancel topic delay.cancel")
	}

	testkafka.CreateTopic(t, k.brokers, "delay.cancel", 3)
	created := time.Now()
	k.produceSync(t, &kgo.Record{Topic: "delay.cancel", Headers: []kgo.RecordHeader{{Key: "x-delay-id", Value: []byte("k1-7")}}})
	for parkedCount(t, b) != int64(n-1) {
		if time.Since(created) > 20*time.Second {
			t.Fatalf("cancel not applied 20 s after the cancel topic was created (parked %d)\n%s", parkedCount(t, b), b.Out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("K1: the cancel topic created later was read and a cancel applied %s after", time.Since(created).Round(time.Millisecond))
}

// K1 (start): a missing ingress topic stops the start with an error naming it.
func TestK1KafkaIngressTopicMissing(t *testing.T) {
	k := newStrictKafkaStack(t, "delay.cancel", "delay.dlq")
	b := e2etest.Start(t, bridgeBin, k.envWith("BRIDGE_KAFKA_TOPIC", "orders.delayed"))
	err := b.Wait(t, 30*time.Second)
	out := b.Out.String()
	t.Logf("K1: exit %v; output: %s", err, strings.TrimSpace(out))
	if err == nil {
		t.Fatal("the bridge started without its ingress topic")
	}
	if !strings.Contains(out, `"orders.delayed"`) || !strings.Contains(out, "BRIDGE_KAFKA_TOPIC") {
		t.Fatalf("the start error does not name the missing topic:\n%s", out)
	}
}
