package delaystore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// TargetCount is one target's parked messages (Targets).
type TargetCount struct {
	Target string // "broker:name"
	Parked int64
	// NextDue is the earliest scheduled time of the target's messages (unix ms); 0 when
	// it is unknown: Targets read maxRead entries before it could be sure of it.
	NextDue int64
	// Window is the spread window (x-delay-window) of the message due at NextDue, the one
	// Targets read to find it: not a summary of the target's messages; 0 when it has none
	// or NextDue is unknown.
	Window time.Duration
	// Quota is the BRIDGE_TARGET_QUOTA pattern the target counts against (the first of
	// the store's rules that matches it), "" for none.
	Quota string
}

// Targets returns every target with parked messages, most parked first (then by name):
// the counts that park, ack, cancel and bulk keep per shard, summed, and each target's
// next due time with that message's spread window, and the quota pattern it counts
// against. A shard whose counts are not marked complete (written by a version that
// kept none), or every shard with recount, is counted from its entries first (counts.lua:
// one script run per shard, ~3 us per entry). Next dues are found by reading each shard
// in scheduled order, all shards' chunks in one pipeline a round, until the shard showed
// the first message of every target its counts hold, or is through: the first seen in a
// shard is that shard's earliest, and a target's next due is the earliest over the shards
// that hold it. The reading is bounded by work, not time: after maxRead entries (at least
// one round) it stops, and a target that a shard still holding it had not shown yet keeps
// NextDue 0 (unknown), never a later one. It changes nothing else and blocks until done,
// ctx is done, or a Redis call fails.
func (s *Store) Targets(ctx context.Context, recount bool, maxRead int) ([]TargetCount, error) {
	counts, held, err := s.targetCounts(ctx, recount)
	if err != nil {
		return nil, err
	}
	out := make([]TargetCount, 0, len(counts))
	for t, n := range counts {
		tc := TargetCount{Target: t, Parked: n}
		if r := s.quota.match(t); r >= 0 {
			tc.Quota = s.quota.rules[r].Pattern
		}
		out = append(out, tc)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Parked != out[j].Parked {
			return out[i].Parked > out[j].Parked
		}
		return out[i].Target < out[j].Target
	})
	if err := s.nextDues(ctx, out, held, maxRead); err != nil {
		return nil, err
	}
	return out, nil
}

// targetCounts sums the shards' counts per target, counting first the shards whose
// counts are not complete (or all, with recount); held[i] is the targets shard i holds.
func (s *Store) targetCounts(ctx context.Context, recount bool) (map[string]int64, []map[string]bool, error) {
	if err := s.completeCounts(ctx, recount); err != nil {
		return nil, nil, fmt.Errorf("targets: %w", err)
	}
	if recount { // the quota counts derive from these counts: again too
		if err := s.countQuotas(ctx, true); err != nil {
			return nil, nil, fmt.Errorf("targets: %w", err)
		}
	}
	var err error
	for range 3 {
		var sum map[string]int64
		var held []map[string]bool
		if sum, held, err = s.readCounts(ctx); !errors.Is(err, errNamesMoved) {
			return sum, held, err
		}
	}
	return nil, nil, err
}

// readCounts reads every shard's counts per target with the generation of its names, in
// one transaction (per node on Cluster), and resolves the fields with the table of that
// generation; errNamesMoved when a shard's names changed before its table was loaded.
func (s *Store) readCounts(ctx context.Context) (map[string]int64, []map[string]bool, error) {
	read := s.rdb.TxPipeline()
	alls := make([]*redis.MapStringStringCmd, len(s.keys))
	gens := make([]*redis.StringCmd, len(s.keys))
	for i := range s.keys {
		gens[i] = read.HGet(ctx, s.keys[i].nm, genField)
		alls[i] = read.HGetAll(ctx, s.keys[i].n)
	}
	_, _ = read.Exec(ctx)
	sum := map[string]int64{}
	held := make([]map[string]bool, len(s.keys))
	for i, c := range alls {
		fields, err := c.Result()
		var gen string
		if err == nil {
			gen, err = genOf(gens[i])
		}
		var names *nameTable
		if err == nil {
			names, err = s.tableAt(ctx, i, gen)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("targets: read shard %d: %w", i, err)
		}
		held[i] = map[string]bool{}
		for f, v := range fields {
			n, err := strconv.ParseInt(v, 10, 64)
			if f == "" || err != nil || n <= 0 {
				continue
			}
			t, err := names.resolve([]byte(f))
			if err != nil {
				continue // a code the shard's names lost (deleted by hand): its entries are corrupt
			}
			sum[t] += n
			held[i][t] = true
		}
	}
	return sum, held, nil
}

