package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testnats"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// scrape reads the bridge's /metrics and parses it.
func scrape(t *testing.T, b *bridge) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet("http://" + b.HTTPAddr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d %q", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// metric sums the series of name whose labels include want (label=value pairs): counter
// and gauge values, histogram sample counts. It also returns how many series matched.
func metric(mfs map[string]*dto.MetricFamily, name string, want ...string) (float64, int) {
	mf := mfs[name]
	if mf == nil {
		return 0, 0
	}
	var sum float64
	n := 0
next:
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				continue next
			}
		}
		n++
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, n
}

// expect checks metric values; each check is name, want, then label pairs.
func expect(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want float64, labels ...string) {
	t.Helper()
	got, n := metric(mfs, name, labels...)
	if n == 0 || got != want {
		t.Fatalf("%s%v = %v (%d series), want %v", name, labels, got, n, want)
	}
	t.Logf("%s%v = %v", name, labels, got)
}

// TestMetricsMove: the metrics follow a run of messages through the bridge: messages in by
// result and reason, out by result, the lateness and Redis round-trip histograms, the
// parked, forecast and overdue gauges. A message is made overdue by pausing Redis writes
// (CLIENT PAUSE WRITE: the claim script waits, the scrape's reads do not).
func TestMetricsMove(t *testing.T) {
	s := newLocalStack(t) // pauses its redis-server's writes: always a local one
	s.env["BRIDGE_SHARDS"] = "4"
	// The 4 s write pause below also stalls the fleet heartbeat; with the default 3 s
	// ownership TTL the replica would drop its shards meanwhile, and the store gauges
	// cover owned shards only.
	s.env["BRIDGE_OWNERSHIP_TTL"] = "10s"
	// The quota series (exported only with a quota) are named by the alert rules.
	s.env["BRIDGE_TARGET_QUOTA"] = "tenant-a.*=1000"
	b := startBridge(t, s.env)
	out := subscribe(t, s.nc, "orders.timeout")

	mfs := scrape(t, b)
	expect(t, mfs, "delaybridge_parked_messages_all", 0)
	expect(t, mfs, "delaybridge_store_scrape_error", 0)
	if _, n := metric(mfs, "delaybridge_oldest_overdue_seconds"); n != 4 {
		t.Fatalf("%d delaybridge_oldest_overdue_seconds series, want one per shard (4)", n)
	}

	send := func(subject, id, delay, target string) map[string]any {
		hdr := nats.Header{}
		if id != "" {
			hdr.Set("x-delay-id", id)
		}
		if delay != "" {
			hdr.Set("x-delay", delay)
		}
		if target != "" {
			hdr.Set("x-target", target)
		}
		return request(t, s.nc, subject, hdr, "m")
	}
	for i := range 3 {
		send(s.name("delay.in"), fmt.Sprint("now-", i), "200ms", "orders.timeout")
	}
	send(s.name("delay.in"), "", "abc", "orders.timeout")  // invalid_delay
	send(s.name("delay.in"), "", "1s", s.name("delay.in")) // target_loop
	send(s.name("delay.in"), "", "1s", s.name("delay.in")) // target_loop
	send(s.name("delay.in"), "in-30s", "30s", "orders.timeout")
	send(s.name("delay.in"), "in-30m", "30m", "orders.timeout")
	send(s.name("delay.in"), "in-2d", "48h", "orders.timeout")
	send(s.name("delay.in"), "cancel-me", "10h", "orders.timeout")
	if r := send(s.name("delay.cancel"), "cancel-me", "", ""); r["cancelled"] != true {
		t.Fatalf("cancel reply %v", r)
	}
	for range 3 {
		receive(t, out, 10*time.Second)
	}
	time.Sleep(200 * time.Millisecond) // the acks after the third confirmation

	mfs = scrape(t, b)
	in := "delaybridge_messages_in_total"
	expect(t, mfs, in, 7, "broker", "nats", "result", "parked")
	expect(t, mfs, in, 1, "broker", "nats", "result", "invalid", "reason", "invalid_delay")
	expect(t, mfs, in, 2, "broker", "nats", "result", "invalid", "reason", "target_loop")
	expect(t, mfs, in, 1, "broker", "nats", "result", "cancelled")
	expect(t, mfs, "delaybridge_messages_out_total", 3, "broker", "nats", "result", "published")
	expect(t, mfs, "delaybridge_delivery_lateness_seconds", 3)
	expect(t, mfs, "delaybridge_parked_messages_all", 3)
	expect(t, mfs, "delaybridge_parked_messages", 3)
	expect(t, mfs, "delaybridge_due_messages", 1, "within", "1m")
	expect(t, mfs, "delaybridge_due_messages", 2, "within", "1h")
	expect(t, mfs, "delaybridge_due_messages", 2, "within", "24h")
	expect(t, mfs, "delaybridge_overdue_messages", 0)
	expect(t, mfs, "delaybridge_oldest_overdue_seconds", 0)
	expect(t, mfs, "delaybridge_inflight_messages", 0)
	for _, script := range []string{"park", "claim", "ack", "cancel"} {
		if n, _ := metric(mfs, "delaybridge_redis_duration_seconds", "script", script); n < 1 {
			t.Fatalf("delaybridge_redis_duration_seconds{script=%q} counted %v calls", script, n)
		}
	}

	// Overdue: park a message due in 1s, pause Redis writes for 4s, scrape while it waits.
	rdb := redis.NewClient(&redis.Options{Addr: s.redis.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	send(s.name("delay.in"), "stuck", "1s", "orders.timeout")
	if err := rdb.Do(t.Context(), "CLIENT", "PAUSE", "4000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	time.Sleep(2500 * time.Millisecond)
	mfs = scrape(t, b)
	expect(t, mfs, "delaybridge_store_scrape_error", 0)
	expect(t, mfs, "delaybridge_overdue_messages", 1)
	age, _ := metric(mfs, "delaybridge_oldest_overdue_seconds")
	t.Logf("oldest overdue %.3fs, %s after the pause", age, time.Since(paused).Round(time.Millisecond))
	if age < 1 || age > 3 {
		t.Fatalf("delaybridge_oldest_overdue_seconds = %v while the stuck message is about 1.5s overdue", age)
	}
	a := receive(t, out, 10*time.Second)
	if a.msg.Header.Get("x-delay-id") != "stuck" {
		t.Fatalf("got %q, want the stuck message", a.msg.Header.Get("x-delay-id"))
	}
	// The claim takes the stuck message out of the overdue count before its publish, and
	// the subscriber may see it before the bridge counts the confirmation: wait (bounded)
	// for the gauges, the counter and the histogram (a scrape may fall between the
	// counter's increment and the histogram's observation: seen in CI).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		mfs = scrape(t, b)
		over, n1 := metric(mfs, "delaybridge_overdue_messages")
		old, n2 := metric(mfs, "delaybridge_oldest_overdue_seconds")
		published, _ := metric(mfs, "delaybridge_messages_out_total", "broker", "nats", "result", "published")
		observed, _ := metric(mfs, "delaybridge_delivery_lateness_seconds")
		if n1 > 0 && n2 > 0 && over == 0 && old == 0 && published == 4 && observed == 4 || time.Now().After(deadline) {
			break
		}
	}
	expect(t, mfs, "delaybridge_overdue_messages", 0)
	expect(t, mfs, "delaybridge_oldest_overdue_seconds", 0)
	expect(t, mfs, "delaybridge_messages_out_total", 4, "broker", "nats", "result", "published")
	late, _ := metric(mfs, "delaybridge_delivery_lateness_seconds")
	if late != 4 {
		t.Fatalf("lateness histogram count %v, want 4", late)
	}
	// The message API counts as broker "http".
	api := func(method, path, body string) int {
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+b.APIAddr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/messages", `{"target":"orders.timeout","delay":"1h","id":"api-1"}`, http.StatusCreated},
		{"POST", "/v1/messages", `{"target":"orders.timeout","delay":"1h","id":"api-2"}`, http.StatusCreated},
		{"POST", "/v1/messages", `{"target":"orders.timeout","delay":"soon"}`, http.StatusBadRequest},
		{"DELETE", "/v1/messages/api-2", "", http.StatusNoContent},
	} {
		if code := api(c.method, c.path, c.body); code != c.want {
			t.Fatalf("%s %s %s = %d, want %d", c.method, c.path, c.body, code, c.want)
		}
	}
	mfs = scrape(t, b)
	expect(t, mfs, in, 2, "broker", "http", "result", "parked")
	expect(t, mfs, in, 1, "broker", "http", "result", "invalid", "reason", "invalid_delay")
	expect(t, mfs, in, 1, "broker", "http", "result", "cancelled")

	bucket := func(le float64) uint64 {
		for _, bk := range mfs["delaybridge_delivery_lateness_seconds"].GetMetric()[0].GetHistogram().GetBucket() {
			if bk.GetUpperBound() == le {
				return bk.GetCumulativeCount()
			}
		}
		t.Fatalf("no lateness bucket le=%v", le)
		return 0
	}
	if bucket(0.5) > 3 || bucket(5) != 4 {
		t.Fatalf("lateness buckets: le=0.5 %d, le=5 %d: the stuck message (~3s late) is not where it belongs", bucket(0.5), bucket(5))
	}
	checkMonitoringFiles(t, mfs) // every family the deploy/ files query is in this scrape
}

// TestLogsJSONWithoutPayloads: the default log format is JSON, one object a line, with ids
// and targets; no payload ever appears in it, whatever path the message takes (delivered,
// invalid, dead-lettered, cancelled, through the HTTP API, in base64 too), even at debug
// level and while Redis is away.
func TestLogsJSONWithoutPayloads(t *testing.T) {
	s := newLocalStack(t) // BRIDGE_LOG_LEVEL=debug; kills its redis-server: always a local one
	b := startBridge(t, s.env)
	out := subscribe(t, s.nc, "orders.timeout")
	secret := fmt.Sprintf("PAYLOAD-%d-do-not-log", time.Now().UnixNano())
	send := func(hdr map[string]string) {
		h := nats.Header{}
		for k, v := range hdr {
			h.Set(k, v)
		}
		request(t, s.nc, s.name("delay.in"), h, secret)
	}
	send(map[string]string{"x-delay": "100ms", "x-target": "orders.timeout", "x-delay-id": "log-ok"})
	send(map[string]string{"x-delay": "nope", "x-target": "orders.timeout", "x-delay-id": "log-bad"})
	send(map[string]string{"x-delay": "1s", "x-target": "kafka:orders", "x-delay-id": "log-nokafka"})
	send(map[string]string{"x-delay": "1h", "x-target": "orders.timeout", "x-delay-id": "log-cancel"})
	request(t, s.nc, s.name("delay.cancel"), nats.Header{"x-delay-id": []string{"log-cancel"}}, secret)
	body, _ := json.Marshal(map[string]any{"target": "orders.timeout", "delay": "100ms", "id": "log-http", "payload": secret})
	resp, err := http.Post("http://"+b.APIAddr+"/v1/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/messages = %d", resp.StatusCode)
	}
	for range 2 {
		if a := receive(t, out, 10*time.Second); string(a.msg.Data) != secret {
			t.Fatalf("payload %q", a.msg.Data)
		}
	}
	s.redis.Kill() // go-redis's own complaints go through the bridge's logger too
	time.Sleep(1500 * time.Millisecond)
	if err, _ := b.Stop(t, 20*time.Second); err != nil {
		t.Logf("stop: %v", err)
	}

	logs := b.Out.String()
	for _, p := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret)), fmt.Sprintf("%x", secret)} {
		if strings.Contains(logs, p) {
			t.Fatalf("the log contains the payload (%q):\n%s", p, logs)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["msg"] == nil || rec["level"] == nil {
			t.Fatalf("log line is not a JSON record (%v): %q", err, l)
		}
	}
	for _, want := range []string{`"log-ok"`, `"log-bad"`, `"log-http"`, "orders.timeout"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the log never names %s:\n%s", want, logs)
		}
	}
	t.Logf("%d JSON log lines, none with the payload", len(lines))
}

