package testredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestSentinel(t *testing.T) {
	start := time.Now()
	d := StartSentinel(t, SentinelOptions{Password: "pw"})
	t.Logf("sentinel deployment up in %s", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c := d.Client(t)
	if err := c.Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	first, err := d.Primary(ctx)
	if err != nil || first != d.Data[0] {
		t.Fatalf("primary %v %v", first, err)
	}
	start = time.Now()
	if err := d.Switchover(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := d.WaitFailover(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("switchover to %s in %s", second.Addr(), time.Since(start))
	// Until the sentinels publish +switch-master the client may still write to the old
	// primary, which drops the write when it is demoted (docs/operating.md "Redis topologies"): write
	// until the new primary itself holds the value.
	direct := redis.NewClient(&redis.Options{Addr: second.Addr(), Password: "pw"})
	defer direct.Close()
	for {
		if err := c.Set(ctx, "k", "v2", 0).Err(); err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
		if v, _ := direct.Get(ctx, "k").Result(); v == "v2" {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the new primary never received the write")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Replication is asynchronous: make sure every replica has v2 before its primary is
	// killed (the sentinels may promote either; with WAIT 1 the promoted one could be the
	// replica that had not got it yet, the old primary still resyncing).
	replicas := len(d.Data) - 1
	for {
		n, err := direct.Do(ctx, "WAIT", replicas, 1000).Int()
		if err == nil && n >= replicas {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("WAIT: %d of %d replicas, %v", n, replicas, err)
		}
	}
	start = time.Now()
	killed, err := d.KillPrimary(ctx)
	if err != nil || killed != second {
		t.Fatalf("killed %v, %v", killed, err)
	}
	third, err := d.WaitFailover(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover after kill -9 to %s in %s", third.Addr(), time.Since(start))
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v2" {
		t.Fatalf("after failover: %q %v", v, err)
	}
}
