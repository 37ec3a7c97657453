package monitor

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
// context deadlines: cmd/bridge's newRedisClient), so delaybridge_redis_up follows an outage within
// about two seconds.
const (
	redisPingEvery   = time.Second
	redisPingTimeout = time.Second
)

// FullNote is what /readyz says while Redis refuses writes for memory.
const FullNote = "full (maxmemory reached, noeviction): new messages are not acknowledged until deliveries free memory; delivery goes on"

// errNotPinged is the monitor's state before its first PING answered.
var errNotPinged = errors.New("not pinged yet")

// Redis PINGs Redis periodically and exports delaybridge_redis_up (1 when the last
// PING was answered in time, else 0). Its Err is the last outcome, so that /readyz and
// /metrics never wait on Redis themselves. It also exports delaybridge_redis_oom, Full:
// Redis refuses writes for memory (see checkMemory). Safe for concurrent use.
type Redis struct {
	rdb redis.UniversalClient
	log *slog.Logger
	up  prometheus.Gauge
	oom prometheus.Gauge
	// parksRefused is the store's delaystore.Store.MemoryFull: whether its last
	// informative park was refused with -OOM, and how many were so far; nil: never.
	parksRefused func() (bool, uint64)

	mu       sync.Mutex
	err      error
	full     bool
	refusals uint64    // parksRefused's count at the last check
	warned   time.Time // when "redis is full" was last logged; zero after "again"
}

// NewRedis returns a monitor of rdb; parksRefused is the store's MemoryFull (nil:
// delaybridge_redis_oom stays 0).
func NewRedis(rdb redis.UniversalClient, reg prometheus.Registerer, logger *slog.Logger, parksRefused func() (bool, uint64)) (*Redis, error) {
	m := &Redis{
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
func (m *Redis) Run(ctx context.Context) error {
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

func (m *Redis) check(ctx context.Context) {
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

// checkMemory updates Full and delaybridge_redis_oom. The signal is the store's (no Redis
// work): full when a park was refused with -OOM since the last check (a full Redis at the
// edge refuses and accepts parks within a second: each such second counts), or when the
// last informative park was refused and Redis still has no room. That last part reads
// INFO memory of every master only while the store says full and the PING answered, and
// lets it go once every master is below its maxmemory, so that it does not stay set when
// no park follows. A server that refuses INFO (ACL) leaves the store's signal as is.
func (m *Redis) checkMemory(ctx context.Context, reachable bool) {
	if m.parksRefused == nil {
		return
	}
	stuck, refusals := m.parksRefused()
	m.mu.Lock()
	refusedSince := refusals != m.refusals
	m.refusals = refusals
	m.mu.Unlock()
	full := refusedSince || stuck
	if stuck && !refusedSince && reachable {
		ictx, cancel := context.WithTimeout(ctx, redisPingTimeout)
		below, err := m.belowMaxmemory(ictx)
		cancel()
		if err == nil && below {
			full = false
		}
	}
	m.mu.Lock()
	was, warned := m.full, m.warned
	m.full = full
	m.mu.Unlock()
	if full {
		m.oom.Set(1)
	} else {
		m.oom.Set(0)
	}
	// At the edge Redis flips between full and not within seconds: warn at most once a
	// minute, and say "again" only after a warning.
	switch now := time.Now(); {
	case full && !was && now.Sub(warned) >= time.Minute:
		m.log.Warn("redis is full (maxmemory, noeviction): new messages are refused and not acknowledged " +
			"(the sources keep them) until deliveries free memory; delivery goes on")
		m.mu.Lock()
		m.warned = now
		m.mu.Unlock()
	case !full && was && !warned.IsZero():
		m.log.Info("redis has memory again: parking resumed")
		m.mu.Lock()
		m.warned = time.Time{}
		m.mu.Unlock()
	}
}

// belowMaxmemory reads INFO memory of every master: true when each has no maxmemory or
// uses no more than it (used_memory less mem_not_counted_for_evict, as Redis counts).
func (m *Redis) belowMaxmemory(ctx context.Context) (bool, error) {
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
func (m *Redis) Full() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.full
}

// Err is the outcome of the last PING (errNotPinged before the first one). It does not
// block.
func (m *Redis) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}
