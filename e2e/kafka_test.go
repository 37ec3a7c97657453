package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// The Kafka stories use franz-go (kgo) as the client, so the bridge (kafka-go inside) is
// checked against an independent Kafka implementation of producer and consumer.

// kafkaStack adds a kfake cluster to a stack and turns Kafka on in the bridge env.
func kafkaStack(t *testing.T, withNATS bool) (*stack, *kgo.Client) {
	t.Helper()
	s := newStack(t)
	if !withNATS {
		delete(s.env, "BRIDGE_NATS_URL")
	}
	brokers := kafkaBrokers(t)
	for _, topic := range []string{s.name("delay.in"), s.name("delay.cancel"), s.name("delay.dlq")} {
		s.createTopic(t, brokers, topic, 3)
	}
	s.env["BRIDGE_KAFKA_BROKERS"] = strings.Join(brokers, ",")
	s.env["BRIDGE_KAFKA_GROUP"] = "bridge-" + strconv.Itoa(rand.IntN(1e9))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return s, cl
}

// produce writes one record with headers given as key, value pairs.
func produce(t *testing.T, cl *kgo.Client, topic string, key []byte, value string, hdrs ...string) {
	t.Helper()
	r := &kgo.Record{Topic: topic, Key: key, Value: []byte(value)}
	for i := 0; i+1 < len(hdrs); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: hdrs[i], Value: []byte(hdrs[i+1])})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// kafkaReceived is a record read from a target topic with its arrival time.
type kafkaReceived struct {
	rec *kgo.Record
	at  time.Time
}

// consume reads topic from the start with its own client, in the background.
func consume(t *testing.T, brokers []string, topic string) chan kafkaReceived {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatalf("kgo consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan kafkaReceived, 100000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) { out <- kafkaReceived{r, now} })
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return out
}

func receiveRecord(t *testing.T, ch chan kafkaReceived, within time.Duration) kafkaReceived {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("no record within %s", within)
		return kafkaReceived{}
	}
}

func header(r *kgo.Record, key string) (string, int) {
	var v string
	n := 0
	for _, h := range r.Headers {
		if h.Key == key {
			if n == 0 {
				v = string(h.Value)
			}
			n++
		}
	}
	return v, n
}

func headerValues(r *kgo.Record, key string) []string {
	var out []string
	for _, h := range r.Headers {
		if h.Key == key {
			out = append(out, string(h.Value))
		}
	}
	return out
}

