package delaystore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/testredis"
	"github.com/redis/go-redis/v9"
)

// TestPositionShard: run consecutive positions of one stream or partition share a shard,
// the next run go to the next shard (from the fnv32a of the id up to its last ':'); ids
// that are no source position are not sharded by position.
func TestPositionShard(t *testing.T) {
	for _, run := range []int{1, 64, DefaultShardRun} {
		for _, prefix := range []string{"js:IN", "kafka:delay.in:2", "js:a:b"} {
			base := ShardOf(prefix, 16)
			for pos := range run * 20 {
				id := fmt.Sprintf("%s:%d", prefix, pos)
				got, ok := PositionShard(id, 16, run)
				if want := (base + pos/run) % 16; !ok || got != want {
					t.Fatalf("PositionShard(%q, 16, %d) = %d, %v; want %d", id, run, got, ok, want)
				}
			}
		}
	}
	if got, ok := PositionShard("js:IN:9999999999999999999", 7, MaxShardRun); !ok || got != int((uint64(fnv32a("js:IN"))+9999999999999999999/MaxShardRun)%7) {
		t.Fatalf("largest position: %d, %v", got, ok)
	}
	for _, id := range []string{"", "js:", "js:IN:", "js:IN:12a", "js:IN:+5", "js:IN:-5", "js:IN: 5",
		"js:IN:18446744073709551616", "js:IN:00000000000000000001", "order-1", "nats:IN:5", "JS:IN:5", "kafka5"} {
		if sh, ok := PositionShard(id, 16, 64); ok {
			t.Errorf("PositionShard(%q) = %d, true; want no position", id, sh)
		}
	}
	if _, ok := PositionShard("js:IN:5", 0, 64); ok {
		t.Error("PositionShard with 0 shards")
	}
	if _, ok := PositionShard("js:IN:5", 16, 0); ok {
		t.Error("PositionShard with runs of 0")
	}
}

// TestLayoutOfNewStore: an empty store gets the position layout with runs of
// DefaultShardRun (recorded in P:shards): a run of consecutive arrivals of one stream
// parks in one shard, and every one of them is found by id (Get, Cancel); an explicit id
// stays in its fnv shard.
func TestLayoutOfNewStore(t *testing.T) {
	f := setup(t, func(c *Config) { c.Shards = 16 })
	ctx := t.Context()
	if v, want := f.rdb.Get(ctx, f.s.shardsKey).Val(), shardsMark(16, DefaultShardRun); v != want || want != "16,p4096,v1" {
		t.Fatalf("P:shards = %q, want %s", v, want)
	}
	var reqs []ParkRequest
	n := min(128, DefaultShardRun) // positions of one run
	for i := 2 * DefaultShardRun; i < 3*DefaultShardRun; i += DefaultShardRun / n {
		id := fmt.Sprintf("js:IN:%d", i)
		r := sourced(id, id, false)
		r.Delay = time.Hour
		reqs = append(reqs, r)
	}
	reqs = append(reqs, ParkRequest{ID: "order-1", Replace: true, Delay: time.Hour, Envelope: sampleEnvelope(0)})
	f.park(t, reqs...)
	run := (ShardOf("js:IN", 16) + 2) % 16
	if got := f.rdb.ZCard(ctx, f.s.keys[run].z).Val(); got != int64(n) {
		t.Fatalf("shard %d holds %d of the %d positions of its run", run, got, n)
	}
	for pos := range 8 { // runs longer than 64: positions take the lanes in turn
		id := fmt.Sprintf("js:IN:%d", 2*DefaultShardRun+pos)
		if l := f.s.LaneOf(id, 4); l != (2*DefaultShardRun+pos)%4 {
			t.Fatalf("LaneOf(%s, 4) = %d, want its position mod 4", id, l)
		}
	}
	if l, want := f.s.LaneOf("order-1", 4), ShardOf("order-1", 16)%4; l != want {
		t.Fatalf("LaneOf(order-1, 4) = %d, want its shard mod 4 = %d", l, want)
	}
	if sh := ShardOf("order-1", 16); f.rdb.ZScore(ctx, f.s.keys[sh].z, "order-1").Err() != nil {
		t.Fatalf("order-1 not in its fnv shard %d", sh)
	}
	for _, r := range reqs {
		if m, err := f.s.Get(ctx, r.ID); err != nil || m.Shard != f.s.ShardOf(r.ID) {
			t.Fatalf("get %s: %+v, %v", r.ID, m, err)
		}
	}
	for _, id := range []string{reqs[2].ID, "order-1"} {
		if ok, err := f.s.Cancel(ctx, id); err != nil || !ok {
			t.Fatalf("cancel %s: %v, %v", id, ok, err)
		}
	}
}

