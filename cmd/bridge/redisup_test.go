package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// delaybridge_redis_up and Err follow Redis going away and coming back.
func TestRedisMonitor(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewRegistry()
	m, err := newRedisMonitor(rdb, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if m.Err() == nil {
		t.Fatal("Err is nil before the first PING")
	}
	ctx := context.Background()
	for i, step := range []struct {
		do func()
		up float64
	}{
		{func() {}, 1},
		{srv.Kill, 0},
		{func() { srv.Restart(t) }, 1},
	} {
		step.do()
		m.check(ctx)
		if got := gauge(t, reg); got != step.up {
			t.Fatalf("step %d: delaybridge_redis_up %v, want %v", i, got, step.up)
		}
		if (m.Err() == nil) != (step.up == 1) {
			t.Fatalf("step %d: Err %v with up %v", i, m.Err(), step.up)
		}
	}
}

// gauge is the value of the registry's only metric, a gauge.
func gauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gather: %v %v", mfs, err)
	}
	return mfs[0].GetMetric()[0].GetGauge().GetValue()
}
