package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaTombstone (issue 24 item 4, docs/contract.md section 1): a record with a null
// value stays null Kafka to Kafka (an empty value stays empty and not null); to NATS it
// is an empty payload with x-kafka-tombstone: true; a NATS message with that header
// becomes a tombstone on a Kafka target, and one that also has a payload is refused
// (invalid_headers: a tombstone has no value).
func TestKafkaTombstone(t *testing.T) {
	s, cl := kafkaStack(t, true)
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	startBridge(t, s.env)
	in := s.name("delay.in")
	produceRecord := func(key string, value []byte, target string) {
		t.Helper()
		r := &kgo.Record{Topic: in, Key: []byte(key), Value: value, Headers: []kgo.RecordHeader{
			{Key: "x-delay", Value: []byte("100")}, {Key: "x-target", Value: []byte(target)}}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	t.Run("kafka to kafka", func(t *testing.T) {
		topic := s.name("ts.kafka")
		out := consume(t, brokers, topic)
		produceRecord("gone", nil, "kafka:"+topic)
		produceRecord("empty", []byte{}, "kafka:"+topic)
		for range 2 {
			r := receiveRecord(t, out, 15*time.Second).rec
			switch string(r.Key) {
			case "gone":
				if r.Value != nil {
					t.Errorf("tombstone arrived with a non-null value %q", r.Value)
				}
			case "empty":
				if r.Value == nil {
					t.Errorf("an empty value arrived as a tombstone")
				}
			}
			if _, n := header(r, "x-kafka-tombstone"); n != 0 {
				t.Errorf("record %q: x-kafka-tombstone added Kafka to Kafka", r.Key)
			}
		}
	})
	t.Run("kafka to nats", func(t *testing.T) {
		subj := s.name("ts.nats")
		out := subscribe(t, s.nc, subj)
		produceRecord("gone", nil, "nats:"+subj)
		a := receive(t, out, 15*time.Second)
		if len(a.msg.Data) != 0 || a.msg.Header.Get("x-kafka-tombstone") != "true" || a.msg.Header.Get("x-kafka-key") != "gone" {
			t.Fatalf("payload %q headers %v, want empty with x-kafka-tombstone: true", a.msg.Data, a.msg.Header)
		}
	})
	t.Run("nats to kafka", func(t *testing.T) {
		topic := s.name("ts.fromnats")
		out := consume(t, brokers, topic)
		hdr := nats.Header{}
		hdr.Set("x-delay", "100ms")
		hdr.Set("x-target", "kafka:"+topic)
		hdr.Set("x-kafka-key", "k")
		hdr.Set("x-kafka-tombstone", "true")
		if reply := request(t, s.nc, in, hdr, ""); reply["id"] == nil {
			t.Fatalf("reply %v", reply)
		}
		r := receiveRecord(t, out, 15*time.Second).rec
		if string(r.Key) != "k" || r.Value != nil {
			t.Fatalf("key %q value %v, want a tombstone", r.Key, r.Value)
		}
		if reply := request(t, s.nc, in, hdr, "a value"); !strings.HasPrefix(reply["error"].(string), "invalid_headers") {
			t.Fatalf("a tombstone with a payload: reply %v, want invalid_headers", reply)
		}
	})
}
