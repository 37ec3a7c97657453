//go:build fault

package fault

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// B9, Redis full (docs/faults.md B9's OOM half): maxmemory of a few MB with noeviction, and a
// burst of 1 KB messages with short delays, several times what fits, JetStream in and out.
// Parks are refused with -OOM (nothing acked: back-pressure), but claim, ack and retry run
// on the full Redis (allow-oom), so due messages keep going out during the full period,
// each delivery frees memory, and ingress resumes without an operator. 0 lost, 0 early,
// /readyz stays 200 naming the state, delaybridge_redis_oom shows it and
// delaybridge_redis_up stays 1.
//
// At the edge of maxmemory, Redis flips between full and not with every client buffer
// (a refused pipeline's query buffer is freed right after), so a claim refused for memory
// would still get through now and then. To leave no such gaps, the first time the bridge
// reports Redis full the test lowers maxmemory 512 KB below what Redis then uses, once:
// the parked data itself is over the limit, as after scripts that overshot it, and only
// deliveries bring it back under. No one touches Redis after that.
func TestB9RedisFull(t *testing.T) {
	const (
		messages  = 6000
		payload   = 1024
		maxmemory = "3mb"
	)
	s := newStack(t, "--maxmemory", maxmemory, "--maxmemory-policy", "noeviction")
	c := newChecker(t, s)
	b := e2etest.StartReady(t, bridgeBin, s.envWith())

	var arrived atomic.Int64
	sub, err := s.nc.Subscribe("out.fault", func(*nats.Msg) { arrived.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	rdb := redis.NewClient(&redis.Options{Addr: s.redis.Addr()})
	defer rdb.Close()
	var squeezed string
	squeeze := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		_, rest, _ := strings.Cut(info, "used_memory:")
		used, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
		if err != nil {
			return err
		}
		limit := used - 512<<10
		squeezed = fmt.Sprintf("used_memory %d B, maxmemory lowered to %d B", used, limit)
		return rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit, 10)).Err()
	}
	w := watchFull(b, &arrived, squeeze)
	start := time.Now()
	// Due 3-6 s after sending: nothing is due yet, so nothing is in flight, when Redis
	// first fills up; from then on only claims that run on a full Redis deliver anything.
	spread := uniform(3 * time.Second)
	seqs := c.sendSized("b9full", messages, func(i int) time.Duration { return 3*time.Second + spread(i) }, payload)
	sent := time.Since(start)
	// Everything delivered within 120 s: 22-26 s here since park pieces and the early retry
	// of a partly parked batch; 162 s without them (docs/decisions/0006-batching-at-ingress.md).
	r := c.await(seqs, 120*time.Second)
	w.stop()
	if w.squeezeErr != nil {
		t.Fatalf("lowering maxmemory at the first full moment: %v", w.squeezeErr)
	}
	t.Logf("Redis maxmemory %s, noeviction; %d x %d B messages, delays 3-6 s, sent in %s",
		maxmemory, messages, payload, sent.Round(time.Millisecond))
	t.Logf("full (delaybridge_redis_oom 1) for %s of %d samples at 100 ms, first at %s (%s); publishes while full: %d; "+
		"redis_up min %v; /readyz while full: %d %q; OOM refusals logged: %d",
		w.fullFor, w.samples, w.firstFull.Round(time.Millisecond), squeezed, w.deliveredFull, w.minUp,
		w.readyCode, w.readyBody, strings.Count(b.Out.String(), "OOM command not allowed"))
	requireSafe(t, r)

	if w.fullFor == 0 || !strings.Contains(b.Out.String(), "OOM command not allowed") {
		t.Fatalf("Redis never refused a park (full %s): the burst does not fill %s", w.fullFor, maxmemory)
	}
	if w.deliveredFull == 0 {
		t.Fatal("nothing was delivered while Redis was full: delivery stopped with ingress")
	}
	if w.readyCode != 200 || !strings.Contains(w.readyBody, "redis: full") {
		t.Fatalf("/readyz while full = %d %q, want 200 naming redis as full", w.readyCode, w.readyBody)
	}
	if w.minUp != 1 {
		t.Fatalf("delaybridge_redis_up went to %v while Redis was only full", w.minUp)
	}
	waitMetric(t, b, "delaybridge_redis_oom", 0) // resumed by itself
	if body := parked(t, b); !strings.Contains(body, `"parked":0`) {
		t.Fatalf("store not empty after delivering everything: %s", body)
	}
	// The issue asks for 0: copies the OUT stream kept beyond one per message are
	// re-parks of a batch retried after part of it was parked and already delivered
	// (closed by tombstones of delivered messages).
	if r.streamExtra != 0 {
		t.Errorf("OUT stream extra copies %d (duplicate publishes %d), want 0", r.streamExtra, r.dups)
	}
}

// fullWatch samples /metrics every 100 ms while a run lasts.
type fullWatch struct {
	done chan struct{}
	wg   sync.WaitGroup

	// Written by the sampler, read after stop.
	squeezeErr    error
	samples       int
	fullFor       time.Duration // total time delaybridge_redis_oom was 1
	firstFull     time.Duration // since the watch started
	deliveredFull int64         // arrivals between two samples that both read 1
	minUp         float64
	readyCode     int
	readyBody     string
}

// watchFull starts the sampler; squeeze is called once, at the first sample that reads
// delaybridge_redis_oom 1.
func watchFull(b *e2etest.Bridge, arrived *atomic.Int64, squeeze func() error) *fullWatch {
	w := &fullWatch{done: make(chan struct{}), minUp: 1}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		start := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		prevFull, prevN, prevAt := false, arrived.Load(), time.Now()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			m, ok := metrics(b)
			if !ok {
				continue
			}
			now, n := time.Now(), arrived.Load()
			full := m["delaybridge_redis_oom"] == 1
			w.samples++
			w.minUp = min(w.minUp, m["delaybridge_redis_up"])
			if full {
				if w.firstFull == 0 {
					w.firstFull = now.Sub(start)
					w.squeezeErr = squeeze()
				}
				if prevFull {
					w.fullFor += now.Sub(prevAt)
					w.deliveredFull += n - prevN
				}
				if w.readyCode == 0 {
					w.readyCode, w.readyBody = e2etest.HTTPGet("http://" + b.HTTPAddr + "/readyz")
				}
			}
			prevFull, prevN, prevAt = full, n, now
		}
	}()
	return w
}

func (w *fullWatch) stop() {
	close(w.done)
	w.wg.Wait()
}

// sendSized is checker.send with a payload of size bytes per message, waiting for the
// PubAcks every 500 messages.
func (c *checker) sendSized(prefix string, n int, delay func(i int) time.Duration, size int) []string {
	c.t.Helper()
	body := []byte(strings.Repeat("x", size))
	seqs := make([]string, n)
	for i := range n {
		seqs[i] = c.publishOne(fmt.Sprintf("%s-%d", prefix, i), delay(i), body)
		if i%500 == 499 || i == n-1 { // larger messages: bound what is in flight
			select {
			case <-c.js.PublishAsyncComplete():
			case <-time.After(60 * time.Second):
				c.t.Fatal("PubAcks for delay.in did not arrive")
			}
		}
	}
	return seqs
}
