package egress

import (
	"sync"
	"time"
)

// maxDrift is how fast the local clock and the Redis server's may drift apart, in
// microseconds per second: 500 ppm, the most NTP slews a clock by. It ages an observation
// of the Redis clock (redisClock).
const maxDrift = 500e-6

// redisClock estimates the Redis server clock on the local monotonic clock, never ahead
// of it. Each observation bounds the offset between the two from below: Redis read its
// TIME before the reply left, and the reply was in hand at the local time observed, so
// Redis time - local time >= redis - local. The estimate keeps the greatest such bound,
// lowered by maxDrift for every second since it was made: the fastest recent round trip
// sets it, not the last one (whose reply may have waited behind a slow script, an fsync
// or a busy process). An observation that proves the estimate ahead of Redis (Redis read
// its time after the call was sent, so the offset is at most redis - sent: the Redis
// clock was set back) replaces it. Before the first observation the clocks are taken to
// agree. The zero value is ready; safe for concurrent use.
type redisClock struct {
	mu   sync.Mutex
	base time.Time // local origin of the microsecond counts below; zero: nothing observed
	off  float64   // the bound: Redis unix us - local us since base
	at   float64   // local us since base when off was observed
}

// observe records a Redis time redis read by a call sent at local time sent and answered
// by local time got (both on the caller's clock, the same one redisNow and local are
// given).
func (c *redisClock) observe(redis, sent, got time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := c.base.IsZero()
	if first {
		c.base = sent
	}
	r := float64(redis.UnixMicro())
	lo, hi, at := r-c.us(got), r-c.us(sent), c.us(got)
	if first || lo > c.offAt(at) || c.offAt(at) > hi {
		c.off, c.at = lo, at
	}
}

// us is t in microseconds since base.
func (c *redisClock) us(t time.Time) float64 { return float64(t.Sub(c.base).Microseconds()) }

// offAt is the bound on the offset at local us since base: the one observed, aged.
func (c *redisClock) offAt(us float64) float64 {
	return c.off - maxDrift*max(us-c.at, 0)
}

// local is the local time at which the Redis clock reads redisMs by the estimate (the
// estimate never runs ahead, so Redis reads at least redisMs then).
func (c *redisClock) local(redisMs int64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base.IsZero() {
		return time.UnixMilli(redisMs)
	}
	// us + off - maxDrift*(us - at) = redis, solved for us (later than at: ageing applies)
	r := float64(redisMs) * 1000
	us := (r - c.off - maxDrift*c.at) / (1 - maxDrift)
	if us < c.at {
		us = r - c.off
	}
	return c.base.Add(time.Duration(us+1) * time.Microsecond)
}

// redisNow estimates the Redis time at local time t, unix ms (rounded down).
func (c *redisClock) redisNow(t time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base.IsZero() {
		return t.UnixMilli()
	}
	us := c.us(t)
	return int64(us+c.offAt(us)) / 1000
}
