package egress

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestRedisClockKeepsTheFastestRoundTrip: a slow reply (its Redis time read long before
// it arrived) does not pull the estimate back; the fast one before it sets it.
func TestRedisClockKeepsTheFastestRoundTrip(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	var c redisClock
	// Redis runs 5 ms ahead of the local clock. A fast call: 100 us there and back.
	c.observe(base.Add(5*time.Millisecond+50*time.Microsecond), base, base.Add(100*time.Microsecond))
	// A slow one: Redis read its time at once, the reply came 8 ms later.
	sent := base.Add(10 * time.Millisecond)
	c.observe(sent.Add(5*time.Millisecond), sent, sent.Add(8*time.Millisecond))
	at := base.Add(20 * time.Millisecond)
	truth := at.Add(5 * time.Millisecond).UnixMilli()
	if got := c.redisNow(at); got > truth || got < truth-1 {
		t.Fatalf("redisNow = %d, want %d (within 1 ms behind, never ahead)", got, truth)
	}
}

// TestRedisClockSetBack: when a reply proves the estimate ahead of Redis (its clock was
// set back), the estimate follows at once.
func TestRedisClockSetBack(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	var c redisClock
	c.observe(base, base, base.Add(100*time.Microsecond))
	sent := base.Add(time.Second)
	c.observe(sent.Add(-2*time.Second), sent, sent.Add(100*time.Microsecond)) // set back 2 s
	at := sent.Add(time.Millisecond)
	if got, truth := c.redisNow(at), at.Add(-2*time.Second).UnixMilli(); got > truth {
		t.Fatalf("redisNow = %d, ahead of Redis %d after its clock was set back", got, truth)
	}
}

// TestRedisClockNeverAhead: over random round trips and a drift within maxDrift, the
// estimate never reads later than Redis, local never maps a Redis time before Redis
// reached it, and with fast round trips in the mix it stays within a millisecond behind.
func TestRedisClockNeverAhead(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		offset := time.Duration(rng.Int64N(int64(time.Hour))) - 30*time.Minute
		drift := (rng.Float64()*2 - 1) * maxDrift
		base := time.Unix(1_700_000_000, 0)
		redisAt := func(local time.Time) time.Time { // Redis time at a local time
			d := local.Sub(base)
			return local.Add(offset + time.Duration(float64(d)*drift))
		}
		var c redisClock
		now := base
		for i := range 500 {
			now = now.Add(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
			toRedis := time.Duration(rng.Int64N(int64(3 * time.Millisecond)))
			back := time.Duration(rng.Int64N(int64(3 * time.Millisecond)))
			if i%7 == 0 {
				toRedis, back = 20*time.Microsecond, 20*time.Microsecond
			}
			c.observe(redisAt(now.Add(toRedis)).Truncate(time.Microsecond), now, now.Add(toRedis+back))
			now = now.Add(toRedis + back)
			probe := now.Add(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
			truth := redisAt(probe).UnixMilli()
			got := c.redisNow(probe)
			if got > truth {
				t.Fatalf("run %d step %d: redisNow %d ahead of Redis %d", run, i, got, truth)
			}
			if i > 10 && got < truth-2 {
				t.Fatalf("run %d step %d: redisNow %d more than 2 ms behind Redis %d", run, i, got, truth)
			}
			ms := truth + rng.Int64N(100)
			if at := c.local(ms); redisAt(at).UnixMilli() < ms {
				t.Fatalf("run %d step %d: local(%d) = a moment when Redis reads %d", run, i, ms, redisAt(at).UnixMilli())
			}
		}
	}
}
