package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Redis monitor timing: a PING every second, each bounded by a second (the client honours
// context deadlines, see newRedisClient), so delaybridge_redis_up follows an outage within
// about two seconds.
const (
	redisPingEvery   = time.Second
	redisPingTimeout = time.Second
)

// redisFullNote is what /readyz says while Redis refuses writes for memory.
const redisFullNote = "full (maxmemory reached, noeviction): new messages are not acknowledged until deliveries free memory; delivery goes on"

// errNotPinged is the monitor's state before its first PING answered.
var errNotPinged = errors.New("not pinged yet")

// redisMonitor PINGs Redis periodically and exports delaybridge_redis_up (1 when the last
// PING was answered in time, else 0). Its Err is the last outcome, so that /readyz and
// /metrics never wait on Redis themselves. It also exports delaybridge_redis_oom, Full:
// Redis refuses writes for memory (see checkMemory). Safe for concurrent use.
type redisMonitor struct {
	rdb redis.UniversalClient
	log *slog.Logger
	up  prometheus.Gauge
	oom prometheus.Gauge
	// parksRefused reports whether the store's last informative park was refused with
	// -OOM (delaystore.Store.MemoryFull); nil: never.
	parksRefused func() bool

	mu   sync.Mutex
	err  error
	full bool
}

// newRedisMonitor returns a monitor of rdb; parksRefused is the store's MemoryFull (nil:
// delaybridge_redis_oom stays 0).
func newRedisMonitor(rdb redis.UniversalClient, reg prometheus.Registerer, logger *slog.Logger, parksRefused func() bool) (*redisMonitor, error) {
	m := &redisMonitor{
		rdb: rdb,
		log: logger.With("component", "redis.monitor"),
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "delaybridge_redis_up",
			Help: "1 when Redis answered the bridge's last periodic PING (every second, 1 s timeout), else 0.",
		}),
		oom: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "delaybridge_redis_oom",
			Help: "1 while Redis refuses writes for memory (maxmemory reached, noeviction): new messages are not acknowledged, delivery goes on and frees memory.",
		}),
		parksRefused: parksRefused,
		err:          errNotPinged,
	}
	for _, g := range []prometheus.Gauge{m.up, m.oom} {
		if err := reg.Register(g); err != nil {
			return nil, fmt.Errorf("register redis monitor gauge: %w", err)
		}
	}
	return m, nil
}

// Run PINGs every redisPingEvery until ctx is cancelled, then returns nil. The first
// failure of a streak is logged at Warn, the recovery at Info.
func (m *redisMonitor) Run(ctx context.Context) error {
	t := time.NewTicker(redisPingEvery)
	defer t.Stop()
	for {
		m.check(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (m *redisMonitor) check(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, redisPingTimeout)
	err := m.rdb.Ping(pctx).Err()
	cancel()
	if ctx.Err() != nil {
		return
	}
	m.mu.Lock()
	was := m.err
	m.err = err
	m.mu.Unlock()
	m.checkMemory(ctx, err == nil)
	switch {
	case err != nil:
		m.up.Set(0)
		if was == nil || was == errNotPinged {
			m.log.Warn("redis unreachable: parking and releasing wait for it", "err", err)
		}
	default:
		m.up.Set(1)
		if was != nil && was != errNotPinged {
			m.log.Info("redis reachable again")
		}
	}
}

// checkMemory updates Full and delaybridge_redis_oom. The signal is the store's: a park
// refused with -OOM sets it, a park that wrote clears it (no Redis work). While it is set,
// and only then, INFO memory of every master is read too (reachable: the PING answered),
// and Full is false once every master is below its maxmemory, so that it does not stay set
// when no park follows. A server that refuses INFO (ACL) leaves the store's signal alone.
func (m *redisMonitor) checkMemory(ctx context.Context, reachable bool) {
	full := m.parksRefused != nil && m.parksRefused()
	if full && reachable {
		ictx, cancel := context.WithTimeout(ctx, redisPingTimeout)
		below, err := m.belowMaxmemory(ictx)
		cancel()
		if err == nil && below {
			full = false
		}
	}
	m.mu.Lock()
	was := m.full
	m.full = full
	m.mu.Unlock()
	switch {
	case full:
		m.oom.Set(1)
		if !was {
			m.log.Warn("redis is full (maxmemory, noeviction): new messages are refused and not acknowledged " +
				"(the sources keep them) until deliveries free memory; delivery goes on")
		}
	default:
		m.oom.Set(0)
		if was {
			m.log.Info("redis has memory again: parking resumed")
		}
	}
}

// belowMaxmemory reads INFO memory of every master: true when each has no maxmemory or
// uses no more than it (used_memory less mem_not_counted_for_evict, as Redis counts).
func (m *redisMonitor) belowMaxmemory(ctx context.Context) (bool, error) {
	below := func(ctx context.Context, c redis.Cmdable) (bool, error) {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return false, err
		}
		v := map[string]uint64{}
		for _, line := range strings.Split(info, "\n") {
			k, val, ok := strings.Cut(strings.TrimSpace(line), ":")
			if n, err := strconv.ParseUint(val, 10, 64); ok && err == nil {
				v[k] = n
			}
		}
		used, ok1 := v["used_memory"]
		limit, ok2 := v["maxmemory"]
		if !ok1 || !ok2 {
			return false, errors.New("INFO memory without used_memory or maxmemory")
		}
		return limit == 0 || used-min(used, v["mem_not_counted_for_evict"]) <= limit, nil
	}
	cc, ok := m.rdb.(*redis.ClusterClient)
	if !ok {
		return below(ctx, m.rdb)
	}
	var mu sync.Mutex
	all := true
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		b, err := below(ctx, c)
		mu.Lock()
		all = all && b
		mu.Unlock()
		return err
	})
	return all, err
}

// Full reports whether Redis refuses writes for memory, as of the last check. It does not
// block.
func (m *redisMonitor) Full() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.full
}

// Err is the outcome of the last PING (errNotPinged before the first one). It does not
// block.
func (m *redisMonitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}
