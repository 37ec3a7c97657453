//go:build fault

package fault

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// T1: Redis loses its dataset under two replicas that have both read and written interned
// names. A parks 800 messages through the message API to out.t0 ... out.t49 (all delivered
// to their own target), then 200 more due in 5 s; Redis is killed (-9), its AOF deleted,
// and it is started again on the same port, empty; both replicas report the reset. B then
// parks 800 to the same 50 targets in the reverse order, so that each shard gives the names
// other codes than before. Every message must go to its own target: wrong target 0; the
// 200 parked before the reset are lost with it (reported, allowed: the API had answered
// 201 before Redis lost them); the 800 parked after it are all delivered.
func TestT1DatasetResetOwnTarget(t *testing.T) {
	s := newStack(t)
	c := newTargetChecker(t, s)
	a := e2etest.StartReady(t, bridgeBin, s.envWith())
	b := e2etest.StartReady(t, bridgeBin, s.envWith())
	names := targets("out.t", 50)

	first := c.post(a, "t1-0", 800, roundRobin(names), uniform(time.Second))
	c.requireDelivered("T1 before the reset", c.settled(first, 30*time.Second))
	parkedBefore := c.post(a, "t1-1", 200, roundRobin(names), fixed(5*time.Second))

	rdb := redis.NewClient(&redis.Options{Addr: s.redis.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir, err := rdb.ConfigGet(ctx, "dir").Result()
	if err != nil {
		t.Fatal(err)
	}
	aof, err := rdb.ConfigGet(ctx, "appenddirname").Result()
	if err != nil {
		t.Fatal(err)
	}
	s.redis.Kill()
	if err := os.RemoveAll(filepath.Join(dir["dir"], aof["appenddirname"])); err != nil {
		t.Fatal(err)
	}
	s.redis.Restart(t)
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("Redis after the restart without its AOF: %d keys, %v", n, err)
	}
	waitLog(t, a, datasetResetLine, 15*time.Second)
	waitLog(t, b, datasetResetLine, 15*time.Second)

	after := c.post(b, "t1-2", 800, roundRobin(reversed(names)), uniform(time.Second))
	ra := c.settled(after, 30*time.Second)
	rb := c.count(parkedBefore)
	t.Logf("T1: parked before the reset %d, lost to the reset %d (allowed)", rb.messages, rb.lost)
	c.requireOwnTarget("T1 parked before the reset", rb)
	c.requireDelivered("T1 after the reset", ra)
}

// T2: Sentinel fails over to a replica that missed the last writes, interned names
// among them. 1 primary + 1 replica + 3 sentinels, two replicas A and B. The replica stops
// applying the replication stream (CLIENT PAUSE WRITE on it: it reads the stream and
// answers the sentinels, but applies nothing); A parks 600 messages to 30 new targets
// out.a0 ... out.a29 (due in 5 s), giving them codes on the primary only; the primary is
// killed (-9), the replica drops the stream it did not apply with the link, the pause ends
// and the sentinels promote it; B parks 600 to 30 other new targets out.b0 ... out.b29,
// which the promoted replica gives the codes A's names had. Every message must go to its own
// target: wrong target 0; A's 600 are lost with the primary (reported, allowed); B's 600
// are all delivered.
func TestT2FailoverLaggingReplicaOwnTarget(t *testing.T) {
	d := testredis.StartSentinel(t, testredis.SentinelOptions{Replicas: 1})
	s := newTopologyStack(t, "BRIDGE_REDIS_SENTINEL_ADDRS", strings.Join(d.Addrs(), ","),
		"BRIDGE_REDIS_SENTINEL_MASTER", testredis.SentinelMaster)
	c := newTargetChecker(t, s)
	a := e2etest.StartReady(t, bridgeBin, s.envWith())
	b := e2etest.StartReady(t, bridgeBin, s.envWith())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	old, err := d.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var replica *testredis.Server
	for _, n := range d.Data {
		if n != old {
			replica = n
		}
	}
	rp := redis.NewClient(&redis.Options{Addr: old.Addr()})
	defer rp.Close()
	rr := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rr.Close()
	if err := rr.Do(ctx, "CLIENT", "PAUSE", "40000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	// The cut must hold: a write to the primary does not reach the replica.
	if err := rp.Set(ctx, "t2-probe", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n, err := rr.Exists(ctx, "t2-probe").Result(); err != nil || n != 0 {
		t.Fatalf("the replica applied a write while paused (%d, %v): replication was not cut", n, err)
	}

	lagged := c.post(a, "t2-0", 600, roundRobin(targets("out.a", 30)), fixed(5*time.Second))
	killed := time.Now()
	old.Kill()
	// The replica drops what it read and did not apply when its link closes; the pause
	// ends then, before the sentinels promote it (a pause would hold their promotion).
	for {
		info, err := rr.Info(ctx, "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "master_link_status:down") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := rr.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	primary, err := d.WaitPromoted(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if primary != replica {
		t.Fatalf("the sentinels promoted %s, not the replica %s", primary.Addr(), replica.Addr())
	}
	if n, err := rr.Exists(ctx, "t2-probe").Result(); err != nil || n != 0 {
		t.Fatalf("the promoted replica holds the write made while it was paused (%d, %v): it did not lag", n, err)
	}

	promoted := time.Since(killed)
	after := c.post(b, "t2-1", 600, roundRobin(targets("out.b", 30)), uniform(time.Second))
	t.Logf("T2: replica promoted %s after the kill, B's 600 accepted %s after it", promoted.Round(100*time.Millisecond),
		time.Since(killed).Round(100*time.Millisecond))
	ra := c.settled(after, 30*time.Second)
	rl := c.settled(lagged, 3*time.Second) // due by now: those that survived arrived
	t.Logf("T2: parked on the primary before the failover %d, lost with it %d (allowed)", rl.messages, rl.lost)
	c.requireOwnTarget("T2 parked before the failover", rl)
	c.requireDelivered("T2 after the failover", ra)
}

// T3: every shard's names hash ({P:s}:nm) is deleted by hand while messages are parked.
// A parks 1000 messages to out.t0 ... out.t49 due in 3 s, the names are deleted at once,
// and those messages fall due: each is delivered to its own target or dead-lettered
// `corrupt` (allowed: the bridge cannot tell its target any more), never anything else.
// Then B parks 1000 to the same 50 targets in the reverse order: every one is delivered to
// its own target. Wrong target 0 in both.
func TestT3NamesDeletedOwnTarget(t *testing.T) {
	s := newStack(t)
	c := newTargetChecker(t, s)
	a := e2etest.StartReady(t, bridgeBin, s.envWith())
	b := e2etest.StartReady(t, bridgeBin, s.envWith())
	names := targets("out.t", 50)
	prefix := s.env["BRIDGE_KEY_PREFIX"]

	before := c.post(a, "t3-0", 1000, roundRobin(names), fixed(3*time.Second))
	rdb := redis.NewClient(&redis.Options{Addr: s.redis.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := rdb.Keys(ctx, "{"+prefix+":*}:nm").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no names hash {P:s}:nm in the store: this row deletes nothing")
	}
	if n, err := rdb.Del(ctx, keys...).Result(); err != nil || n != int64(len(keys)) {
		t.Fatalf("DEL of %d names hashes: %d, %v", len(keys), n, err)
	}
	t.Logf("T3: deleted %d names hashes with %d messages parked", len(keys), len(before))

	rb := c.settled(before, 15*time.Second)
	c.requireOwnTarget("T3 parked before the names were deleted", rb)
	other := 0
	for reason, n := range rb.dead {
		if reason != "corrupt" {
			other += n
		}
	}
	if other > 0 || rb.lost > c.anonDeadLetters()["corrupt"] {
		t.Errorf("T3 parked before: each must be delivered to its own target or dead-lettered corrupt: %s (dead letters without the message's headers: %v)",
			rb, c.anonDeadLetters())
	}

	after := c.post(b, "t3-1", 1000, roundRobin(reversed(names)), uniform(time.Second))
	c.requireDelivered("T3 after the names were deleted", c.settled(after, 30*time.Second))
}
