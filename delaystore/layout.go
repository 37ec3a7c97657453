package delaystore

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// The store's layout and format (docs/design.md, "Redis data layout"): recorded with the
// shard count in P:shards, "<N>,p<R>,v1", by the first Init on an empty store and never
// changed for a store.
const (
	// DefaultShardRun is how many consecutive positions (JetStream stream sequences, Kafka
	// offsets) of one stream or partition share a shard in a store this version creates on
	// one Redis node (standalone, Sentinel) when Config.ShardRun is 0: the messages due
	// together share a shard, so a claim, an ack and a park each touch few shards
	// (docs/design.md, "Redis data layout").
	DefaultShardRun = 4096
	// ClusterShardRun is that run on Redis Cluster, where the shards also spread the load
	// over the masters: runs of 4096 would give one master a stream's every write and
	// claim for 4096 positions at a time.
	ClusterShardRun = 64
	// MaxShardRun is the largest accepted run, configured or recorded.
	MaxShardRun = 65536
	// positionMark follows the shard count in P:shards, with the run after it: ",p4096".
	positionMark = ",p"
	// formatMark ends P:shards: the store format (layout, stored envelope, tombstones,
	// interned names) this version writes and reads. Another format is refused at start
	// (docs/operating.md, "Store format").
	formatMark = ",v1"
	// maxPositionDigits bounds the position parsed from an id: 19 digits fit a uint64.
	maxPositionDigits = 19
)

// ShardOf returns the shard of a message id in this store: PositionShard's when the id is
// a source position, else fnv32a(id) mod shards. It does not block.
func (s *Store) ShardOf(id string) int {
	if sh, ok := PositionShard(id, s.shards, int(s.run.Load())); ok {
		return sh
	}
	return ShardOf(id, s.shards)
}

// ShardOfKey returns the shard of the messages with ordering key key: every message of a
// key is stored there, whatever its id (docs/design.md "Ordering keys"). It is a pure
// function and never changes for a store.
func (s *Store) ShardOfKey(key string) int {
	return ShardOf("k:"+key, s.shards)
}

// ShardOfMessage is the shard a message is stored in: its ordering key's when it has one
// ("" none), else its id's (ShardOf).
func (s *Store) ShardOfMessage(id, key string) int {
	if key != "" {
		return s.ShardOfKey(key)
	}
	return s.ShardOf(id)
}

// ShardOf returns fnv32a(id) mod shards, the shard of an id that is no source position;
// shards < 1 yields 0.
// This mapping must never change: entries of existing ids would become unreachable by
// Cancel and Get. It is a pure function.
func ShardOf(id string, shards int) int {
	if shards < 1 {
		return 0
	}
	return int(fnv32a(id) % uint32(shards))
}

// PositionShard returns the shard of an id in a store with runs of run positions when the
// id is a source position, "js:<stream>:<seq>" or
// "kafka:<topic>:<partition>:<offset>" (the last ':'-separated part 1-19 decimal
// digits): (fnv32a(the id up to its last ':') + position / run) mod shards, so that run
// consecutive positions of one stream or partition share a shard and the next run go to
// the next one. ok is false for any other id (and for shards < 1 or run < 1). It is a
// pure function and never changes for a store (whose run is recorded in P:shards).
func PositionShard(id string, shards, run int) (sh int, ok bool) {
	if shards < 1 || run < 1 {
		return 0, false
	}
	stream, pos, ok := sourcePosition(id)
	if !ok {
		return 0, false
	}
	return int((uint64(fnv32a(stream)) + pos/uint64(run)) % uint64(shards)), true
}

// sourcePosition splits a source position id, "js:<stream>:<seq>" or
// "kafka:<topic>:<partition>:<offset>" (the last ':'-separated part 1-19 decimal digits),
// into the id up to its last ':' and the position; ok is false for any other id.
func sourcePosition(id string) (stream string, pos uint64, ok bool) {
	if !(strings.HasPrefix(id, "js:") || strings.HasPrefix(id, "kafka:")) {
		return "", 0, false
	}
	cut := strings.LastIndexByte(id, ':')
	digits := id[cut+1:]
	if len(digits) == 0 || len(digits) > maxPositionDigits {
		return "", 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return "", 0, false
		}
	}
	pos, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return id[:cut], pos, true
}

// LaneOf returns which of lanes (>= 1) ingress lanes parks id in: the same lane for the
// same id always (a lane parks its messages in order). Ids of one shard share a lane, so
// a lane's batch makes few per-shard groups, except the source positions of a store with
// runs longer than 64, which take the lanes in turn (position mod lanes): a run's
// consecutive arrivals share a shard whichever lane parks them, and a run longer than a
// lane's batch would otherwise leave every lane but one idle for a whole run (one park
// call under way at a time, and under a full Redis one retry loop for all of them). With
// runs of 64 the lanes take whole shards: taking positions in turn there cost Redis 2.8
// commands per message at a steady 5k msgs/s against 2.2 (each lane fills on its own). It
// does not block.
func (s *Store) LaneOf(id string, lanes int) int {
	if lanes <= 1 {
		return 0
	}
	if s.run.Load() > ClusterShardRun {
		if _, pos, ok := sourcePosition(id); ok {
			return int(pos % uint64(lanes))
		}
	}
	return s.ShardOf(id) % lanes
}

func fnv32a(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// layoutErr is ErrNotInitialised until Init has read the layout: before that the shard
// of a position id is not known (another replica may have created either layout).
func (s *Store) layoutErr() error {
	if s.layoutKnown.Load() {
		return nil
	}
	return ErrNotInitialised
}

// shardsValue is what this store records in P:shards (shardsMark).
func (s *Store) shardsValue() string {
	return shardsMark(s.shards, int(s.run.Load()))
}

// shardsMark is the P:shards value of a store of shards shards and runs of run positions:
// "<N>,p<R>,v1".
func shardsMark(shards, run int) string {
	return strconv.Itoa(shards) + positionMark + strconv.Itoa(run) + formatMark
}

// parseShardsValue reads P:shards, "<N>,p<R>,v1" (R in 1..MaxShardRun), and returns the
// shard count and the run. Anything else (another format's mark, a number not in
// canonical form) is an error: this version cannot say how such a store is written.
func parseShardsValue(v string) (shards, run int, err error) {
	bad := func() (int, int, error) {
		return 0, 0, fmt.Errorf("not a store of format %s (%q)", formatMark[1:], v)
	}
	rest, ok := strings.CutSuffix(v, formatMark)
	num, runText, ok2 := strings.Cut(rest, positionMark)
	if !ok || !ok2 {
		return bad()
	}
	if shards, err = canonical(num, 1<<31-1); err != nil {
		return bad()
	}
	if run, err = canonical(runText, MaxShardRun); err != nil {
		return bad()
	}
	return shards, run, nil
}

// canonical parses s as a decimal number in 1..max written without sign or leading zeros.
func canonical(s string, max int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("not a number in 1..%d: %q", max, s)
	}
	return n, nil
}
