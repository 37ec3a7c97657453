//go:build fault

package fault

import (
	"syscall"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testproxy"
)

// B4: Redis unreachable for a while, under load, through a toxiproxy between the bridge
// and Redis: refused connections (the proxy cut for the 30 s of docs/faults.md) and a black
// hole (a timeout toxic: connections hang, Redis never answers). While it lasts the bridge
// keeps running, /healthz and /metrics answer, delaybridge_redis_up is 0, nothing more is
// acked to JetStream (the consumer's ack floor does not move), the unacked messages are
// bounded by MaxAckPending and memory stays small. Afterwards everything is delivered,
// late by about the outage: by the same bridge once Redis answers again (refused), or,
// for the black hole, by a new bridge after the first one was killed at the end of the
// outage, which proves that what it had acked was parked.
func TestB4RedisUnreachable(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		b4(t, 30*time.Second, 1500, 3000, false, func(p *testproxy.Proxy) func() {
			p.Cut()
			return func() { p.Restore(t) }
		})
	})
	t.Run("black hole", func(t *testing.T) {
		b4(t, 8*time.Second, 500, 500, true, func(p *testproxy.Proxy) func() {
			p.AddToxic(t, testproxy.Toxic{Name: "hole", Type: "timeout", Attributes: map[string]any{"timeout": 0}})
			return func() { p.RemoveToxic(t, "hole") }
		})
	})
}

// b4 sends before messages, breaks Redis with fault (which returns the repair), sends
// during messages, keeps Redis broken for length, repairs it and checks delivery. With
// kill, the bridge is killed (-9) before the repair and a new one delivers.
func b4(t *testing.T, length time.Duration, before, during int, kill bool, fault func(*testproxy.Proxy) func()) {
	s := newStack(t)
	p := s.proxied(t, "")
	c := newChecker(t, s)
	b := e2etest.StartReady(t, bridgeBin, s.envWith())
	seqs := c.send("b4-0", before, uniform(2*time.Second))
	start := time.Now()
	repair := fault(p)
	o := watchOutage(t, s, b)
	seqs = append(seqs, c.send("b4-1", during, uniform(2*time.Second))...)
	waitMetric(t, b, "delaybridge_redis_up", 0)
	time.Sleep(2 * time.Second) // parks that were under way when Redis went have failed
	floor := consumerInfo(t, s).AckFloor.Stream
	time.Sleep(time.Until(start.Add(length)))
	if now := consumerInfo(t, s).AckFloor.Stream; now != floor {
		t.Fatalf("messages acked while Redis was unreachable: ack floor %d -> %d", floor, now)
	}
	o.end()
	if kill {
		b.Kill(t)
	}
	repair()
	if kill {
		b = e2etest.StartReady(t, bridgeBin, s.envWith())
	}
	t.Logf("Redis unreachable for %s; meanwhile: redis_up min %v, unacked max %d, RSS max %s, /healthz and /metrics answered %d/%d",
		time.Since(start).Round(100*time.Millisecond), o.minUp, o.maxAckPending, mib(o.maxRSS), o.scrapes, o.scrapes)
	if o.maxAckPending > 2048 {
		t.Fatalf("%d unacked messages, beyond MaxAckPending 2048", o.maxAckPending)
	}
	if o.maxRSS > 256<<20 {
		t.Fatalf("RSS %s during the outage: unbounded buffering?", mib(o.maxRSS))
	}
	waitMetric(t, b, "delaybridge_redis_up", 1)
	r := c.await(seqs, 60*time.Second)
	requireSafe(t, r)
	t.Logf("JetStream redeliveries %d; redeliveries and retried parks absorbed by tombstones %d",
		redeliveries(t, s, len(seqs)), inCounts(t, b)["already_delivered"])
	// A park that Redis applied but whose answer was lost is retried (or redelivered);
	// if the message was delivered in between, its tombstone absorbs the repeat.
	if r.streamExtra != 0 {
		t.Fatalf("the OUT stream holds %d extra copies: messages parked again after their delivery", r.streamExtra)
	}
}

