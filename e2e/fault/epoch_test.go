//go:build fault

package fault

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// datasetResetLine is the ERROR line the bridge logs when Redis lost its dataset.
const datasetResetLine = "Redis dataset was reset"

// B10: Redis comes back empty (FLUSHALL here; the same as a restart without persistence).
// The messages parked before are lost, which no bridge can prevent; the bridge must say
// so (one ERROR line, delaybridge_redis_dataset_reset_total 1), not crash, and deliver
// everything sent after the reset.
func TestB10RedisDatasetReset(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	b := e2etest.StartReady(t, bridgeBin, s.envWith())
	before := c.send("b10-0", 500, func(int) time.Duration { return time.Hour })
	waitParked(t, b, 500)

	rdb := redis.NewClient(&redis.Options{Addr: s.redis.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, b, datasetResetLine, 10*time.Second)

	after := c.send("b10-1", 500, uniform(time.Second))
	r := c.await(after, 30*time.Second)
	requireSafe(t, r)
	lost := 0
	c.mu.Lock()
	for _, seq := range before {
		if c.copies[seq] == 0 {
			lost++
		}
	}
	c.mu.Unlock()
	resets := countLines(b.Out.String(), datasetResetLine)
	metric := metricValue(t, b, "delaybridge_redis_dataset_reset_total")
	t.Logf("parked before FLUSHALL %d, lost with it %d (expected, reported); ERROR lines %d, %s %s",
		len(before), lost, resets, "delaybridge_redis_dataset_reset_total", metric)
	if resets != 1 || metric != "1" {
		t.Fatalf("the reset was reported %d times in the log and %s in the metric; want 1 and 1\n%s", resets, metric, b.Out.String())
	}
	if b.Exited() {
		t.Fatal("the bridge exited")
	}
}

// waitParked polls /v1/stats until the bridge has n messages parked.
func waitParked(t *testing.T, b *e2etest.Bridge, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st struct{ Parked int64 }
		if err := json.Unmarshal([]byte(parked(t, b)), &st); err != nil {
			t.Fatal(err)
		}
		if st.Parked >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("parked %d of %d after 30 s", st.Parked, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLog waits for a line containing s in the bridge's output.
func waitLog(t *testing.T, b *e2etest.Bridge, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(b.Out.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the bridge log after %s:\n%s", s, timeout, b.Out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countLines(out, s string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// metricValue returns the value of an unlabelled metric from /metrics, "" when absent.
func metricValue(t *testing.T, b *e2etest.Bridge, name string) string {
	t.Helper()
	code, body := e2etest.HTTPGet("http://" + b.HTTPAddr + "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}
