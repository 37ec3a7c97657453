package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaNullHeaderValue (docs/contract.md section 1): a Kafka header with a null value
// is parked and delivered to a Kafka target null again, an empty one empty and not null;
// the message API shows the null one as an empty string; on a NATS target (no null
// header) it is an empty value.
func TestKafkaNullHeaderValue(t *testing.T) {
	s, cl := kafkaStack(t, true)
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	b := startBridge(t, s.env)
	produceNull := func(id, target string) {
		t.Helper()
		r := &kgo.Record{Topic: s.name("delay.in"), Value: []byte("v"), Headers: []kgo.RecordHeader{
			{Key: "x-delay", Value: []byte("1500")}, {Key: "x-target", Value: []byte(target)}, {Key: "x-delay-id", Value: []byte(id)},
			{Key: "n", Value: nil}, {Key: "e", Value: []byte{}}, {Key: "s", Value: []byte("x")}}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	t.Run("kafka to kafka", func(t *testing.T) {
		topic := s.name("nullhdr.kafka")
		out := consume(t, brokers, topic)
		produceNull("null-1", "kafka:"+topic)
		var parked struct{ Headers map[string]*string }
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, body := httpGet("http://" + b.APIAddr + "/v1/messages/null-1")
			if code == 200 {
				if err := json.Unmarshal([]byte(body), &parked); err != nil {
					t.Fatalf("GET body %s: %v", body, err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not parked: %d %s", code, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n, e := parked.Headers["n"], parked.Headers["e"]; n == nil || *n != "" || e == nil || *e != "" {
			t.Errorf("GET headers %v, want n and e as empty strings", parked.Headers)
		}
		r := receiveRecord(t, out, 15*time.Second).rec
		for _, want := range []struct {
			key   string
			null  bool
			value string
		}{{"n", true, ""}, {"e", false, ""}, {"s", false, "x"}} {
			var found *kgo.RecordHeader
			for i := range r.Headers {
				if r.Headers[i].Key == want.key {
					found = &r.Headers[i]
				}
			}
			if found == nil || (found.Value == nil) != want.null || string(found.Value) != want.value {
				t.Errorf("header %s: %v, want null %v value %q (headers %v)", want.key, found, want.null, want.value, r.Headers)
			}
		}
	})
	t.Run("kafka to nats", func(t *testing.T) {
		subj := s.name("nullhdr.nats")
		out := subscribe(t, s.nc, subj)
		produceNull("null-2", "nats:"+subj)
		a := receive(t, out, 15*time.Second)
		if v, ok := a.msg.Header["n"]; !ok || len(v) != 1 || v[0] != "" {
			t.Fatalf("header n = %v (present %v), want one empty value: %v", v, ok, a.msg.Header)
		}
	})
}

// TestReservedHeaderRefused: a producer's header named with the bridge's reserved prefix
// in lower case (the adapters' internal metadata names), from core NATS, JetStream and
// Kafka, is refused with invalid_headers naming it and dead-lettered, never dropped
// silently; the source id header among them is refused too, not taken as the source id.
func TestReservedHeaderRefused(t *testing.T) {
	s, cl := kafkaStack(t, true)
	s.createStream(t, "IN", s.name("delay.in"))
	s.env["BRIDGE_NATS_STREAM"] = s.streamName("IN")
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	startBridge(t, s.env)
	natsDLQ := subscribe(t, s.nc, s.name("delay.dlq"))
	kafkaDLQ := consume(t, brokers, s.name("delay.dlq"))
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	wantError := func(t *testing.T, e, name string) {
		t.Helper()
		if !strings.HasPrefix(e, "invalid_headers: ") || !strings.Contains(e, `"`+name+`"`) {
			t.Fatalf("x-delay-error %q, want invalid_headers naming %s", e, name)
		}
	}
	for _, name := range []string{"_delaybridge_x", "_delaybridge_source_id"} {
		t.Run("jetstream "+name, func(t *testing.T) {
			m := nats.NewMsg(s.name("delay.in"))
			m.Header["x-delay"] = []string{"1h"}
			m.Header["x-target"] = []string{"out.reserved"}
			m.Header[name] = []string{"js:FORGED:1"}
			m.Data = []byte("js " + name)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
			a := receive(t, natsDLQ, 15*time.Second)
			if string(a.msg.Data) != "js "+name || a.msg.Header.Get("x-target") != "out.reserved" {
				t.Fatalf("dead letter %q %v", a.msg.Data, a.msg.Header)
			}
			wantError(t, a.msg.Header.Get("x-delay-error"), name)
		})
		t.Run("kafka "+name, func(t *testing.T) {
			produce(t, cl, s.name("delay.in"), nil, "kafka "+name, "x-delay", "1h", "x-target", "out.reserved", name, "kafka:forged:0:1")
			r := receiveRecord(t, kafkaDLQ, 15*time.Second).rec
			if string(r.Value) != "kafka "+name {
				t.Fatalf("dead letter %q %v", r.Value, r.Headers)
			}
			wantError(t, mustHeader(t, r, "x-delay-error"), name)
		})
	}
}

// TestReservedHeaderRefusedCore is TestReservedHeaderRefused for a core NATS request (read
// through the adapter's watermill Subscribe): the reply and the dead letter name the header.
func TestReservedHeaderRefusedCore(t *testing.T) {
	s := newStack(t)
	startBridge(t, s.env)
	dlq := subscribe(t, s.nc, s.name("delay.dlq"))
	for _, name := range []string{"_delaybridge_x", "_delaybridge_source_id", "_delaybridge_reply"} {
		t.Run(name, func(t *testing.T) {
			hdr := nats.Header{"x-delay": {"1h"}, "x-target": {"out.reserved"}, name: {"v"}}
			reply := request(t, s.nc, s.name("delay.in"), hdr, "core "+name)
			e, _ := reply["error"].(string)
			if !strings.HasPrefix(e, "invalid_headers: ") || !strings.Contains(e, `"`+name+`"`) {
				t.Fatalf("reply %v, want invalid_headers naming %s", reply, name)
			}
			a := receive(t, dlq, 15*time.Second)
			if string(a.msg.Data) != "core "+name || a.msg.Header.Get("x-delay-error") != e {
				t.Fatalf("dead letter %q %v", a.msg.Data, a.msg.Header)
			}
		})
	}
}
