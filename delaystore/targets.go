package delaystore

import (
	"context"
	_ "embed"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/counts.lua
var countsSrc string

// TargetCount is one target's parked messages (Targets).
type TargetCount struct {
	Target string // "broker:name"
	Parked int64
	// NextDue is the earliest scheduled time of the target's messages (unix ms), 0 when
	// Targets' time ran out before it was found.
	NextDue int64
}

// Targets returns every target with parked messages, most parked first (then by name):
// the counts that park, ack, cancel and bulk keep per shard, summed, and each target's
// next due time, found by reading the shards together in scheduled order (as List) until
// every target was seen, all shards are through, or budget has passed. A shard whose
// counts are not marked complete (written by a version that kept none), or every shard
// with recount, is counted from its entries first (counts.lua: one script run per shard,
// ~3 us per entry). It changes nothing else and blocks until done, ctx is done, or a
// Redis call fails.
func (s *Store) Targets(ctx context.Context, recount bool, budget time.Duration) ([]TargetCount, error) {
	counts, err := s.targetCounts(ctx, recount)
	if err != nil {
		return nil, err
	}
	out := make([]TargetCount, 0, len(counts))
	for t, n := range counts {
		out = append(out, TargetCount{Target: t, Parked: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Parked != out[j].Parked {
			return out[i].Parked > out[j].Parked
		}
		return out[i].Target < out[j].Target
	})
	if err := s.nextDues(ctx, out, budget); err != nil {
		return nil, err
	}
	return out, nil
}

// targetCounts sums the shards' counts per target, counting first the shards whose
// counts are not complete (or all, with recount).
func (s *Store) targetCounts(ctx context.Context, recount bool) (map[string]int64, error) {
	if err := s.completeCounts(ctx, recount); err != nil {
		return nil, fmt.Errorf("targets: %w", err)
	}
	read := s.rdb.Pipeline()
	alls := make([]*redis.MapStringStringCmd, len(s.keys))
	for i := range s.keys {
		alls[i] = read.HGetAll(ctx, s.keys[i].n)
	}
	_, _ = read.Exec(ctx)
	sum := map[string]int64{}
	for i, c := range alls {
		fields, err := c.Result()
		if err != nil {
			return nil, fmt.Errorf("targets: read shard %d: %w", i, err)
		}
		for t, v := range fields {
			n, err := strconv.ParseInt(v, 10, 64)
			if t == "" || err != nil || n <= 0 {
				continue
			}
			sum[t] += n
		}
	}
	return sum, nil
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
		c := s.evalPipelined(ctx, s.counts, []call{{keys: []string{k.m, k.n}, args: []any{boolArg(recount)}}})[0]
		if err := c.Err(); err != nil {
			return fmt.Errorf("count shard %d: %w", i, err)
		}
	}
	return nil
}

// nextDues fills in the NextDue of targets: the first message of each in scheduled order
// (List over all shards, only the targets not seen yet matching), until all were seen,
// the shards are through, or budget has passed.
func (s *Store) nextDues(ctx context.Context, targets []TargetCount, budget time.Duration) error {
	missing := make(map[string]int, len(targets))
	for i, t := range targets {
		missing[t.Target] = i
	}
	deadline := time.Now().Add(budget)
	q := ListQuery{Match: func(target string) bool { _, ok := missing[target]; return ok }}
	for len(missing) > 0 {
		q.Limit = min(len(missing), 1000) // pages grow with what is still missing
		page, next, err := s.List(ctx, q, time.Until(deadline))
		if err != nil {
			return fmt.Errorf("targets: %w", err)
		}
		for _, l := range page {
			if i, ok := missing[l.Target]; ok {
				targets[i].NextDue = l.Scheduled
				delete(missing, l.Target)
			}
		}
		if next == nil || !time.Now().Before(deadline) {
			return nil
		}
		q.After = next
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
