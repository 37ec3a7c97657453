package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// errNotPinged is the monitor's state before its first PING answered.
var errNotPinged = errors.New("not pinged yet")

// redisMonitor PINGs Redis periodically and exports delaybridge_redis_up (1 when the last
// PING was answered in time, else 0). Its Err is the last outcome, so that /readyz and
// /metrics never wait on Redis themselves. Safe for concurrent use.
type redisMonitor struct {
	rdb redis.UniversalClient
	log *slog.Logger
	up  prometheus.Gauge

	mu  sync.Mutex
	err error
}

func newRedisMonitor(rdb redis.UniversalClient, reg prometheus.Registerer, logger *slog.Logger) (*redisMonitor, error) {
	m := &redisMonitor{
		rdb: rdb,
		log: logger.With("component", "redis.monitor"),
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "delaybridge_redis_up",
			Help: "1 when Redis answered the bridge's last periodic PING (every second, 1 s timeout), else 0.",
		}),
		err: errNotPinged,
	}
	if err := reg.Register(m.up); err != nil {
		return nil, fmt.Errorf("register delaybridge_redis_up: %w", err)
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

// Err is the outcome of the last PING (errNotPinged before the first one). It does not
// block.
func (m *redisMonitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}
