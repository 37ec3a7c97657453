//go:build fault

package fault

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// U1: a paused target under load, a replica killed (kill -9) while it is paused, then
// resumed. Two replicas with BRIDGE_TARGET_RATE out.fault=1000/s; out.fault is paused
// through one's API, then 3,000 messages due within 2 s are sent; once all are due, the
// owner of the most shards is killed and started again. Nothing is published while
// paused (the restarted replica included: it reads the pause set before it claims);
// after the resume through the other replica, every message arrives (lost 0, early 0),
// no faster than the rate.
func TestU1PausedTargetKilledResumed(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	env := func() map[string]string { // e2etest.Start writes each one's addresses into its env
		return s.envWith("BRIDGE_LEASE", "3s", "BRIDGE_TARGET_RATE", "out.fault=1000/s")
	}
	bs := []*e2etest.Bridge{e2etest.StartReady(t, bridgeBin, env()), e2etest.StartReady(t, bridgeBin, env())}
	waitOwnedBy(t, 10*time.Second, bs...)
	var mu sync.Mutex
	var at []time.Time
	sub, err := s.nc.Subscribe("out.fault", func(*nats.Msg) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	arrived := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(at)
	}
	if code, body := apiPost(t, bs[0], "/v1/targets/pause", `{"target":"out.fault"}`); code != http.StatusOK {
		t.Fatalf("pause = %d %s", code, body)
	}
	time.Sleep(time.Second) // every replica obeys within a second
	const n = 3000
	seqs := c.send("p2", n, uniform(2*time.Second))
	time.Sleep(3 * time.Second) // all due, all claimed and put back
	victim := 0
	if owned(bs[1]) > owned(bs[0]) {
		victim = 1
	}
	bs[victim].Kill(t)
	bs[victim] = e2etest.StartReady(t, bridgeBin, env())
	time.Sleep(5 * time.Second) // leases of the killed replica's claims run out; claimed again
	if got := arrived(); got != 0 {
		t.Fatalf("%d messages published while their target was paused", got)
	}
	if code, body := e2etest.HTTPGet("http://" + bs[victim].APIAddr + "/v1/targets"); code != http.StatusOK ||
		!strings.Contains(body, `"paused":[{"target":"out.fault"`) || !strings.Contains(body, `"paused":true`) {
		t.Fatalf("targets while paused = %d %s", code, body)
	}
	if code, body := e2etest.HTTPGet("http://" + bs[victim].HTTPAddr + "/metrics"); code != http.StatusOK ||
		!strings.Contains(body, `delaybridge_target_paused{target="out.fault"} 1`) {
		t.Fatalf("metrics of the restarted replica lack delaybridge_target_paused{target=\"out.fault\"} 1")
	}
	resumed := time.Now()
	code, body := apiPost(t, bs[1-victim], "/v1/targets/resume", `{"target":"out.fault"}`)
	took := time.Since(resumed)
	if code != http.StatusOK {
		t.Fatalf("resume = %d %s", code, body)
	}
	r := c.await(seqs, 60*time.Second)
	requireSafe(t, r)
	mu.Lock()
	first, last := at[0], at[len(at)-1]
	mu.Unlock()
	span := last.Sub(first)
	t.Logf("U1: resume answered %s (%s) after the call; %d messages out over %s after the first (rate 1000/s: at least %s); %s",
		took.Round(time.Millisecond), strings.TrimSpace(body), n, span.Round(time.Millisecond), (n-1)*time.Millisecond, r)
	if min := (n - 1) * time.Millisecond * 9 / 10; span < min {
		t.Fatalf("%d messages out in %s after the resume: faster than 1000/s (want at least %s)", n, span, min)
	}
}

// apiPost posts a JSON body to path of b's message API.
func apiPost(t *testing.T, b *e2etest.Bridge, path, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+b.APIAddr+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		k, err := resp.Body.Read(buf)
		sb.Write(buf[:k])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, sb.String()
}
