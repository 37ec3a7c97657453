package delaystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Parked counts per target ({P:s}:n, docs/design.md "Listing"): park, ack, cancel and
// bulk.lua keep them per shard in the same call as their changes, and the quota counts
// derive from them. A shard whose counts are not marked complete (written by a version
// that kept none, or counted on a dataset that was lost) is counted from its entries
// (counts.lua) at Init, or by the first ParkedByTarget.

// ParkedByTarget returns, per shard, its parked messages per target ("broker:name" ->
// count > 0): the counts the scripts keep, read in one transaction (per node on Cluster)
// with the generation of the shard's names that resolves them. A shard whose counts are
// not complete, or every shard with recount (and then the quota counts too), is counted
// from its entries first: one counts.lua run per shard, ~3 us per entry. A target whose
// code the shard's names lost (deleted by hand) is left out. It changes nothing else and
// blocks until done, ctx is done, or a Redis call fails.
func (s *Store) ParkedByTarget(ctx context.Context, recount bool) ([]map[string]int64, error) {
	if err := s.completeCounts(ctx, recount); err != nil {
		return nil, fmt.Errorf("targets: %w", err)
	}
	if recount { // the quota counts derive from these counts: again too
		if err := s.countQuotas(ctx, true); err != nil {
			return nil, fmt.Errorf("targets: %w", err)
		}
	}
	var err error
	for range 3 {
		var counts []map[string]int64
		if counts, err = s.readCounts(ctx); !errors.Is(err, errNamesMoved) {
			return counts, err
		}
	}
	return nil, err
}

// readCounts reads every shard's counts per target with the generation of its names, in
// one transaction (per node on Cluster), and resolves the fields with the table of that
// generation; errNamesMoved when a shard's names changed before its table was loaded.
func (s *Store) readCounts(ctx context.Context) ([]map[string]int64, error) {
	read := s.rdb.TxPipeline()
	alls := make([]*redis.MapStringStringCmd, len(s.keys))
	gens := make([]*redis.StringCmd, len(s.keys))
	for i := range s.keys {
		gens[i] = read.HGet(ctx, s.keys[i].nm, genField)
		alls[i] = read.HGetAll(ctx, s.keys[i].n)
	}
	_, _ = read.Exec(ctx)
	out := make([]map[string]int64, len(s.keys))
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
			return nil, fmt.Errorf("targets: read shard %d: %w", i, err)
		}
		out[i] = map[string]int64{}
		for f, v := range fields {
			n, err := strconv.ParseInt(v, 10, 64)
			if f == "" || err != nil || n <= 0 {
				continue
			}
			t, err := names.resolve([]byte(f))
			if err != nil {
				continue // a code the shard's names lost (deleted by hand): its entries are corrupt
			}
			out[i][t] += n
		}
	}
	return out, nil
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

// boolArg is a script's flag argument: "1" or "0".
func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
