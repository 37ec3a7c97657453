package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestOrderingKeyLengthBrokers: an x-delay-ordering-key of exactly 256 bytes is taken
// and delivered, one of 257 bytes, or with a NUL, is dead-lettered invalid_ordering_key,
// on NATS and on Kafka.
func TestOrderingKeyLengthBrokers(t *testing.T) {
	s, cl := kafkaStack(t, true)
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	startBridge(t, s.env)
	natsDLQ := subscribe(t, s.nc, s.name("delay.dlq"))
	kafkaDLQ := consume(t, brokers, s.name("delay.dlq"))
	target := s.name("keys.out")
	out := subscribe(t, s.nc, target)
	k256 := strings.Repeat("k", 256)
	for _, c := range []struct{ payload, key string }{{"nats 256", k256}, {"nats 257", k256 + "k"}} {
		hdr := nats.Header{}
		hdr.Set("x-delay-ordering-key", c.key)
		hdr.Set("x-delay", "0")
		hdr.Set("x-target", target)
		if err := s.nc.PublishMsg(&nats.Msg{Subject: s.name("delay.in"), Header: hdr, Data: []byte(c.payload)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ payload, key string }{{"kafka 256", k256}, {"kafka 257", k256 + "k"}, {"kafka nul", "k\x00"}} {
		produce(t, cl, s.name("delay.in"), nil, c.payload, "x-delay-ordering-key", c.key, "x-delay", "0", "x-target", "nats:"+target)
	}
	got := map[string]bool{}
	for range 2 {
		got[string(receive(t, out, 15*time.Second).msg.Data)] = true
	}
	if !got["nats 256"] || !got["kafka 256"] {
		t.Fatalf("delivered %v, want the two 256-byte keys", got)
	}
	if a := receive(t, natsDLQ, 15*time.Second); string(a.msg.Data) != "nats 257" ||
		!strings.HasPrefix(a.msg.Header.Get("x-delay-error"), "invalid_ordering_key") {
		t.Fatalf("NATS dead letter %q: %v", a.msg.Data, a.msg.Header)
	}
	for range 2 {
		r := receiveRecord(t, kafkaDLQ, 15*time.Second).rec
		if e := mustHeader(t, r, "x-delay-error"); !strings.HasPrefix(e, "invalid_ordering_key") || !strings.HasPrefix(string(r.Value), "kafka 25") && string(r.Value) != "kafka nul" {
			t.Fatalf("Kafka dead letter %q: %s", r.Value, e)
		}
	}
	select {
	case a := <-out:
		t.Fatalf("delivered %q too", a.msg.Data)
	case <-time.After(time.Second):
	}
}
