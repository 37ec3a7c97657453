package testredis

import (
	"context"
	"testing"
	"time"
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
	if err := c.Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatal(err)
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