// B5: Redis slower than the client's timeout: a 1 s latency toxic on the answers and
// read_timeout=300ms in BRIDGE_REDIS_URL. Every park times out although Redis applied it
// (an ambiguous outcome); go-redis retries and ingress retries, and nothing is acked until
// a park is answered. Each message must be parked exactly once: the messages are due late
// enough that the store is counted with all of them parked, and then delivered once.
func TestB5RedisSlowerThanTimeout(t *testing.T) {
	const n = 3000
	s := newStack(t)
	p := s.proxied(t, "read_timeout=300ms")
	c := newChecker(t, s)
	b := e2etest.StartReady(t, bridgeBin, s.envWith())
	p.AddToxic(t, testproxy.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 1000}})
	start := time.Now()
	due := 15 * time.Second
	seqs := c.send("b5", n, func(i int) time.Duration { return due + uniform(time.Second)(i) })
	time.Sleep(time.Until(start.Add(4 * time.Second)))
	if floor := consumerInfo(t, s).AckFloor.Stream; floor != 0 {
		t.Fatalf("%d messages acked although no park was answered in time", floor)
	}
	p.RemoveToxic(t, "slow")
	for {
		info := consumerInfo(t, s)
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Since(start) > due-time.Second {
			t.Fatalf("not all parked within %s: %d unacked, %d pending", due-time.Second, info.NumAckPending, info.NumPending)
		}
		time.Sleep(100 * time.Millisecond)
	}
	entries := parkedCount(t, b)
	t.Logf("all acked %s after the first send; store holds %d entries for %d messages; JetStream redeliveries %d",
		time.Since(start).Round(100*time.Millisecond), entries, n, redeliveries(t, s, n))
	if entries != int64(n) {
		t.Fatalf("store holds %d entries for %d messages", entries, n)
	}
	r := c.await(seqs, 60*time.Second)
	requireSafe(t, r)
	if r.dups != 0 {
		t.Fatalf("duplicates: %s", r)
	}
}

// B6: redis-server paused with SIGSTOP for 10 s under load, then resumed with SIGCONT
// (connections stay open, nothing answers; new connections are accepted by the kernel and
// hang). The bridge must not leak goroutines over the timeouts and reconnects (its
// go_goroutines after recovery is back to the count before), its pool must recover, and
// lateness is about the pause.
func TestB6RedisPaused(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	b := e2etest.StartReady(t, bridgeBin, s.envWith())
	seqs := c.send("b6-0", 1000, uniform(time.Second))
	time.Sleep(1500 * time.Millisecond)
	before := int(metric(t, b, "go_goroutines"))
	start := time.Now()
	s.redis.Signal(t, syscall.SIGSTOP)
	o := watchOutage(t, s, b)
	seqs = append(seqs, c.send("b6-1", 2000, uniform(time.Second))...)
	time.Sleep(time.Until(start.Add(10 * time.Second)))
	o.end()
	during := o.lastGoroutines
	s.redis.Signal(t, syscall.SIGCONT)
	r := c.await(seqs, 60*time.Second)
	requireSafe(t, r)
	after := int(metric(t, b, "go_goroutines"))
	t.Logf("paused %s; goroutines before %d, during %d, after %d; redis_up min %v, unacked max %d",
		10*time.Second, before, during, after, o.minUp, o.maxAckPending)
	if after > before+10 {
		t.Fatalf("goroutines %d before the pause, %d after recovery: a leak", before, after)
	}
}

// C3: JetStream AckWait (1 s) shorter than a park (Redis answers 2 s late). The bridge
// reports its held messages in progress, so JetStream does not redeliver them while the
// first attempt is still parking: no redelivery, one entry and one delivery per message.
func TestC3AckWaitExpiresWhileRedisSlow(t *testing.T) {
	const n = 500
	s := newStack(t)
	p := s.proxied(t, "")
	c := newChecker(t, s)
	// A lease longer than the slow round trips, so that egress does not re-claim its own
	// batches: the duplicates counted are ingress's alone.
	b := e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_NATS_ACK_WAIT", "1s", "BRIDGE_LEASE", "10s"))
	p.AddToxic(t, testproxy.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 2000}})
	start := time.Now()
	seqs := c.send("c3", n, uniform(500*time.Millisecond))
	time.Sleep(time.Until(start.Add(7 * time.Second)))
	p.RemoveToxic(t, "slow")
	r := c.await(seqs, 60*time.Second)
	requireSafe(t, r)
	red := redeliveries(t, s, n)
	t.Logf("JetStream redeliveries %d; store after delivery: %s", red, parked(t, b))
	if red != 0 || r.dups != 0 {
		t.Fatalf("AckWait expired mid-park: %d redeliveries, %s", red, r)
	}
}
