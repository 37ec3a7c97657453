//go:build fault

package fault

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testkafka"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// Broker limits of TestD3IngressBrokerLimit: small, to keep it fast.
const (
	d3NATSMax  = 64 << 10 // nats-server max_payload
	d3KafkaMax = 96 << 10 // kfake message.max.bytes = BRIDGE_KAFKA_MAX_MESSAGE_BYTES
)

// natsWireSize is the size nats-server counts against max_payload: the header block as
// nats.go writes it plus the payload.
func natsWireSize(h nats.Header, payload int) int {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n + payload
}

// TestD3IngressBrokerLimit is row D3 at ingress: a message whose outgoing form the target
// broker can never take (NATS max_payload 64 KiB counting headers, Kafka
// message.max.bytes 96 KiB) is refused when it enters, through NATS (dead letter), Kafka
// (dead letter) and the message API (400 payload_too_large), and dead-lettered exactly
// once, never parked and retried. A dead letter that is itself too large for the DLQ goes
// without its payload. Messages just under the limits are delivered once; the largest
// payload the API accepts for NATS is found by bisection and must be delivered (the
// estimate is never optimistic), and its slack is reported.
func TestD3IngressBrokerLimit(t *testing.T) {
	start := time.Now()
	s := newNATSStack(t, func(o *server.Options) { o.MaxPayload = d3NATSMax })
	s.redis = testredis.Start(t)
	s.env["BRIDGE_REDIS_URL"] = s.redis.URL()
	kc := testkafka.Start(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(d3KafkaMax)}))
	brokers := kc.Brokers()
	for _, topic := range []string{"delay.in", "delay.cancel", "delay.dlq", "out-kafka"} {
		testkafka.CreateTopic(t, brokers, topic, 1)
	}
	s.env["BRIDGE_KAFKA_BROKERS"] = strings.Join(brokers, ",")
	s.env["BRIDGE_KAFKA_GROUP"] = "bridge-d3"
	kcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcl.Close)
	b := e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_KAFKA_MAX_MESSAGE_BYTES", strconv.Itoa(d3KafkaMax)))

	dead, good := newTally(), newTally()
	natsSub(t, s.nc, "delay.dlq", dead.addNATS)
	natsSub(t, s.nc, "out.>", good.addNATS)
	kafkaTap(t, brokers, "delay.dlq", dead.addKafka)
	kafkaTap(t, brokers, "out-kafka", good.addKafka)
	var mu sync.Mutex
	sizes := map[string]int{} // case -> payload bytes as delivered to out.big (NATS)
	sizesHdr := map[string]nats.Header{}
	natsSub(t, s.nc, "out.big", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		sizes[m.Header.Get("case")] = len(m.Data)
		sizesHdr[m.Header.Get("case")] = m.Header
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Through NATS: the largest message nats-server takes, bound for NATS: its outgoing
	// form (with the bridge's headers) is over max_payload.
	natsIn := func(name, target string, payload int) {
		m := nats.NewMsg("delay.in")
		m.Header.Set("case", name)
		m.Header.Set("x-target", target)
		if payload < 0 { // fill up to the server's limit
			payload = d3NATSMax - natsWireSize(m.Header, 0)
		}
		m.Data = make([]byte, payload)
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish %s (%d bytes): %v", name, payload, err)
		}
	}
	natsIn("n-fits", "nats:out.big", 60000)
	natsIn("n-over", "nats:out.big", -1)
	// Through Kafka.
	kafkaIn := func(name, target string, payload int) {
		r := &kgo.Record{Topic: "delay.in", Value: make([]byte, payload),
			Headers: []kgo.RecordHeader{{Key: "case", Value: []byte(name)}, {Key: "x-target", Value: []byte(target)}}}
		if err := kcl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %s (%d bytes): %v", name, payload, err)
		}
	}
	kafkaIn("k-fits", "kafka:out-kafka", 90000)
	kafkaIn("k-over-kafka", "kafka:out-kafka", d3KafkaMax-160) // the record fits the broker; with the bridge's headers it does not
	kafkaIn("k-over-nats", "nats:out.big", 80000)

	// Through the API.
	api := &client.Client{Base: "http://" + b.APIAddr}
	post := func(name, target string, payload int) error {
		p := base64.StdEncoding.EncodeToString(make([]byte, payload))
		_, err := api.Send(ctx, httpapi.PostRequest{Target: target, Headers: map[string]string{"case": name}, PayloadBase64: &p})
		return err
	}
	if err := post("a-fits", "nats:out.big", 60000); err != nil {
		t.Fatalf("API, 60000 bytes to NATS: %v", err)
	}
	for _, c := range []struct {
		name, target string
		size         int
	}{{"a-over-nats", "nats:out.big", d3NATSMax}, {"a-over-kafka", "kafka:out-kafka", d3KafkaMax}} {
		var apiErr *client.APIError
		err := post(c.name, c.target, c.size)
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.HasPrefix(apiErr.Message, "payload_too_large") {
			t.Fatalf("API, %s with %d bytes: %v, want 400 payload_too_large", c.target, c.size, err)
		}
	}
	// The largest payload the API accepts for NATS, by bisection, with the shape of the
	// message finally sent (same id length, target and headers; parked for an hour while
	// probing, then replaced to be due now).
	const largestID = "a-largest-0123456789abcdef" // 26 bytes, as a generated ULID
	probe := func(size int, delay string) error {
		p := base64.StdEncoding.EncodeToString(make([]byte, size))
		_, err := api.Send(ctx, httpapi.PostRequest{Target: "nats:out.big", Delay: []byte(strconv.Quote(delay)), ID: largestID,
			Headers: map[string]string{"case": "a-largest"}, PayloadBase64: &p})
		return err
	}
	lo, hi := 0, d3NATSMax // lo accepted, hi refused
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if err := probe(mid, "1h"); err == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	if err := probe(lo, "0s"); err != nil {
		t.Fatalf("API, the largest accepted payload %d: %v", lo, err)
	}

	goods := []string{"n-fits", "k-fits", "a-fits", "a-largest"}
	bads := map[string]string{"n-over": "nats", "k-over-kafka": "kafka", "k-over-nats": "kafka"}
	var badNames []string
	for n := range bads {
		badNames = append(badNames, n)
	}
	for _, n := range good.waitAll(goods, 30*time.Second) {
		t.Errorf("%s not delivered", n)
	}
	for _, n := range dead.waitAll(badNames, 30*time.Second) {
		t.Errorf("%s not dead-lettered", n)
	}
	time.Sleep(2 * time.Second) // a retry (backoff 1 s) or extra copy would show by now
	for _, n := range goods {
		if c, _ := good.get(n); c != 1 {
			t.Errorf("%s delivered %d times, want once", n, c)
		}
	}
	withoutPayload := 0
	for n, broker := range bads {
		c, h := dead.get(n)
		if c != 1 {
			t.Errorf("%s dead-lettered %d times, want once", n, c)
		}
		if e := h["x-delay-error"]; len(e) != 1 || !strings.HasPrefix(e[0], "payload_too_large") {
			t.Errorf("%s: x-delay-error %q, want payload_too_large", n, e)
		}
		if len(h["x-delay-original-size"]) > 0 {
			withoutPayload++
		}
		if c, _ := good.get(n); c > 0 {
			t.Errorf("%s (from %s) delivered to its target", n, broker)
		}
	}
	if _, h := dead.get("n-over"); len(h["x-delay-original-size"]) != 1 {
		t.Errorf("n-over: the dead letter (over max_payload with x-delay-error) should go without its payload; headers %v", h)
	}
	for _, n := range []string{"a-over-nats", "a-over-kafka"} {
		if c, _ := good.get(n); c > 0 {
			t.Errorf("%s delivered", n)
		}
	}
	if p := statsParked(t, b); p != 0 {
		t.Errorf("%d messages still parked (retried instead of refused)", p)
	}
	mu.Lock()
	largest := natsWireSize(sizesHdr["a-largest"], sizes["a-largest"])
	mu.Unlock()
	if sizes["a-largest"] != lo || largest > d3NATSMax {
		t.Errorf("largest accepted: payload %d delivered as %d, %d bytes on the wire (limit %d)", lo, sizes["a-largest"], largest, d3NATSMax)
	}
	t.Logf("D3 ingress: max_payload %d, Kafka %d; delivered %d/%d once, dead-lettered %d/%d once with payload_too_large (%d without payload), API 400 2/2; parked 0; largest API payload for NATS %d, %d bytes with headers on the wire: slack %d bytes; %s",
		d3NATSMax, d3KafkaMax, len(goods), len(goods), len(bads), len(bads), withoutPayload, lo, largest, d3NATSMax-largest, time.Since(start).Round(time.Millisecond))
}
