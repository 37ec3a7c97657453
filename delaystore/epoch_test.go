package delaystore

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestCheckDataset (docs/faults.md B10): a shard whose keys vanish under a running replica is
// reported once by every replica that had seen it, and its epoch and the shard-count
// record are re-created.
func TestCheckDataset(t *testing.T) {
	f := setup(t)
	other, err := New(f.rdb, Config{KeyPrefix: f.prefix, Shards: 4, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{f.s, other} {
		if reset, err := s.CheckDataset(t.Context()); err != nil || reset != nil {
			t.Fatalf("intact dataset: reset %v, err %v", reset, err)
		}
	}
	f.park(t, ParkRequest{ID: "a", Delay: time.Hour, Envelope: sampleEnvelope(0)})
	// Shards 1 and 3 come back empty, as after FLUSHALL on the node holding them.
	for _, sh := range []int{1, 3} {
		k := f.s.keys[sh]
		if err := f.rdb.Del(t.Context(), k.z, k.m, k.seq, k.bulk[3], k.bulk[10], k.r, k.epoch, f.s.shardsKey).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A call reads one shard's epoch (one master); the rotation reaches a reset shard within
	// a round, and then every reset shard is reported at once.
	for _, s := range []*Store{f.s, other} {
		var reset []int
		for i := 0; i < s.Shards() && reset == nil; i++ {
			if reset, err = s.CheckDataset(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(reset, []int{1, 3}) {
			t.Fatalf("after the loss: reset %v within a round; want [1 3]", reset)
		}
	}
	for _, s := range []*Store{f.s, other} {
		for range 2 * s.Shards() {
			if reset, err := s.CheckDataset(t.Context()); err != nil || reset != nil {
				t.Fatalf("reported twice: reset %v, err %v", reset, err)
			}
		}
	}
	if v, err := f.rdb.Get(t.Context(), f.s.shardsKey).Result(); err != nil || v != "4,p4096,v1" {
		t.Fatalf("shard count record %q, %v; want 4,p4096,v1 (a new store records its runs of 4096 and the format)", v, err)
	}
}

// TestCheckDatasetFlushAll: with 1024 shards a check sends one GET (one master), not one
// per shard, and a FLUSHALL is still seen at the very next check, with every shard reported
// once.
func TestCheckDatasetFlushAll(t *testing.T) {
	f, _ := ownServer(t, func(c *Config) { c.Shards = 1024 }) // its own server: FLUSHALL
	ctx := t.Context()
	if err := f.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const calls = 5
	for range calls {
		if reset, err := f.s.CheckDataset(ctx); err != nil || reset != nil {
			t.Fatalf("intact dataset: reset %v, err %v", reset, err)
		}
	}
	if n := cmdCalls(t, f.rdb, "get"); n != calls {
		t.Fatalf("%d checks sent %d GETs, want %d (one per master)", calls, n, calls)
	}
	if err := f.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	reset, err := f.s.CheckDataset(ctx)
	if err != nil || len(reset) != 1024 || reset[0] != 0 || reset[1023] != 1023 {
		t.Fatalf("check after FLUSHALL: %d shards reset (%v), want all 1024", len(reset), err)
	}
	for range 3 {
		if reset, err := f.s.CheckDataset(ctx); err != nil || reset != nil {
			t.Fatalf("reported twice: reset %d shards, err %v", len(reset), err)
		}
	}
	if v, err := f.rdb.Get(ctx, f.s.shardsKey).Result(); err != nil || v != "1024,p4096,v1" {
		t.Fatalf("shard count record %q, %v; want 1024,p4096,v1", v, err)
	}
}

// cmdCalls reads how many times Redis ran cmd since the last CONFIG RESETSTAT (INFO
// commandstats).
func cmdCalls(t *testing.T, c redis.Cmdable, cmd string) int {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, err := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