// TestStoreOfAnotherFormat: a store whose P:shards is not this format's ("<N>,p<R>,v1")
// is refused at start with ErrShardMismatch, an error that names the value and the
// drain-and-recreate procedure, and the key is left as it was.
func TestStoreOfAnotherFormat(t *testing.T) {
	url := testredis.URL(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testredis.Prefix(t)
	s, err := New(rdb, Config{KeyPrefix: prefix, Shards: 16, Lease: 30 * time.Second, TombstoneTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"16", "16,p64", "16,p64,c1", "16,p4096,c1", "16,p4096,c2", "16,p4096,v2", "16,p4096,v1,", "16,v1",
		"16,p32", "16,", "p64", "016,p4096,v1", "0,p4096,v1", "16,p0,v1", "16,p65537,v1", "16,p01024,v1", "16,p,v1", "16,p-1,v1",
		"16,p1024,p64,v1", "16,v1,p64", "16,p64,v1,v1"} {
		if err := rdb.Set(t.Context(), prefix+":shards", bad, 0).Err(); err != nil {
			t.Fatal(err)
		}
		err := s.Init(t.Context())
		if !errors.Is(err, ErrShardMismatch) || !strings.Contains(err.Error(), strconv.Quote(bad)) || !strings.Contains(err.Error(), "Store format") {
			t.Errorf("P:shards %q: Init err %v, want ErrShardMismatch naming it and the procedure", bad, err)
		}
		if v := rdb.Get(t.Context(), prefix+":shards").Val(); v != bad {
			t.Errorf("P:shards rewritten from %q to %q", bad, v)
		}
	}
}

// TestLayoutRedeliveryDedup: in the position layout a redelivery of a delivered message
// (same source id, so same id) meets its tombstone, and one of a parked message keeps the
// entry, for JetStream and Kafka positions across run boundaries.
func TestLayoutRedeliveryDedup(t *testing.T) {
	f := setup(t, func(c *Config) { c.Shards = 16; c.TombstoneTTL = time.Minute })
	for _, id := range []string{"js:IN:63", "js:IN:64", "kafka:delay.in:1:127", "kafka:delay.in:1:128"} {
		if p := f.park(t, sourced(id, id, false)); p[0].Existed {
			t.Fatalf("first park of %s: %+v", id, p[0])
		}
		if p := f.park(t, sourced(id, id, false)); !p[0].Existed || p[0].Delivered {
			t.Fatalf("redelivery of parked %s: %+v, want the entry kept", id, p[0])
		}
		f.deliver(t, id)
		if p := f.park(t, sourced(id, id, false)); !p[0].Delivered {
			t.Fatalf("redelivery of delivered %s: %+v, want Delivered", id, p[0])
		}
	}
	if z, m := f.counts(t); z != 0 || m != 0 {
		t.Fatalf("store holds z %d m %d, want empty", z, m)
	}
}

// TestLayoutAgreedByReplicas: replicas starting together on an empty store all get the
// position layout (one SET NX decides).
func TestLayoutAgreedByReplicas(t *testing.T) {
	url := testredis.URL(t)
	prefix := testredis.Prefix(t)
	var wg sync.WaitGroup
	stores := make([]*Store, 8)
	for i := range stores {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		if stores[i], err = New(rdb, Config{KeyPrefix: prefix, Shards: 16, Lease: time.Second}); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := stores[i].Init(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i, s := range stores {
		if pos, _ := PositionShard("js:IN:999", 16, DefaultShardRun); s.ShardOf("js:IN:999") != pos {
			t.Fatalf("replica %d does not shard by position", i)
		}
	}
}

// TestNotInitialisedRefusesIDs: before Init has read the layout, calls that address an id
// refuse (ErrNotInitialised) instead of guessing its shard.
func TestNotInitialisedRefusesIDs(t *testing.T) {
	s, err := New(testredis.Client(t), Config{KeyPrefix: testredis.Prefix(t), Shards: 16, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := s.Park(ctx, []ParkRequest{{ID: "js:IN:1", Envelope: sampleEnvelope(0)}}); !errors.Is(err, ErrNotInitialised) {
		t.Errorf("park: %v", err)
	}
	if _, err := s.Get(ctx, "js:IN:1"); !errors.Is(err, ErrNotInitialised) {
		t.Errorf("get: %v", err)
	}
	if _, err := s.Cancel(ctx, "js:IN:1"); !errors.Is(err, ErrNotInitialised) {
		t.Errorf("cancel: %v", err)
	}
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Park(ctx, []ParkRequest{{ID: "js:IN:1", Envelope: sampleEnvelope(0)}}); err != nil {
		t.Errorf("park after Init: %v", err)
	}
}

// TestShardsValueTable: what this version records and accepts in P:shards: exactly
// "<N>,p<R>,v1" with canonical numbers, N >= 1, R in 1..MaxShardRun.
func TestShardsValueTable(t *testing.T) {
	for _, tc := range []struct {
		v   string
		ok  bool
		run int
	}{
		{"16,p4096,v1", true, 4096},
		{"16,p64,v1", true, 64},
		{"1,p1,v1", true, 1},
		{"16,p65536,v1", true, 65536},
		{"16,p65537,v1", false, 0},
		{"16,p4096,c2", false, 0},
		{"16,p4096,c1", false, 0},
		{"16,p64", false, 0},
		{"16", false, 0},
		{"16,v1", false, 0},
		{"016,p64,v1", false, 0},
		{"0,p64,v1", false, 0},
		{"16,p064,v1", false, 0},
		{"16,p64,v1,x", false, 0},
		{"16,p64,v2", false, 0},
	} {
		n, run, err := parseShardsValue(tc.v)
		if (err == nil) != tc.ok || run != tc.run || (tc.ok && n != 16 && n != 1) {
			t.Errorf("parseShardsValue(%q) = %d, %d, %v", tc.v, n, run, err)
		}
		if tc.ok && shardsMark(n, run) != tc.v {
			t.Errorf("shardsMark(%d, %d) = %q, want %q", n, run, shardsMark(n, run), tc.v)
		}
	}
}

// TestShardRunOfStore: a new store records the run its creator is configured with, and a
// replica configured with another run uses the store's.
func TestShardRunOfStore(t *testing.T) {
	url := testredis.URL(t)
	prefix := testredis.Prefix(t)
	open := func(run int) *Store {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		s, err := New(rdb, Config{KeyPrefix: prefix, Shards: 16, ShardRun: run, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Init(t.Context()); err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := open(4096)
	if v := first.rdb.Get(t.Context(), prefix+":shards").Val(); v != "16,p4096,v1" {
		t.Fatalf("P:shards = %q, want 16,p4096,v1 (BRIDGE_SHARD_RUN=4096)", v)
	}
	later := open(64)
	for _, id := range []string{"js:IN:63", "js:IN:4096", "js:IN:100000", "kafka:t:3:8191"} {
		want, _ := PositionShard(id, 16, 4096)
		if got := later.ShardOf(id); got != want {
			t.Errorf("ShardOf(%q) = %d on a store of runs of 4096, want %d", id, got, want)
		}
	}
	// Lanes: a store's position ids take the lanes in turn, other ids by shard.
	for pos := range 8 {
		if l := later.LaneOf(fmt.Sprintf("js:IN:%d", 4096+pos), 4); l != pos%4 {
			t.Errorf("LaneOf(js:IN:%d, 4) = %d, want %d", 4096+pos, l, pos%4)
		}
	}
	if l, want := later.LaneOf("order-1", 4), ShardOf("order-1", 16)%4; l != want {
		t.Errorf("LaneOf(order-1, 4) = %d, want its shard mod 4 = %d", l, want)
	}
	if _, err := New(first.rdb, Config{KeyPrefix: prefix, Shards: 16, ShardRun: MaxShardRun + 1, Lease: time.Second}); err == nil || !strings.Contains(err.Error(), "SHARD_RUN") {
		t.Errorf("run %d: %v, want a SHARD_RUN problem", MaxShardRun+1, err)
	}
}
