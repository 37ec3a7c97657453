package redrive

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// kletter produces a dead letter to delay.dlq, partition p.
func kletter(t *testing.T, cl *kgo.Client, p int32, key, payload string, kv ...string) {
	t.Helper()
	rec := &kgo.Record{Topic: "delay.dlq", Partition: p, Key: []byte(key), Value: []byte(payload)}
	for i := 0; i+1 < len(kv); i += 2 {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// ingressRecords reads delay.in from the start: the records there now.
func ingressRecords(t *testing.T, brokers []string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("delay.in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 {
			return out
		}
	}
}

func recordHeader(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if strings.EqualFold(h.Key, key) {
			return string(h.Value), true
		}
	}
	return "", false
}

// A dry run commits and publishes nothing; a run selected by reason produces only those
// letters to the ingress topic (key, payload and headers kept, the bridge's own dropped)
// and commits past what it looked at; the next run starts there, and --from-start reads
// everything again.
func TestKafka(t *testing.T) {
	brokers, cl := kafkaLetterBox(t)
	kletter(t, cl, 0, "k1", "a", "x-target", "out.a", "x-delay-id", "m1", "x-delay-due", "5", "x-delay-source", "kafka:delay.in",
		"x-delay-error", "publish_failed: 10 attempts")
	kletter(t, cl, 0, "", "b", "x-target", "out.b", "x-delay-error", "target_not_allowed: out.b")
	kletter(t, cl, 1, "", "", "x-target", "out.c", "x-delay-original-size", "9000", "x-delay-error", "too_large: 9000 bytes")
	kletter(t, cl, 1, "k4", "d", "x-target", "out.d", "x-delay-error", "publish_failed: 10 attempts")
	cfg := KafkaConfig{Brokers: brokers, DLQTopic: "delay.dlq", Ingress: "delay.in", Group: "bridge-redrive"}

	counts, err := Kafka(t.Context(), cfg, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "dry run", counts, map[string]Tally{"publish_failed": {Selected: 2}, "target_not_allowed": {Selected: 1}, "no_payload": {Left: 1}})
	if recs := ingressRecords(t, brokers); len(recs) != 0 {
		t.Fatalf("dry run produced %d records", len(recs))
	}
	if committed := groupOffsets(t, brokers); committed != 0 {
		t.Fatalf("dry run committed (offsets sum %d)", committed)
	}

	counts, err = Kafka(t.Context(), cfg, Options{Reasons: []string{"publish_failed"}})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "publish_failed", counts, map[string]Tally{"publish_failed": {Redriven: 2, Selected: 2},
		"target_not_allowed": {Left: 1}, "no_payload": {Left: 1}})
	recs := ingressRecords(t, brokers)
	if len(recs) != 2 {
		t.Fatalf("ingress topic holds %d records, want 2", len(recs))
	}
	var a = recs[0]
	if string(a.Value) != "a" {
		a = recs[1]
	}
	if string(a.Key) != "k1" || string(a.Value) != "a" {
		t.Fatalf("redriven record key %q value %q", a.Key, a.Value)
	}
	if v, _ := recordHeader(a, "x-delay-id"); v != "m1" {
		t.Errorf("x-delay-id = %q", v)
	}
	for _, h := range []string{"x-delay-error", "x-delay-due", "x-delay-source"} {
		if _, ok := recordHeader(a, h); ok {
			t.Errorf("redriven record still has %s", h)
		}
	}
	if committed := groupOffsets(t, brokers); committed != 4 {
		t.Fatalf("offsets sum %d after looking at all 4 letters, want 4", committed)
	}

	counts, err = Kafka(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "again", counts, map[string]Tally{})
	counts, err = Kafka(t.Context(), KafkaConfig{Brokers: brokers, DLQTopic: "delay.dlq", Ingress: "delay.in", Group: "bridge-redrive", FromStart: true},
		Options{Reasons: []string{"target_not_allowed"}})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "from start", counts, map[string]Tally{"target_not_allowed": {Redriven: 1, Selected: 1},
		"publish_failed": {Left: 2}, "no_payload": {Left: 1}})
	if recs := ingressRecords(t, brokers); len(recs) != 3 {
		t.Fatalf("ingress topic holds %d records, want 3", len(recs))
	}
}

// groupOffsets sums the committed offsets of the redrive group on delay.dlq.
func groupOffsets(t *testing.T, brokers []string) int64 {
	t.Helper()
	var sum int64
	for _, o := range testkafka.Committed(t, brokers, "bridge-redrive", "delay.dlq", 2) {
		if o > 0 {
			sum += o
		}
	}
	return sum
}

// Issue 23, items 4 and 5, on Kafka: letters the bridge refuses again come back to the
// dead-letter topic as new records (a topic drops nothing as a duplicate, so none is
// lost), carrying x-delay-redrive with their old place; the run watches the topic past
// its end offsets and counts them as refused again, not as redriven.
func TestKafkaRefusedAgain(t *testing.T) {
	brokers, cl := kafkaLetterBox(t)
	for i := range 6 {
		kletter(t, cl, int32(i%2), "", "bad", "x-target", "still.bad", "x-delay-error", "target_not_allowed: still.bad")
	}
	kletter(t, cl, 0, "", "good", "x-target", "out.ok", "x-delay-error", "target_not_allowed: out.ok")
	// The bridge: every record on delay.in for still.bad is dead-lettered anew.
	bridge, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("delay.in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer bridge.Close()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go func() {
		for ctx.Err() == nil {
			bridge.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				if v, _ := recordHeader(r, "x-target"); v == "still.bad" {
					dead := &kgo.Record{Topic: "delay.dlq", Value: r.Value, Headers: append(r.Headers,
						kgo.RecordHeader{Key: "x-delay-error", Value: []byte("target_not_allowed: still.bad")})}
					_ = bridge.ProduceSync(ctx, dead).FirstErr()
				}
			})
		}
	}()
	counts, err := Kafka(t.Context(), KafkaConfig{Brokers: brokers, DLQTopic: "delay.dlq", Ingress: "delay.in", Group: "bridge-redrive"},
		Options{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "refused again", counts, map[string]Tally{"target_not_allowed": {Redriven: 1, Refused: 6, Selected: 7}})
	counts, err = Kafka(t.Context(), KafkaConfig{Brokers: brokers, DLQTopic: "delay.dlq", Ingress: "delay.in", Group: "bridge-redrive"},
		Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "the new letters", counts, map[string]Tally{"target_not_allowed": {Selected: 6}})
}

// kafkaLetterBox starts a kfake cluster with the topics delay.dlq (2 partitions) and
// delay.in (1), and a client that writes to the partition a record names (kletter).
func kafkaLetterBox(t *testing.T) ([]string, *kgo.Client) {
	t.Helper()
	brokers := testkafka.Start(t).Brokers()
	testkafka.CreateTopic(t, brokers, "delay.dlq", 2)
	testkafka.CreateTopic(t, brokers, "delay.in", 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return brokers, cl
}