// completeCounts makes every shard's counts complete: one pipeline of HEXISTS finds the
// shards whose complete mark is missing (all of them, with recount), and counts.lua runs
// on those one call at a time, so the client's read timeout bounds one shard's script
// (~3 us per entry), not the sum of all. The script checks the mark again itself.
func (s *Store) completeCounts(ctx context.Context, recount bool) error {
	marked := make([]*redis.BoolCmd, len(s.keys))
	if !recount {
		read := s.rdb.Pipeline()
		for i, k := range s.keys {
			marked[i] = read.HExists(ctx, k.n, "")
		}
		_, _ = read.Exec(ctx)
	}
	for i, k := range s.keys {
		if marked[i] != nil {
			done, err := marked[i].Result()
			if err != nil {
				return fmt.Errorf("count shard %d: %w", i, err)
			}
			if done {
				continue
			}
		}
		c := s.evalPipelined(ctx, s.scripts[scriptCounts], []call{{keys: []string{k.m, k.n}, args: []any{boolArg(recount)}}})[0]
		if err := c.Err(); err != nil {
			return fmt.Errorf("count shard %d: %w", i, err)
		}
	}
	return nil
}

// nextDues fills in the NextDue of targets from held (the targets each shard's counts
// hold): each shard is read in scheduled order, listChunk entries a round, all shards of a
// round in one pipeline, until it showed every target it holds or is through, or maxRead
// entries were read (Targets).
func (s *Store) nextDues(ctx context.Context, targets []TargetCount, held []map[string]bool, maxRead int) error {
	index := make(map[string]int, len(targets))
	for i, t := range targets {
		index[t.Target] = i
	}
	pos := make([]Position, len(held))
	done := make([]bool, len(held))
	for read := 0; ; {
		var reqs []ScanRequest
		for sh := range held {
			if !done[sh] && len(held[sh]) > 0 {
				reqs = append(reqs, ScanRequest{Shard: sh, From: 0, To: math.MaxInt64, After: pos[sh], Count: listChunk})
			}
		}
		if len(reqs) == 0 || (read > 0 && read >= maxRead) {
			break // unknown: what a shard still holds unseen
		}
		read += len(reqs) * listChunk
		for i, p := range s.Scan(ctx, reqs) {
			sh := reqs[i].Shard
			if p.Err != nil {
				return fmt.Errorf("targets: next due: shard %d: %w", sh, p.Err)
			}
			if p.Again {
				continue // read again next round
			}
			pos[sh], done[sh] = p.Next, p.Through
			for _, e := range p.Entries {
				if t, ok := index[e.Target]; ok && e.Err == nil && held[sh][e.Target] {
					delete(held[sh], e.Target)
					if targets[t].NextDue == 0 || e.Scheduled < targets[t].NextDue {
						targets[t].NextDue, targets[t].Window = e.Scheduled, e.Window
					}
				}
			}
		}
	}
	for _, h := range held {
		for t := range h { // counted here, not seen: this shard may hold an earlier one
			if i, ok := index[t]; ok {
				targets[i].NextDue, targets[i].Window = 0, 0
			}
		}
	}
	return nil
}

// listChunk is the most entries of one shard nextDues reads per round trip.
const listChunk = 500

// boolArg is a script's flag argument: "1" or "0".
func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
