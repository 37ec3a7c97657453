package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/testnats"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// stack is one test's servers and the bridge env pointing at them.
type stack struct {
	redis   *testredis.Server // nil unless the stack is local (newLocalStack)
	nats    *testnats.Server  // nil unless the stack is local (newLocalStack)
	natsURL string
	nc      *nats.Conn
	env     map[string]string
	ns      string // namespace of subjects, topics and streams on an external stack (stack.name)
}

// newStack is the stack of the user stories: the E2E_* endpoints when set (stack_test.go),
// else servers of the test's own.
func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{natsURL: natsURL(t)}
	if externalStack() {
		s.ns = "e2e-" + testredis.Prefix(t)
	}
	return s.init(t, redisURL(t))
}

// newLocalStack always spawns its own redis-server and nats-server, for tests that kill or
// restart them (never do that to a shared stack).
func newLocalStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{redis: testredis.Start(t), nats: testnats.Start(t)}
	s.natsURL = s.nats.URL()
	return s.init(t, s.redis.URL())
}

func (s *stack) init(t *testing.T, redisURL string) *stack {
	t.Helper()
	s.nc = testnats.Connect(t, s.natsURL)
	s.env = map[string]string{
		"BRIDGE_REDIS_URL":  redisURL,
		"BRIDGE_NATS_URL":   s.natsURL,
		"BRIDGE_KEY_PREFIX": testredis.Prefix(t),
		"BRIDGE_LOG_LEVEL":  "debug",
		// Long enough that a publish slowed by a loaded CI machine (race detector, parallel
		// packages) is not cut at 4/5 of the lease and retried: tests that need a lease to
		// expire set their own.
		"BRIDGE_LEASE": "5s",
	}
	if s.redis == nil {
		cleanupKeys(t, redisURL, s.env["BRIDGE_KEY_PREFIX"])
	}
	if s.ns != "" {
		// Own subjects, topics, queue group and durable: independent of any other bridge
		// on the shared stack.
		s.env["BRIDGE_NATS_SUBJECT"] = s.name("delay.in")
		s.env["BRIDGE_KAFKA_TOPIC"] = s.name("delay.in")
		s.env["BRIDGE_CANCEL_SUBJECT"] = s.name("delay.cancel")
		s.env["BRIDGE_DLQ_SUBJECT"] = s.name("delay.dlq")
		s.env["BRIDGE_NATS_QUEUE"] = s.ns
		s.env["BRIDGE_NATS_CONSUMER"] = s.ns
	}
	return s
}

// arrival is one message received on a target.
type arrival struct {
	msg *nats.Msg
	at  time.Time
}

func subscribe(t *testing.T, nc *nats.Conn, subject string) chan arrival {
	t.Helper()
	ch := make(chan arrival, 100000)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { ch <- arrival{m, time.Now()} })
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

func receive(t *testing.T, ch chan arrival, within time.Duration) arrival {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(within):
		t.Fatalf("nothing arrived within %s", within)
		return arrival{}
	}
}

func request(t *testing.T, nc *nats.Conn, subject string, hdr nats.Header, payload string) map[string]any {
	t.Helper()
	m := &nats.Msg{Subject: subject, Header: hdr, Data: []byte(payload)}
	resp, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	var body map[string]any
	if err := json.Unmarshal(resp.Data, &body); err != nil {
		t.Fatalf("reply %q is not JSON: %v", resp.Data, err)
	}
	return body
}

