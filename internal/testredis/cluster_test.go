package testredis

import (
	"context"
	"strconv"
	"testing"
	"time"
)

func TestKeySlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]int{
		"123456789": 12739, "foo": 12182, "{user1000}.following": KeySlot("user1000"),
		"foo{}{bar}": KeySlot("foo{}{bar}"), "{}x": KeySlot("{}x"),
	} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if KeySlot("{a}:z") != KeySlot("{a}:m") {
		t.Error("one hash tag, two slots")
	}
}

func TestCluster(t *testing.T) {
	start := time.Now()
	c := StartCluster(t, ClusterOptions{Replicas: 1, Password: "pw"})
	t.Logf("6-node cluster up in %s", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := c.Client(t)
	for i := range 50 {
		k := "{k" + strconv.Itoa(i) + "}"
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := cc.ClusterKeySlot(ctx, k).Result(); err != nil || int(got) != KeySlot(k) {
			t.Fatalf("CLUSTER KEYSLOT %s = %d %v, KeySlot %d", k, got, err, KeySlot(k))
		}
	}
	// Move the slot of {k7} to another master; the value follows.
	slot := KeySlot("{k7}")
	from, err := c.Owner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	masters, err := c.Masters(ctx)
	if err != nil || len(masters) != 3 {
		t.Fatalf("masters %v %v", masters, err)
	}
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	if n, err := c.MoveSlot(ctx, slot, to); err != nil || n != 1 {
		t.Fatalf("MoveSlot: %d keys, %v", n, err)
	}
	if o, _ := c.Owner(ctx, slot); o != to {
		t.Fatalf("owner after move %v, want %v", o.Addr(), to.Addr())
	}
	if v, err := cc.Get(ctx, "{k7}").Int(); err != nil || v != 7 {
		t.Fatalf("after move: %d %v", v, err)
	}
	// Kill the new owner: its replica takes over.
	start = time.Now()
	to.Kill()
	owner, err := c.WaitFailover(ctx, to, slot)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover to %s in %s", owner.Addr(), time.Since(start))
	if v, err := cc.Get(ctx, "{k7}").Int(); err != nil || v != 7 {
		t.Fatalf("after failover: %d %v", v, err)
	}
}
