package delaystore

import (
	"slices"
	"testing"
	"time"
)

// TestCheckDataset (FAULTS.md B10): a shard whose keys vanish under a running replica is
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
		if err := f.rdb.Del(t.Context(), k.z, k.m, k.zmSeqT[2], k.epoch, f.s.shardsKey).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*Store{f.s, other} {
		reset, err := s.CheckDataset(t.Context())
		if err != nil || !slices.Equal(reset, []int{1, 3}) {
			t.Fatalf("after the loss: reset %v, err %v; want [1 3]", reset, err)
		}
	}
	for _, s := range []*Store{f.s, other} {
		if reset, err := s.CheckDataset(t.Context()); err != nil || reset != nil {
			t.Fatalf("reported twice: reset %v, err %v", reset, err)
		}
	}
	if n, err := f.rdb.Get(t.Context(), f.s.shardsKey).Int(); err != nil || n != 4 {
		t.Fatalf("shard count record %d, %v; want 4", n, err)
	}
}
