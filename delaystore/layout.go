package delaystore

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// The store's layout: which shard an id falls in (docs/design.md, "Redis data layout").
// It is recorded with the shard count in P:shards, decided by the first Init on an empty
// store and never changed for a store.
const (
	// positionRun is how many consecutive positions (JetStream stream sequences, Kafka
	// offsets) of one stream or partition share a shard in the position layout.
	positionRun = 64
	// positionMark follows the shard count in P:shards for the position layout. A version
	// before it reads "<N>,p64" as no shard count and refuses the store.
	positionMark = ",p64"
	// compactMark follows the position mark in P:shards of a store whose entries are
	// written compact (envelope.go encodeCompact, envelope.lua's binary header) and whose
	// tombstones are sets that Redis expires (tombs.lua). A version before it refuses any
	// value but "<N>" and "<N>,p64", so a replica that cannot read compact entries or
	// would not see those tombstones never serves such a store.
	compactMark = ",c1"
	// maxPositionDigits bounds the position parsed from an id: 19 digits fit a uint64.
	maxPositionDigits = 19
)

// ShardOf returns the shard of a message id in this store: PositionShard's when the store
// has the position layout and the id is a source position, else fnv32a(id) mod shards.
// It does not block.
func (s *Store) ShardOf(id string) int {
	if s.byPosition.Load() {
		if sh, ok := PositionShard(id, s.shards); ok {
			return sh
		}
	}
	return ShardOf(id, s.shards)
}

// ShardOf returns fnv32a(id) mod shards, the shard of an id in the id layout (and of
// every id that is no source position in the position layout); shards < 1 yields 0.
// This mapping must never change: entries of existing ids would become unreachable by
// Cancel and Get. It is a pure function.
func ShardOf(id string, shards int) int {
	if shards < 1 {
		return 0
	}
	return int(fnv32a(id) % uint32(shards))
}

// PositionShard returns the shard of an id in the position layout when the id is a
// source position, "js:<stream>:<seq>" or "kafka:<topic>:<partition>:<offset>" (the last
// ':'-separated part 1-19 decimal digits): (fnv32a(the id up to its last ':') +
// position / 64) mod shards, so that 64 consecutive positions of one stream or partition
// share a shard and the next 64 go to the next one. ok is false for any other id (and
// for shards < 1). It is a pure function and never changes for a store.
func PositionShard(id string, shards int) (sh int, ok bool) {
	if shards < 1 || !(strings.HasPrefix(id, "js:") || strings.HasPrefix(id, "kafka:")) {
		return 0, false
	}
	cut := strings.LastIndexByte(id, ':')
	digits := id[cut+1:]
	if len(digits) == 0 || len(digits) > maxPositionDigits {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	pos, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return int((uint64(fnv32a(id[:cut])) + pos/positionRun) % uint64(shards)), true
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

// shardsValue is what this store records in P:shards: the shard count, the mark of the
// position layout when it runs with it, and the compact mark when it writes compact.
func (s *Store) shardsValue() string {
	v := strconv.Itoa(s.shards)
	if s.byPosition.Load() {
		v += positionMark
	}
	if s.compact.Load() {
		v += compactMark
	}
	return v
}

// newStoreMark is what Init records for an empty store: the position layout and compact
// entries.
func newStoreMark(shards int) string { return strconv.Itoa(shards) + positionMark + compactMark }

// parseShardsValue reads P:shards: "<N>" (the id layout), "<N>,p64" (the position
// layout) or "<N>,p64,c1" (the position layout, compact entries and set tombstones).
// Anything else (a compact mark without the position layout, an unknown mark) is an
// error: this version cannot say how such a store is written.
func parseShardsValue(v string) (shards int, byPosition, compact bool, err error) {
	num, compact := strings.CutSuffix(v, positionMark+compactMark)
	if !compact {
		num, byPosition = strings.CutSuffix(v, positionMark)
	} else {
		byPosition = true
	}
	shards, err = strconv.Atoi(num)
	if err != nil || shards < 1 || strconv.Itoa(shards) != num {
		return 0, false, false, fmt.Errorf("not a shard count: %q", v)
	}
	return shards, byPosition, compact, nil
}
