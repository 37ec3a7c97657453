package delaystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fleet's counts (docs/design.md, "Fleet-wide view") are kept in buckets of one minute
// and of one hour, hashes of field -> count under the fleet's hash tag:
// {P:fleet}:stats:1m:<unix s> and {P:fleet}:stats:1h:<unix s>, named by the bucket's start,
// never by input. A minute bucket expires MinuteStatsKept after its start, an hour bucket
// HourStatsKept after its start.
const (
	// MinuteStatsKept is how long a minute bucket lives from its start: the last hour of
	// minute buckets, and a margin.
	MinuteStatsKept = time.Hour + 2*time.Minute
	// HourStatsKept is how long an hour bucket lives from its start: the last 7 days of
	// hour buckets, and a margin.
	HourStatsKept = 7*24*time.Hour + 2*time.Hour
	// MaxStatsFields bounds the fields of one AddStats call.
	MaxStatsFields = 1000
	// MaxStatsField bounds the length of a field name, in bytes.
	MaxStatsField = 100
	// MaxStatsBuckets bounds the buckets of one ReadStats call.
	MaxStatsBuckets = 400
)

// AddStats adds counts (field -> count; a zero count is left out) to the minute and the
// hour bucket holding at, and sets when they expire. One script call (stats.lua), one round
// trip, however many fields; nothing when counts has none. A field must be 1 to
// MaxStatsField bytes, at most MaxStatsFields of them, and a count must not be negative:
// the fields are the caller's own fixed names (internal/fleetstats), never input. On a
// full Redis the call is refused (an error): nothing was added. An error other than Redis
// answering one (a timeout) leaves it unknown whether the counts were added. It blocks
// until Redis answered or ctx is done; safe for concurrent use.
func (s *Store) AddStats(ctx context.Context, at time.Time, counts map[string]int64) error {
	if len(counts) > MaxStatsFields {
		return fmt.Errorf("add stats: %d fields, more than %d", len(counts), MaxStatsFields)
	}
	args := make([]any, 2, 2+2*len(counts))
	for f, n := range counts {
		switch {
		case f == "" || len(f) > MaxStatsField:
			return fmt.Errorf("add stats: field of %d bytes: want 1 to %d", len(f), MaxStatsField)
		case n < 0:
			return fmt.Errorf("add stats: field %q: negative count %d", f, n)
		case n > 0:
			args = append(args, f, n)
		}
	}
	if len(args) == 2 {
		return nil
	}
	minute, hour := at.Truncate(time.Minute), at.Truncate(time.Hour)
	args[0] = minute.Add(MinuteStatsKept).UnixMilli()
	args[1] = hour.Add(HourStatsKept).UnixMilli()
	keys := []string{s.statsKey(time.Minute, minute), s.statsKey(time.Hour, hour)}
	if err := s.scripts[scriptStats].Run(ctx, s.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("add stats: %w", err)
	}
	return nil
}

// ReadStats returns n buckets of step (time.Minute or time.Hour) from the one holding
// from, oldest first: each the fields and counts added to it (an empty map for a bucket
// nobody added to, or that expired). n is 1 to MaxStatsBuckets. One pipeline of n HGETALL
// (one Cluster slot), one round trip. It blocks until Redis answered or ctx is done; safe
// for concurrent use.
func (s *Store) ReadStats(ctx context.Context, step time.Duration, from time.Time, n int) ([]map[string]int64, error) {
	if step != time.Minute && step != time.Hour {
		return nil, fmt.Errorf("read stats: step %s: want 1m or 1h", step)
	}
	if n < 1 || n > MaxStatsBuckets {
		return nil, fmt.Errorf("read stats: %d buckets: want 1 to %d", n, MaxStatsBuckets)
	}
	start := from.Truncate(step)
	cmds := make([]*redis.MapStringStringCmd, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGetAll(ctx, s.statsKey(step, start.Add(time.Duration(i)*step)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read stats: %w", err)
	}
	out := make([]map[string]int64, n)
	for i, c := range cmds {
		out[i] = make(map[string]int64, len(c.Val()))
		for f, v := range c.Val() {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("read stats: field %q of %s: %w", f, s.statsKey(step, start.Add(time.Duration(i)*step)), err)
			}
			out[i][f] = n
		}
	}
	return out, nil
}

// LiveMembers returns how many replicas of the fleet ({P:fleet}:members) are live at now
// (their time has not run out; an expired entry that no heartbeat removed yet is not
// counted). One ZCOUNT; it blocks until Redis answered or ctx is done.
func (s *Store) LiveMembers(ctx context.Context, now time.Time) (int64, error) {
	n, err := s.rdb.ZCount(ctx, s.fleetKeys[0], "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("live members: %w", err)
	}
	return n, nil
}

// statsKey is the key of the bucket of step (time.Minute: 1m, else 1h) starting at start.
func (s *Store) statsKey(step time.Duration, start time.Time) string {
	kind := "1h:"
	if step == time.Minute {
		kind = "1m:"
	}
	return s.statsPrefix + kind + strconv.FormatInt(start.Unix(), 10)
}
