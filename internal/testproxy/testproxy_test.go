package testproxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testproxy"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// The proxy passes traffic, refuses it while cut, adds latency with a toxic, and recovers.
func TestProxyCutRestoreLatency(t *testing.T) {
	srv := testredis.Start(t)
	p := testproxy.Start(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping through the proxy: %v", err)
	}
	p.Cut()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("ping succeeded through a cut proxy")
	}
	p.Restore(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after restore: %v", err)
	}
	p.AddToxic(t, testproxy.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 300}})
	start := time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping with latency: %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("ping took %s with a 300 ms latency toxic", d)
	}
	p.RemoveToxic(t, "slow")
}
