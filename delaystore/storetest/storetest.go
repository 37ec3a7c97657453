// Package storetest gives tests of other packages a ready delay store on a real Redis
// (a spawned redis-server, or BRIDGE_TEST_REDIS_URL) under a random key prefix.
package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// New returns an initialised store with 4 shards and the given lease; the client is
// closed in t.Cleanup.
func New(t testing.TB, lease time.Duration) *delaystore.Store {
	t.Helper()
	return NewWith(t, delaystore.Config{Lease: lease})
}

// NewWith is New with cfg (KeyPrefix and Shards, when unset, are a random prefix and 4).
func NewWith(t testing.TB, cfg delaystore.Config) *delaystore.Store {
	t.Helper()
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = testredis.Prefix(t)
	}
	if cfg.Shards == 0 {
		cfg.Shards = 4
	}
	st, err := delaystore.New(testredis.Client(t), cfg)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	if err := st.Init(t.Context()); err != nil {
		t.Fatalf("storetest: init: %v", err)
	}
	return st
}

// NewConfirmed returns an initialised store (4 shards, the given lease) on a spawned
// primary with one replica, with MinReplicas 1 (WaitTimeout 2s), and that replica, so a
// test can pause it (SIGSTOP) to make WAIT fall short. Both servers and the client end
// with t.
func NewConfirmed(t testing.TB, lease time.Duration) (*delaystore.Store, *testredis.Server) {
	t.Helper()
	primary := testredis.Start(t)
	replica := testredis.StartReplica(t, primary)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 4, Lease: lease,
		MinReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	if err := st.Init(t.Context()); err != nil {
		t.Fatalf("storetest: init: %v", err)
	}
	return st, replica
}

// NewBrokenShard returns an initialised store (4 shards, the given lease) whose shard
// cannot park: its version counter holds a list, so its park script fails (WRONGTYPE) as
// a full Redis or a master whose replicas lag refuses one shard while the others work.
// repair makes the shard work again.
func NewBrokenShard(t testing.TB, lease time.Duration, shard int) (st *delaystore.Store, repair func()) {
	t.Helper()
	rdb, prefix := testredis.Client(t), testredis.Prefix(t)
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: prefix, Shards: 4, Lease: lease})
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	if err := st.Init(t.Context()); err != nil {
		t.Fatalf("storetest: init: %v", err)
	}
	broken := fmt.Sprintf("{%s:%d}:seq", prefix, shard)
	if err := rdb.Del(t.Context(), broken).Err(); err != nil {
		t.Fatalf("storetest: %v", err)
	}
	if err := rdb.RPush(t.Context(), broken, "x").Err(); err != nil {
		t.Fatalf("storetest: %v", err)
	}
	return st, func() {
		t.Helper()
		if err := rdb.Del(t.Context(), broken).Err(); err != nil {
			t.Fatalf("storetest: repair shard %d: %v", shard, err)
		}
	}
}

// NewNamesLost returns an initialised store (4 shards, the given lease) and lose, which
// deletes every shard's names hash ({P:s}:nm) as an operator's DEL by hand would: the
// messages parked before it then read as corrupt (delaystore.Corrupt).
func NewNamesLost(t testing.TB, lease time.Duration) (st *delaystore.Store, lose func()) {
	t.Helper()
	rdb, prefix := testredis.Client(t), testredis.Prefix(t)
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: prefix, Shards: 4, Lease: lease})
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	if err := st.Init(t.Context()); err != nil {
		t.Fatalf("storetest: init: %v", err)
	}
	return st, func() {
		t.Helper()
		for sh := range st.Shards() {
			if err := rdb.Del(t.Context(), fmt.Sprintf("{%s:%d}:nm", prefix, sh)).Err(); err != nil {
				t.Fatalf("storetest: delete the names of shard %d: %v", sh, err)
			}
		}
	}
}

// ClaimID polls s.Claim on id's shard every 5 ms until id is claimed (the claimed message
// and the whole claim) or within passed (the test fails). Blocks; t.Context() cancels it.
func ClaimID(t testing.TB, s *delaystore.Store, id string, within time.Duration) (delaystore.Claimed, delaystore.Claim) {
	t.Helper()
	sh := s.ShardOf(id)
	deadline := time.Now().Add(within)
	for attempt := 0; attempt == 0 || time.Now().Before(deadline); attempt++ {
		c, err := s.Claim(t.Context(), sh, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			if m.ID == id {
				return m, c
			}
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	t.Fatalf("%s not claimed within %s", id, within)
	return delaystore.Claimed{}, delaystore.Claim{}
}
