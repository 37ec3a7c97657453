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
	if v, want := f.rdb.Get(ctx, f.s.shardsKey).Val(), shardsMark(16, DefaultShardRun, true, true); v != want || want != "16,p4096,c2" {
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

// TestLayoutOfExistingStore: a store recorded by an earlier version ("<N>": the id layout)
// keeps fnv32a(id) for every id, so what that version parked is still found by id and a
// redelivery of what it delivered meets its tombstone; a malformed record is refused.
func TestLayoutOfExistingStore(t *testing.T) {
	url := testredis.URL(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testredis.Prefix(t)
	if err := rdb.Set(t.Context(), prefix+":shards", "16", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s, err := New(rdb, Config{KeyPrefix: prefix, Shards: 16, Lease: 30 * time.Second, TombstoneTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	f := &fixture{s: s, rdb: rdb, prefix: prefix}
	id := "js:IN:4242"
	if s.ShardOf(id) != ShardOf(id, 16) {
		t.Fatalf("id layout: shard %d, want fnv %d", s.ShardOf(id), ShardOf(id, 16))
	}
	if pos, _ := PositionShard(id, 16, DefaultShardRun); pos == ShardOf(id, 16) {
		t.Fatalf("test id %s has the same shard in both layouts", id)
	}
	f.park(t, sourced(id, id, false))
	f.deliver(t, id)
	if p := f.park(t, sourced(id, id, false)); !p[0].Delivered {
		t.Fatalf("redelivery: %+v, want Delivered", p[0])
	}
	if v := rdb.Get(t.Context(), prefix+":shards").Val(); v != "16" {
		t.Fatalf("P:shards rewritten to %q", v)
	}
	for _, bad := range []string{"16,p32", "16,", "p64", "016,p64", "0,p64", "16,c1", "16,c1,p64", "16,p64,c3", "16,c2", "16,p64,c1,", "16,p64,c1,c1", "16,p64,c2,c1",
		"16,p1024", "16,p0,c1", "16,p65537,c1", "16,p01024,c1", "16,p,c1", "16,p-1,c1", "16,p1024,p64,c1"} {
		if err := rdb.Set(t.Context(), prefix+":shards", bad, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Init(t.Context()); !errors.Is(err, ErrShardMismatch) || !strings.Contains(err.Error(), bad) {
			t.Errorf("P:shards %q: Init err %v, want ErrShardMismatch naming it", bad, err)
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

// landedShardsRule is how the version before the compact mark read P:shards (layout.go's
// parseShardsValue at 30081a0): an optional ",p64" after a canonical count >= 1, anything
// else refused (ErrShardMismatch: it does not start).
func landedShardsRule(v string) bool {
	num, _ := strings.CutSuffix(v, ",p64")
	n, err := strconv.Atoi(num)
	return err == nil && n >= 1 && strconv.Itoa(n) == num
}

// priorRunsRule is how the version before runs were recorded read P:shards (layout.go's
// parseShardsValue at d8a1e32): "<N>", "<N>,p64" or "<N>,p64,c1", a canonical count >= 1,
// anything else refused (ErrShardMismatch: it does not start).
func priorRunsRule(v string) bool {
	num, ok := strings.CutSuffix(v, ",p64,c1")
	if !ok {
		num, _ = strings.CutSuffix(v, ",p64")
	}
	n, err := strconv.Atoi(num)
	return err == nil && n >= 1 && strconv.Itoa(n) == num
}

// priorCompactRule is how the version before interned names read P:shards (layout.go's
// parseShardsValue at 0a15f6b): "<N>", "<N>,p64", or "<N>,p<R>,c1" with a canonical count
// >= 1 and a canonical run in 1..65536, anything else refused (it does not start).
func priorCompactRule(v string) bool {
	canon := func(s string, most int) bool {
		n, err := strconv.Atoi(s)
		return err == nil && n >= 1 && n <= most && strconv.Itoa(n) == s
	}
	rest, compact := strings.CutSuffix(v, ",c1")
	num, run, byPosition := strings.Cut(rest, ",p")
	if !canon(num, 1<<31-1) {
		return false
	}
	if !byPosition {
		return !compact
	}
	return canon(run, 65536) && (compact || run == "64")
}

// TestShardsValueTable: what this version records and accepts in P:shards. A new store's
// mark carries its run, which the previous version refuses unless it is 64 (so no
// replica ever shards a store by another run than the one it was created with), and
// carries the compact format, which the version before that refuses; every value an
// earlier version accepted is read with its layout, run and format.
func TestShardsValueTable(t *testing.T) {
	for _, tc := range []struct {
		v                   string
		ok                  bool
		run                 int
		compact, interned   bool
		landed, prev, prior bool // accepted by the version before the compact mark, before runs, before interned names
	}{
		{"16", true, 0, false, false, true, true, true},
		{"16,p64", true, 64, false, false, true, true, true},
		{"16,p64,c1", true, 64, true, false, false, true, true},
		{"1,p64,c1", true, 64, true, false, false, true, true},
		{"16,p1024,c1", true, 1024, true, false, false, false, true},
		{"16,p4096,c1", true, 4096, true, false, false, false, true},
		{"16,p1,c1", true, 1, true, false, false, false, true},
		{"16,p65536,c1", true, 65536, true, false, false, false, true},
		{"16,p64,c2", true, 64, true, true, false, false, false},
		{"16,p4096,c2", true, 4096, true, true, false, false, false},
		{"16,p65537,c1", false, 0, false, false, false, false, false},
		{"16,p65537,c2", false, 0, false, false, false, false, false},
		{"16,p1024", false, 0, false, false, false, false, false},
		{"16,c1", false, 0, false, false, false, false, false},
		{"16,c2", false, 0, false, false, false, false, false},
		{"16,p64,c3", false, 0, false, false, false, false, false},
		{"16,p64,c1,c2", false, 0, false, false, false, false, false},
		{"16,p64,c2,c1", false, 0, false, false, false, false, false},
		{"16,c1,p64", false, 0, false, false, false, false, false},
		{"016,p64,c1", false, 0, false, false, false, false, false},
		{"0,p64,c1", false, 0, false, false, false, false, false},
		{"16,p64,c1,x", false, 0, false, false, false, false, false},
	} {
		n, run, compact, interned, err := parseShardsValue(tc.v)
		if (err == nil) != tc.ok || run != tc.run || compact != tc.compact || interned != tc.interned || (tc.ok && n != 16 && n != 1) {
			t.Errorf("parseShardsValue(%q) = %d, %d, %v, %v, %v", tc.v, n, run, compact, interned, err)
		}
		if landedShardsRule(tc.v) != tc.landed || priorRunsRule(tc.v) != tc.prev || priorCompactRule(tc.v) != tc.prior {
			t.Errorf("%q: accepted before the compact mark %v (want %v), before runs %v (want %v), before interned names %v (want %v)",
				tc.v, landedShardsRule(tc.v), tc.landed, priorRunsRule(tc.v), tc.prev, priorCompactRule(tc.v), tc.prior)
		}
		if tc.ok && shardsMark(n, run, compact, interned) != tc.v {
			t.Errorf("shardsMark(%d, %d, %v, %v) = %q, want %q", n, run, compact, interned, shardsMark(n, run, compact, interned), tc.v)
		}
	}
	// A new store's mark (interned names) is refused by every earlier version: none of
	// them reads codes.
	for _, m := range []string{shardsMark(16, DefaultShardRun, true, true), shardsMark(16, ClusterShardRun, true, true)} {
		if landedShardsRule(m) || priorRunsRule(m) || priorCompactRule(m) {
			t.Errorf("new store mark %q accepted by an earlier version", m)
		}
	}
	if m := shardsMark(16, ClusterShardRun, true, true); m != "16,p64,c2" {
		t.Errorf("new Cluster store mark %q, want 16,p64,c2", m)
	}
}

// TestShardRunOfStore: a new store records the run its creator is configured with, and a
// replica configured with another run uses the store's (an upgraded fleet on a store of
// runs of 64 goes on sharding by 64, a store of 4096 is sharded by 4096 by a replica
// configured with 64).
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
	if v := first.rdb.Get(t.Context(), prefix+":shards").Val(); v != "16,p4096,c2" {
		t.Fatalf("P:shards = %q, want 16,p4096,c2 (BRIDGE_SHARD_RUN=4096)", v)
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
