//go:build fault

package fault

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// B2: kill -9 of redis-server with appendfsync everysec, under load. Redis writes the AOF
// before it answers, so a process crash (not a power loss) loses nothing the bridge acked.
// While Redis is down nothing is acked to the source; after the restart all is delivered.
func TestB2RedisKilledEverysec(t *testing.T) {
	s := newStack(t, "--appendfsync", "everysec")
	c := newChecker(t, s)
	e2etest.StartReady(t, bridgeBin, s.envWith())
	seqs := c.send("b2-0", 2000, uniform(2*time.Second))
	time.Sleep(200 * time.Millisecond)
	s.redis.Kill()
	seqs = append(seqs, c.send("b2-1", 1000, uniform(time.Second))...) // JetStream holds them
	time.Sleep(time.Second)
	s.redis.Restart(t)
	requireSafe(t, c.await(seqs, 30*time.Second))
}

// B9: an allkeys-* maxmemory-policy would evict parked messages: the bridge refuses to
// start and says why.
func TestB9EvictionPolicyRefused(t *testing.T) {
	s := newStack(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.redis.Addr()})
	defer rdb.Close()
	if err := rdb.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	b := e2etest.Start(t, bridgeBin, s.envWith())
	if err := b.Wait(t, 30*time.Second); err == nil {
		t.Fatal("the bridge started with maxmemory-policy allkeys-lru")
	}
	if out := b.Out.String(); !strings.Contains(out, "allkeys-lru") || !strings.Contains(out, "noeviction") {
		t.Fatalf("the error does not name the policy and the fix:\n%s", out)
	}
}

// B13: the script cache is flushed again and again under load (as after a failover to a
// node without the scripts): NOSCRIPT falls back to EVAL, nothing surfaces as an error.
func TestB13ScriptFlush(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	b := e2etest.StartReady(t, bridgeBin, s.envWith())
	rdb := redis.NewClient(&redis.Options{Addr: s.redis.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	flushed := make(chan int)
	go func() {
		n := 0
		for ctx.Err() == nil {
			if rdb.ScriptFlush(ctx).Err() == nil {
				n++
			}
			time.Sleep(20 * time.Millisecond)
		}
		flushed <- n
	}()
	seqs := c.send("b13", 3000, uniform(2*time.Second))
	r := c.await(seqs, 30*time.Second)
	cancel()
	t.Logf("SCRIPT FLUSH %d times", <-flushed)
	requireSafe(t, r)
	if out := b.Out.String(); strings.Contains(out, "level=ERROR") || strings.Contains(out, "level=WARN") {
		t.Fatalf("script flushes surfaced in the log:\n%s", out)
	}
}
