package egress

import (
	"sync"
	"time"
)

// redisClock maps Redis server time (unix ms) onto the local monotonic clock, from the
// last observed pair. Safe for concurrent use.
type redisClock struct {
	mu    sync.Mutex
	at    time.Time
	redis int64
}

// observe records that the Redis time was redisMs at (or just before) local. redisMs is
// a whole millisecond read before the reply left Redis, so the estimate runs behind the
// true Redis time by up to about a millisecond: claims timed by it are that much late,
// never early.
func (c *redisClock) observe(redisMs int64, local time.Time) {
	c.mu.Lock()
	c.at, c.redis = local, redisMs
	c.mu.Unlock()
}

// local is the local time at which the Redis clock reads redisMs. Before the first
// observation it assumes the clocks agree.
func (c *redisClock) local(redisMs int64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return time.UnixMilli(redisMs)
	}
	return c.at.Add(time.Duration(redisMs-c.redis) * time.Millisecond)
}

// redisNow estimates the Redis time at local time t.
func (c *redisClock) redisNow(t time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return t.UnixMilli()
	}
	return c.redis + t.Sub(c.at).Milliseconds()
}