// TestKafkaInKafkaOut: a record on delay.in reaches its Kafka target no earlier than due,
// with its key, payload and headers kept and the bridge's headers added. Then many records
// measure lateness and rate.
func TestKafkaInKafkaOut(t *testing.T) {
	s, cl := kafkaStack(t, false)
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	for _, topic := range []string{"orders.timeout", "rate.out"} {
		s.createTopic(t, brokers, topic, 3)
	}
	b := startBridge(t, s.env)
	out := consume(t, brokers, "orders.timeout")

	sent := time.Now()
	produce(t, cl, s.name("delay.in"), []byte{0, 1, 2}, "payload", "X-Delay", "PT0.7S", "x-target", "orders.timeout",
		"trace", "a", "trace", "b", "x-delay-id", "k-1")
	r := receiveRecord(t, out, 15*time.Second)
	due, err := strconv.ParseInt(mustHeader(t, r.rec, "x-delay-due"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if r.at.UnixMilli() < due {
		t.Fatalf("delivered %dms early", due-r.at.UnixMilli())
	}
	if d := time.UnixMilli(due).Sub(sent); d < 600*time.Millisecond || d > 2*time.Second {
		t.Fatalf("due %s after producing, want about 700ms", d)
	}
	if !slices.Equal(r.rec.Key, []byte{0, 1, 2}) || string(r.rec.Value) != "payload" {
		t.Fatalf("key %v value %q", r.rec.Key, r.rec.Value)
	}
	if id := mustHeader(t, r.rec, "x-delay-id"); id != "k-1" {
		t.Fatalf("x-delay-id %q", id)
	}
	if src := mustHeader(t, r.rec, "x-delay-source"); src != "kafka:"+s.name("delay.in") {
		t.Fatalf("x-delay-source %q", src)
	}
	if got := headerValues(r.rec, "trace"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("repeated header %v", got)
	}
	for _, k := range []string{"X-Delay", "x-target"} {
		if _, n := header(r.rec, k); n != 0 {
			t.Fatalf("control header %s forwarded", k)
		}
	}

	// Rate and lateness: n records with delays uniform in 0..1s.
	const n = 2000
	produceStart := time.Now()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: s.name("delay.in"), Key: []byte(strconv.Itoa(i)), Value: []byte("x"), Headers: []kgo.RecordHeader{
			{Key: "x-delay", Value: []byte(strconv.Itoa(rand.IntN(1000)))},
			{Key: "x-target", Value: []byte("orders.timeout")},
			{Key: "seq", Value: []byte(strconv.Itoa(i))},
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produced := time.Since(produceStart)
	seen := map[string]bool{}
	var lateness []time.Duration
	for len(seen) < n {
		r := receiveRecord(t, out, 30*time.Second)
		seq, _ := header(r.rec, "seq")
		due, _ := strconv.ParseInt(mustHeader(t, r.rec, "x-delay-due"), 10, 64)
		late := r.at.Sub(time.UnixMilli(due))
		if late < 0 {
			t.Fatalf("seq %s delivered %s early", seq, -late)
		}
		if string(r.rec.Key) != seq {
			t.Fatalf("seq %s arrived with key %q", seq, r.rec.Key)
		}
		seen[seq] = true
		lateness = append(lateness, late)
	}
	total := time.Since(produceStart)
	slices.Sort(lateness)
	t.Logf("kafka->kafka %d records: produced in %s, all delivered %s after the first produce; lateness p50 %s p99 %s max %s",
		n, produced.Round(time.Millisecond), total.Round(time.Millisecond),
		percentile(lateness, .5), percentile(lateness, .99), lateness[len(lateness)-1])

	// Rate: m records due at once, through ingress, Redis and egress.
	const m = 10000
	batch := make([]*kgo.Record, m)
	for i := range batch {
		batch[i] = &kgo.Record{Topic: s.name("delay.in"), Value: []byte("r"), Headers: []kgo.RecordHeader{
			{Key: "x-target", Value: []byte("rate.out")}, {Key: "seq", Value: []byte(strconv.Itoa(i))},
		}}
	}
	rate := consume(t, brokers, "rate.out")
	t.Cleanup(func() {
		if strings.Contains(b.Out.String(), "publishes failed") {
			t.Logf("bridge retried publishes:\n%s", b.Out.String())
		}
	})
	start := time.Now()
	if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < m {
		r := receiveRecord(t, rate, 60*time.Second)
		seq, _ := header(r.rec, "seq")
		got[seq] = true
	}
	took := time.Since(start)
	t.Logf("kafka->kafka rate: %d records due at once delivered in %s (%.0f records/s end to end)",
		m, took.Round(time.Millisecond), float64(m)/took.Seconds())
}

func mustHeader(t *testing.T, r *kgo.Record, key string) string {
	t.Helper()
	v, n := header(r, key)
	if n != 1 {
		t.Fatalf("header %s present %d times in %v", key, n, r.Headers)
	}
	return v
}

// TestCrossBroker: NATS in -> Kafka out (x-kafka-key becomes the record key) and Kafka in
// -> NATS out (the record key travels as x-kafka-key).
func TestCrossBroker(t *testing.T) {
	s, cl := kafkaStack(t, true)
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	startBridge(t, s.env)

	t.Run("nats to kafka", func(t *testing.T) {
		out := consume(t, brokers, "billing.due")
		hdr := nats.Header{}
		hdr.Set("x-delay", "200ms")
		hdr.Set("x-target", "kafka:billing.due")
		hdr.Set("x-kafka-key", "customer-7")
		reply := request(t, s.nc, s.name("delay.in"), hdr, "from nats")
		if reply["id"] == nil {
			t.Fatalf("reply %v", reply)
		}
		r := receiveRecord(t, out, 15*time.Second)
		if string(r.rec.Key) != "customer-7" || string(r.rec.Value) != "from nats" {
			t.Fatalf("key %q value %q", r.rec.Key, r.rec.Value)
		}
		if src := mustHeader(t, r.rec, "x-delay-source"); src != "nats:"+s.name("delay.in") {
			t.Fatalf("x-delay-source %q", src)
		}
	})
	t.Run("kafka to nats", func(t *testing.T) {
		out := subscribe(t, s.nc, "shipping.due")
		produce(t, cl, s.name("delay.in"), []byte("order-9"), "from kafka", "x-delay", "200", "x-target", "nats:shipping.due")
		a := receive(t, out, 15*time.Second)
		if string(a.msg.Data) != "from kafka" || a.msg.Header.Get("x-kafka-key") != "order-9" {
			t.Fatalf("data %q headers %v", a.msg.Data, a.msg.Header)
		}
		if a.msg.Header.Get("x-delay-source") != "kafka:"+s.name("delay.in") {
			t.Fatalf("x-delay-source %q", a.msg.Header.Get("x-delay-source"))
		}
	})
}

// TestKafkaDeadLetterAndCancel: invalid records go to the delay.dlq topic with their
// headers and x-delay-error; a record on delay.cancel removes a pending message.
func TestKafkaDeadLetterAndCancel(t *testing.T) {
	s, cl := kafkaStack(t, false)
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	b := startBridge(t, s.env)
	dlq := consume(t, brokers, s.name("delay.dlq"))

	for i, bad := range [][]string{
		{"x-delay", "1d", "x-target", "t1"},
		{"x-delay", "1s", "x-delay", "2s", "x-target", "t1"}, // repeated control header
		{"x-delay", "1s", "x-target", "nats:t1"},             // NATS not configured
		{"x-delay", "1s", "x-target", "__consumer_offsets"},  // reserved
		{"x-delay", "1s", "x-target", s.name("delay.in")},    // loop
		{"x-delay", "1s", "x-target", "bad topic"},           // malformed
	} {
		produce(t, cl, s.name("delay.in"), []byte(fmt.Sprint(i)), fmt.Sprint("bad-", i), bad...)
	}
	got := map[string]string{}
	for len(got) < 6 {
		r := receiveRecord(t, dlq, 15*time.Second)
		e := mustHeader(t, r.rec, "x-delay-error")
		got[string(r.rec.Value)] = e
		if _, n := header(r.rec, "x-target"); n != 1 {
			t.Fatalf("dead letter lost its headers: %v", r.rec.Headers)
		}
	}
	for v, e := range got {
		t.Logf("%s -> %s", v, e)
	}

	// Cancel: park one with an id, cancel it on delay.cancel, a later one still arrives.
	out := consume(t, brokers, "cancel.target")
	produce(t, cl, s.name("delay.in"), nil, "cancelled", "x-delay", "1500ms", "x-target", "cancel.target", "x-delay-id", "c-1")
	produce(t, cl, s.name("delay.in"), nil, "kept", "x-delay", "1600ms", "x-target", "cancel.target", "x-delay-id", "c-2")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, body := httpGet("http://" + b.APIAddr + "/v1/stats"); code == 200 && strings.Contains(body, `"parked":2`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("records not parked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	produce(t, cl, s.name("delay.cancel"), nil, "", "x-delay-id", "c-1")
	r := receiveRecord(t, out, 15*time.Second)
	if string(r.rec.Value) != "kept" {
		t.Fatalf("got %q, the cancelled record was delivered", r.rec.Value)
	}
	select {
	case r := <-out:
		t.Fatalf("unexpected record %q", r.rec.Value)
	case <-time.After(500 * time.Millisecond):
	}
}

// TestKafkaBrokerRestart: the Kafka cluster restarts (same ports, same data) while the
// bridge runs with records parked and more arriving: the bridge reconnects, resumes its
// group from the committed offsets and delivers everything, none early.
func TestKafkaBrokerRestart(t *testing.T) {
	s := newStack(t)
	delete(s.env, "BRIDGE_NATS_URL")
	kc := testkafka.Start(t) // restarted below: always a local cluster
	brokers := kc.Brokers()
	for _, topic := range []string{s.name("delay.in"), s.name("delay.cancel"), s.name("delay.dlq"), "restart.out"} {
		s.createTopic(t, brokers, topic, 3)
	}
	s.env["BRIDGE_KAFKA_BROKERS"] = strings.Join(brokers, ",")
	s.env["BRIDGE_LOG_LEVEL"] = "info"
	b := startBridge(t, s.env)
	out := consume(t, brokers, "restart.out")

	produceN := func(from, n int, delay string) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: s.name("delay.in"), Value: []byte("v"), Headers: []kgo.RecordHeader{
				{Key: "x-delay", Value: []byte(delay)}, {Key: "x-target", Value: []byte("restart.out")},
				{Key: "seq", Value: []byte(strconv.Itoa(from + i))},
			}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	const n = 300
	produceN(0, n, "1500ms")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, body := httpGet("http://" + b.APIAddr + "/v1/stats"); code == 200 && strings.Contains(body, `"parked":300`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("first records not parked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	kc.Restart(t)
	produceN(n, n, "200ms")

	seen := map[string]bool{}
	for len(seen) < 2*n {
		r := receiveRecord(t, out, 60*time.Second)
		due, _ := strconv.ParseInt(mustHeader(t, r.rec, "x-delay-due"), 10, 64)
		if r.at.UnixMilli() < due {
			t.Fatalf("delivered %dms early", due-r.at.UnixMilli())
		}
		seq, _ := header(r.rec, "seq")
		seen[seq] = true
	}
}
