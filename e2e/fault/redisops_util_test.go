//go:build fault

package fault

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testproxy"
)

// proxied puts a toxiproxy between the bridge and the stack's Redis: the bridge's
// BRIDGE_REDIS_URL (in s.env) points at the proxy, with query (go-redis options such as
// "read_timeout=300ms") when non-empty.
func (s *stack) proxied(t *testing.T, query string) *testproxy.Proxy {
	t.Helper()
	p := testproxy.Start(t, s.redis.Addr())
	u := "redis://" + p.Addr() + "/0"
	if query != "" {
		u += "?" + query
	}
	s.env["BRIDGE_REDIS_URL"] = u
	return p
}

// metrics fetches the bridge's /metrics and returns the unlabelled samples by name. ok is
// false when /metrics did not answer 200 within 2 s.
func metrics(b *e2etest.Bridge) (map[string]float64, bool) {
	m, _, ok := metricsOrWhy(b)
	return m, ok
}

// metricsOrWhy is metrics, with the status and body (or error) when /metrics failed.
func metricsOrWhy(b *e2etest.Bridge) (map[string]float64, string, bool) {
	code, body := e2etest.HTTPGet("http://" + b.HTTPAddr + "/metrics")
	if code != http.StatusOK {
		return nil, strconv.Itoa(code) + " " + body, false
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out, "", true
}

// metric is one unlabelled sample of /metrics; t.Fatal when /metrics does not answer or
// lacks it.
func metric(t *testing.T, b *e2etest.Bridge, name string) float64 {
	t.Helper()
	m, ok := metrics(b)
	if !ok {
		t.Fatal("/metrics did not answer within 2s")
	}
	v, found := m[name]
	if !found {
		t.Fatalf("/metrics lacks %s", name)
	}
	return v
}

// waitMetric polls /metrics until name has value want (up to 15 s).
func waitMetric(t *testing.T, b *e2etest.Bridge, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if m, ok := metrics(b); ok && m[name] == want {
			if _, found := m[name]; found {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not become %v within 15s", name, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consumerInfo is the bridge's durable consumer on the IN stream.
func consumerInfo(t *testing.T, s *stack) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.js.Consumer(ctx, "IN", "delaybridge")
	if err != nil {
		t.Fatalf("consumer delaybridge: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info
}

// redeliveries is how many times JetStream delivered a message of IN to the bridge again,
// once all n messages were delivered at least once: every delivery, redeliveries
// included, takes a consumer sequence number.
func redeliveries(t *testing.T, s *stack, n int) int {
	t.Helper()
	return int(consumerInfo(t, s).Delivered.Consumer) - n
}

// outage watches a bridge while a fault lasts: every 250 ms it checks that the bridge
// runs and that /healthz and /metrics answer, and records the peaks of the consumer's
// unacked messages, the bridge's RSS and goroutines, and the lowest delaybridge_redis_up.
type outage struct {
	t    *testing.T
	s    *stack
	b    *e2etest.Bridge
	stop chan struct{}
	done sync.WaitGroup

	mu                       sync.Mutex
	maxAckPending            int
	maxRSS                   float64
	minUp                    float64
	lastGoroutines, scrapes  int
	unanswered, unhealthyHTZ int
	exited                   bool
	start                    time.Time
	why                      string // the first /metrics failure
}

func watchOutage(t *testing.T, s *stack, b *e2etest.Bridge) *outage {
	t.Helper()
	o := &outage{t: t, s: s, b: b, stop: make(chan struct{}), minUp: 1, start: time.Now()}
	o.done.Add(1)
	go func() {
		defer o.done.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			o.sample()
			select {
			case <-o.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return o
}

func (o *outage) sample() {
	t0 := time.Now()
	m, why, ok := metricsOrWhy(o.b)
	took := time.Since(t0)
	code, _ := e2etest.HTTPGet("http://" + o.b.HTTPAddr + "/healthz")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var pending int
	if c, err := o.s.js.Consumer(ctx, "IN", "delaybridge"); err == nil {
		if info, err := c.Info(ctx); err == nil {
			pending = info.NumAckPending
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.scrapes++
	o.exited = o.exited || o.b.Exited()
	if code != http.StatusOK {
		o.unhealthyHTZ++
	}
	if !ok {
		o.unanswered++
		if o.why == "" {
			o.why = fmt.Sprintf("%s after %s, %s into the fault", why, took.Round(time.Millisecond), time.Since(o.start).Round(time.Millisecond))
		}
	} else {
		o.maxRSS = max(o.maxRSS, m["process_resident_memory_bytes"])
		if up, found := m["delaybridge_redis_up"]; found {
			o.minUp = min(o.minUp, up)
		}
		o.lastGoroutines = int(m["go_goroutines"])
	}
	o.maxAckPending = max(o.maxAckPending, pending)
}

// end stops watching and fails the test unless the bridge kept running and /healthz and
// /metrics answered every time.
func (o *outage) end() {
	o.t.Helper()
	close(o.stop)
	o.done.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.exited {
		o.t.Fatal("the bridge exited during the fault")
	}
	if o.unhealthyHTZ > 0 || o.unanswered > 0 {
		o.t.Fatalf("during the fault /healthz failed %d times and /metrics %d times (of %d); first: %s", o.unhealthyHTZ, o.unanswered, o.scrapes, o.why)
	}
}

func mib(bytes float64) string { return strconv.FormatFloat(bytes/(1<<20), 'f', 1, 64) + " MiB" }