// TestCoreRequestDelayedDelivery: the first user story. A core NATS request to delay.in is
// answered after the message is in Redis, and the message reaches its target no earlier
// than due, with the headers docs/contract.md section 2 lists.
func TestCoreRequestDelayedDelivery(t *testing.T) {
	s := newStack(t)
	startBridge(t, s.env)
	out := subscribe(t, s.nc, "orders.timeout")

	hdr := nats.Header{}
	hdr.Set("X-Delay", "700ms") // header names are case-insensitive
	hdr.Set("x-target", "orders.timeout")
	hdr["trace"] = []string{"a", "b"} // repeated header keeps its values in order
	hdr.Set("Nats-Rollup", "all")     // Nats-* never forwarded as given
	hdr.Set("x-delay-due", "1")       // the bridge's own output headers are set by the bridge
	sent := time.Now()
	reply := request(t, s.nc, s.name("delay.in"), hdr, "payload \x00 bytes")
	id, _ := reply["id"].(string)
	due, _ := reply["due"].(float64)
	if id == "" || due == 0 {
		t.Fatalf("reply = %v, want id and due", reply)
	}
	if d := time.UnixMilli(int64(due)).Sub(sent); d < 600*time.Millisecond || d > 1500*time.Millisecond {
		t.Fatalf("due is %s after sending, want about 700ms", d)
	}

	a := receive(t, out, 10*time.Second)
	if a.at.UnixMilli() < int64(due) {
		t.Fatalf("delivered %dms early", int64(due)-a.at.UnixMilli())
	}
	if string(a.msg.Data) != "payload \x00 bytes" {
		t.Fatalf("payload = %q", a.msg.Data)
	}
	h := a.msg.Header
	if h.Get("x-delay-id") != id || h.Get("x-delay-due") != strconv.FormatInt(int64(due), 10) || h.Get("x-delay-source") != "nats:"+s.name("delay.in") {
		t.Fatalf("bridge headers = %v, want id %s due %d source nats:delay.in", h, id, int64(due))
	}
	if len(h.Values("x-delay-due")) != 1 {
		t.Fatalf("x-delay-due given %d times", len(h.Values("x-delay-due")))
	}
	for _, k := range []string{"X-Delay", "x-delay", "x-target", "Nats-Rollup"} {
		if _, ok := h[k]; ok {
			t.Fatalf("header %s was forwarded: %v", k, h)
		}
	}
	if got := h.Values("trace"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("repeated header = %v, want [a b]", got)
	}
	select {
	case a := <-out:
		t.Fatalf("delivered a second time: %v", a.msg.Header)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestJetStreamInJetStreamOut: many messages through a JetStream ingress stream to a
// JetStream target: each arrives exactly once, none early. Logs lateness percentiles.
func TestJetStreamInJetStreamOut(t *testing.T) {
	s := newStack(t)
	s.createStream(t, "IN", s.name("delay.in"), s.name("delay.cancel"))
	s.createStream(t, "OUT", "out.>")
	s.env["BRIDGE_NATS_STREAM"] = s.streamName("IN")
	startBridge(t, s.env)
	out := subscribe(t, s.nc, "out.js")

	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range n {
		m := nats.NewMsg(s.name("delay.in"))
		m.Header.Set("x-delay", strconv.Itoa(rand.IntN(1000))) // integer ms, uniform 0..1s
		m.Header.Set("x-target", "out.js")
		m.Header.Set("seq", strconv.Itoa(i))
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publish acks did not arrive")
	}

	seen := map[string]bool{}
	var lateness []time.Duration
	for len(seen) < n {
		a := receive(t, out, 20*time.Second)
		if seen[a.msg.Header.Get("seq")] {
			t.Fatalf("seq %s delivered twice without any fault", a.msg.Header.Get("seq"))
		}
		due, err := strconv.ParseInt(a.msg.Header.Get("x-delay-due"), 10, 64)
		if err != nil {
			t.Fatalf("x-delay-due: %v", err)
		}
		late := a.at.Sub(time.UnixMilli(due))
		if late < 0 {
			t.Fatalf("message %s arrived %s early", a.msg.Header.Get("seq"), -late)
		}
		lateness = append(lateness, late)
		seen[a.msg.Header.Get("seq")] = true
	}
	select {
	case a := <-out:
		t.Fatalf("extra delivery of seq %s without any fault", a.msg.Header.Get("seq"))
	case <-time.After(300 * time.Millisecond):
	}
	// JetStream dedup and exactly-once-per-firing: the stream holds n messages.
	str, err := js.Stream(ctx, s.streamName("OUT"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Fatalf("OUT stream holds %d messages, want %d", info.State.Msgs, n)
	}
	slices.Sort(lateness)
	t.Logf("lateness over %d messages (arrival at subscriber minus x-delay-due): p50 %s p99 %s max %s",
		n, percentile(lateness, .50), percentile(lateness, .99), lateness[len(lateness)-1])
}

// TestInvalidGoesToDeadLetter: bad input gets an error reply and lands on delay.dlq with
// all its headers and x-delay-error; nothing reaches a target.
func TestInvalidGoesToDeadLetter(t *testing.T) {
	s := newStack(t)
	startBridge(t, s.env)
	dlq := subscribe(t, s.nc, s.name("delay.dlq"))
	cases := []struct {
		name   string
		hdr    map[string]string
		reason string
	}{
		{"bad delay", map[string]string{"x-delay": "abc", "x-target": "a.b"}, "invalid_delay"},
		{"missing target", map[string]string{"x-delay": "1s"}, "missing_target"},
		{"loop to own subject", map[string]string{"x-delay": "1s", "x-target": s.name("delay.in")}, "target_loop"},
		{"wildcard target", map[string]string{"x-delay": "1s", "x-target": "a.*"}, "invalid_target"},
		{"negative delay", map[string]string{"x-delay": "-5s", "x-target": "a.b"}, "invalid_delay"},
		{"reserved subject", map[string]string{"x-target": "$JS.API.STREAM.DELETE.X"}, "invalid_target"},
		{"kafka not configured", map[string]string{"x-target": "kafka:orders"}, "broker_not_configured"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hdr := nats.Header{}
			for k, v := range tc.hdr {
				hdr.Set(k, v)
			}
			hdr.Set("keep", "me")
			reply := request(t, s.nc, s.name("delay.in"), hdr, "body-"+tc.name)
			errText, _ := reply["error"].(string)
			if !strings.HasPrefix(errText, tc.reason) {
				t.Fatalf("reply error = %q, want reason %s", errText, tc.reason)
			}
			a := receive(t, dlq, 5*time.Second)
			if string(a.msg.Data) != "body-"+tc.name {
				t.Fatalf("dead letter payload = %q", a.msg.Data)
			}
			if a.msg.Header.Get("x-delay-error") != errText || a.msg.Header.Get("keep") != "me" {
				t.Fatalf("dead letter headers = %v", a.msg.Header)
			}
			for k, v := range tc.hdr {
				if a.msg.Header.Get(k) != v {
					t.Fatalf("dead letter lost original header %s=%s: %v", k, v, a.msg.Header)
				}
			}
		})
	}
}

// TestCancelAndReschedule: the same x-delay-id replaces the pending message; a cancel
// request removes it; an unknown id is answered cancelled=false.
func TestCancelAndReschedule(t *testing.T) {
	s := newStack(t)
	b := startBridge(t, s.env)
	out := subscribe(t, s.nc, "cancel.test")
	send := func(id, delay, body string) {
		hdr := nats.Header{}
		hdr.Set("x-delay-id", id)
		hdr.Set("x-delay", delay)
		hdr.Set("x-target", "cancel.test")
		if r := request(t, s.nc, s.name("delay.in"), hdr, body); r["id"] != id {
			t.Fatalf("reply = %v", r)
		}
	}
	send("order-1", "1s", "first")
	send("order-1", "1200ms", "second") // reschedule: replaces "first"
	send("order-2", "1s", "cancelled")

	hdr := nats.Header{}
	hdr.Set("x-delay-id", "order-2")
	if r := request(t, s.nc, s.name("delay.cancel"), hdr, ""); r["cancelled"] != true || r["id"] != "order-2" {
		t.Fatalf("cancel reply = %v", r)
	}
	hdr.Set("x-delay-id", "unknown")
	if r := request(t, s.nc, s.name("delay.cancel"), hdr, ""); r["cancelled"] != false {
		t.Fatalf("cancel of unknown id reply = %v", r)
	}
	a := receive(t, out, 10*time.Second)
	if string(a.msg.Data) != "second" {
		t.Fatalf("got %q, want the rescheduled message", a.msg.Data)
	}
	// Nothing else arrives: wait until the store is empty, then a little past the last due.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := httpGet("http://" + b.APIAddr + "/v1/stats")
		if code == http.StatusOK && strings.Contains(body, `"parked":0`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store not empty: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case a := <-out:
		t.Fatalf("unexpected delivery %q", a.msg.Data)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestSigtermDrainsAndRestartDelivers: SIGTERM exits 0 promptly; messages parked before
// the stop are delivered by the next bridge.
func TestSigtermDrainsAndRestartDelivers(t *testing.T) {
	s := newStack(t)
	b := startBridge(t, s.env)
	out := subscribe(t, s.nc, "restart.test")
	for i := range 20 {
		hdr := nats.Header{}
		hdr.Set("x-delay", "1500ms")
		hdr.Set("x-target", "restart.test")
		request(t, s.nc, s.name("delay.in"), hdr, fmt.Sprint(i))
	}
	err, took := b.Stop(t, 30*time.Second)
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, b.Out.String())
	}
	t.Logf("drained and exited %s after SIGTERM", took)
	startBridge(t, s.env)
	got := map[string]bool{}
	for len(got) < 20 {
		got[string(receive(t, out, 10*time.Second).msg.Data)] = true
	}
}

// TestStartupErrors: a bad variable or a missing stream stops the start with a clear
// line and a non-zero exit.
func TestStartupErrors(t *testing.T) {
	s := newStack(t)
	t.Run("bad variables are all named", func(t *testing.T) {
		env := map[string]string{"BRIDGE_SHARDS": "abc", "BRIDGE_LEASE": "soon", "BRIDGE_NATS_URL": s.natsURL}
		b := startProcess(t, env)
		if err := b.Wait(t, 20*time.Second); err == nil {
			t.Fatal("bridge started with BRIDGE_SHARDS=abc")
		}
		for _, name := range []string{"BRIDGE_SHARDS", "BRIDGE_LEASE"} {
			if !contains(b.Out.String(), name) {
				t.Fatalf("output does not name %s:\n%s", name, b.Out.String())
			}
		}
	})
	t.Run("port taken", func(t *testing.T) {
		first := startBridge(t, s.env)
		env := map[string]string{}
		for k, v := range s.env {
			env[k] = v
		}
		env["BRIDGE_HTTP_ADDR"] = first.HTTPAddr
		b := startProcess(t, env)
		if err := b.Wait(t, 20*time.Second); err == nil {
			t.Fatal("a second bridge started on a taken port")
		}
		out := b.Out.String()
		if !contains(out, "BRIDGE_HTTP_ADDR") || contains(out, "consuming") || contains(out, "fleet membership") {
			t.Fatalf("want a stop naming BRIDGE_HTTP_ADDR before consuming or joining the fleet:\n%s", out)
		}
	})
	t.Run("no such redis database", func(t *testing.T) {
		env := map[string]string{}
		for k, v := range s.env {
			env[k] = v
		}
		env["BRIDGE_REDIS_URL"] = strings.TrimSuffix(strings.TrimSuffix(env["BRIDGE_REDIS_URL"], "/0"), "/") + "/99"
		b := startProcess(t, env)
		if err := b.Wait(t, 20*time.Second); err == nil {
			t.Fatal("the bridge started on a database Redis does not have")
		}
		if out := b.Out.String(); !contains(out, "no such database") || contains(out, "delaybridge running") {
			t.Fatalf("want a stop naming the database:\n%s", out)
		}
	})
	t.Run("missing stream", func(t *testing.T) {
		env := map[string]string{}
		for k, v := range s.env {
			env[k] = v
		}
		env["BRIDGE_NATS_STREAM"] = "NOPE"
		b := startProcess(t, env)
		if err := b.Wait(t, 20*time.Second); err == nil {
			t.Fatal("bridge started without its stream")
		}
		if !contains(b.Out.String(), "NOPE") {
			t.Fatalf("output does not name the stream:\n%s", b.Out.String())
		}
	})
}

// TestHTTPEndpoints: health, readiness and metrics answer as docs/contract.md section 6 says.
func TestHTTPEndpoints(t *testing.T) {
	s := newLocalStack(t) // kills its redis-server: always a local one
	b := startBridge(t, s.env)
	if code, _ := httpGet("http://" + b.HTTPAddr + "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	code, body := httpGet("http://" + b.HTTPAddr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, name := range []string{"delaybridge_parked_messages", "delaybridge_delivery_lateness_seconds", "delaybridge_redis_up 1"} {
		if !strings.Contains(body, name) {
			t.Fatalf("/metrics lacks %s", name)
		}
	}
	s.redis.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := httpGet("http://" + b.HTTPAddr + "/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "redis") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with Redis down = %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
