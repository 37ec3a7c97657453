package monitor

import (
	"context"
	"log/slog"
	"sync/atomic"
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
	m, err := NewRedis(rdb, reg, slog.New(slog.DiscardHandler), nil)
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
		if got := gauge(t, reg, "delaybridge_redis_up"); got != step.up {
			t.Fatalf("step %d: delaybridge_redis_up %v, want %v", i, got, step.up)
		}
		if (m.Err() == nil) != (step.up == 1) {
			t.Fatalf("step %d: Err %v with up %v", i, m.Err(), step.up)
		}
	}
}

// gauge is the value of the registry's gauge called name.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s in %v", name, mfs)
	return 0
}

// delaybridge_redis_oom and Full follow the store's park signal: 1 for a check after
// parks were refused, and while the last one was refused and INFO memory says Redis is
// still full; a stale signal on a Redis with room is let go, and a user refused INFO keeps
// the signal as is.
func TestRedisMonitorMemory(t *testing.T) {
	srv := testredis.Start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	if err := admin.Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	var stuck atomic.Bool
	var refusals atomic.Uint64
	store := func() (bool, uint64) { return stuck.Load(), refusals.Load() }
	monitor := func(opt *redis.Options) (*Redis, *prometheus.Registry) {
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { rdb.Close() })
		reg := prometheus.NewRegistry()
		m, err := NewRedis(rdb, reg, slog.New(slog.DiscardHandler), store)
		if err != nil {
			t.Fatal(err)
		}
		return m, reg
	}
	m, reg := monitor(&redis.Options{Addr: srv.Addr()})
	limited, limitedReg := monitor(&redis.Options{Addr: srv.Addr(), Username: "noinfo", Password: "pw"})
	for i, step := range []struct {
		stuck     bool
		refused   uint64 // parks refused since the last step
		maxmemory string
		oom       float64 // with INFO
		oomNoInfo float64 // for a user refused INFO
	}{
		{false, 0, "0", 0, 0},
		{true, 1, "1", 1, 1},  // a park refused, Redis full
		{true, 0, "1", 1, 1},  // no park since, still full
		{true, 0, "0", 0, 1},  // stale signal, Redis has room: INFO lets it go
		{false, 3, "0", 1, 1}, // refused, then a park wrote: full moments within the second
		{false, 0, "1", 0, 0}, // a park wrote and none refused: not full, whatever INFO says
	} {
		stuck.Store(step.stuck)
		refusals.Add(step.refused)
		if err := admin.ConfigSet(ctx, "maxmemory", step.maxmemory).Err(); err != nil {
			t.Fatal(err)
		}
		m.check(ctx)
		limited.check(ctx)
		if got := gauge(t, reg, "delaybridge_redis_oom"); got != step.oom || m.Full() != (step.oom == 1) {
			t.Fatalf("step %d: delaybridge_redis_oom %v, Full %v, want %v", i, got, m.Full(), step.oom)
		}
		if got := gauge(t, limitedReg, "delaybridge_redis_oom"); got != step.oomNoInfo {
			t.Fatalf("step %d: without INFO delaybridge_redis_oom %v, want %v", i, got, step.oomNoInfo)
		}
		if got := gauge(t, reg, "delaybridge_redis_up"); got != 1 {
			t.Fatalf("step %d: delaybridge_redis_up %v", i, got)
		}
	}
}