// TestLogsText: BRIDGE_LOG_FORMAT=text gives slog's key=value lines.
func TestLogsText(t *testing.T) {
	s := newStack(t)
	s.env["BRIDGE_LOG_FORMAT"] = "text"
	b := startBridge(t, s.env)
	if err, _ := b.Stop(t, 20*time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(b.Out.String()), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "time=") || !strings.Contains(l, " level=") || !strings.Contains(l, " msg=") {
			t.Fatalf("not a text log line: %q", l)
		}
	}
	if !strings.Contains(b.Out.String(), `msg="delaybridge running"`) {
		t.Fatalf("no start line:\n%s", b.Out.String())
	}
}

// TestMetricsDeadLetter: a target the bridge may not publish to (NATS permission) is
// dead-lettered, and delaybridge_messages_out_total counts it as dead_lettered, not
// published.
func TestMetricsDeadLetter(t *testing.T) {
	// A NATS server with its own users and permissions: always a local one.
	srv := testnats.Start(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "bridge", Password: "bridge", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: []string{"forbidden.>"}},
			}},
			{Username: "test", Password: "test"},
		}
		o.NoAuthUser = "test"
	})
	nc := testnats.Connect(t, srv.URL())
	env := map[string]string{
		"BRIDGE_REDIS_URL":  redisURL(t),
		"BRIDGE_NATS_URL":   strings.Replace(srv.URL(), "nats://", "nats://bridge:bridge@", 1),
		"BRIDGE_KEY_PREFIX": testredis.Prefix(t),
	}
	cleanupKeys(t, env["BRIDGE_REDIS_URL"], env["BRIDGE_KEY_PREFIX"])
	b := startBridge(t, env)
	dlq := subscribe(t, nc, "delay.dlq")
	out := subscribe(t, nc, "allowed.x")
	for _, target := range []string{"forbidden.x", "forbidden.y", "allowed.x"} {
		hdr := nats.Header{}
		hdr.Set("x-delay", "100ms")
		hdr.Set("x-target", target)
		request(t, nc, "delay.in", hdr, "m")
	}
	for range 2 {
		if a := receive(t, dlq, 15*time.Second); !strings.HasPrefix(a.msg.Header.Get("x-delay-error"), "forbidden") {
			t.Fatalf("dead letter with x-delay-error %q", a.msg.Header.Get("x-delay-error"))
		}
	}
	receive(t, out, 10*time.Second)
	expectSoon(t, b, "delaybridge_messages_out_total", 2, "broker", "nats", "result", "dead_lettered")
	expectSoon(t, b, "delaybridge_messages_out_total", 1, "broker", "nats", "result", "published")
	expectSoon(t, b, "delaybridge_parked_messages_all", 0)
	expectSoon(t, b, "delaybridge_inflight_messages", 0)
}
