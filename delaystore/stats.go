package delaystore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fleet's counts (docs/design.md, "Fleet-wide view"): buckets of one minute and of one
// hour, hashes of field -> count under the fleet's hash tag, {P:fleet}:stats:1m:<unix s>
// and {P:fleet}:stats:1h:<unix s>, named by the bucket's start, never by input. Package
// admin decides what is counted, in which buckets and for how long; the delivery path
// never writes them.

// StatsBucket is one bucket of the fleet's counts.
type StatsBucket struct {
	// Step is the bucket's length: time.Minute, or time.Hour (any other is an hour's).
	Step time.Duration
	// Start is when the bucket begins, a multiple of Step.
	Start time.Time
	// Expires is when AddStats has the bucket expire (unused by ReadStats).
	Expires time.Time
}

// AddStats adds counts (field -> count; each field 1 to 100 bytes of the caller's own
// fixed names, never input; counts > 0) to both buckets and sets when each expires: one
// stats.lua call, one round trip, however many fields. On a full Redis the call is
// refused (an error): nothing was added. An error other than Redis answering one (a
// timeout) leaves it unknown whether the counts were added. It blocks until Redis
// answered or ctx is done; safe for concurrent use.
func (s *Store) AddStats(ctx context.Context, buckets [2]StatsBucket, counts map[string]int64) error {
	args := make([]any, 0, 2+2*len(counts))
	args = append(args, buckets[0].Expires.UnixMilli(), buckets[1].Expires.UnixMilli())
	for f, n := range counts {
		args = append(args, f, n)
	}
	keys := []string{s.statsKey(buckets[0]), s.statsKey(buckets[1])}
	if err := s.scripts[scriptStats].Run(ctx, s.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("add stats: %w", err)
	}
	return nil
}

// ReadStats returns the fields and counts of each bucket, aligned with buckets (an empty
// map for a bucket nobody added to, or that expired): one pipeline of HGETALL (one
// Cluster slot), one round trip. It blocks until Redis answered or ctx is done; safe for
// concurrent use.
func (s *Store) ReadStats(ctx context.Context, buckets []StatsBucket) ([]map[string]int64, error) {
	cmds := make([]*redis.MapStringStringCmd, len(buckets))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range buckets {
			cmds[i] = p.HGetAll(ctx, s.statsKey(b))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read stats: %w", err)
	}
	out := make([]map[string]int64, len(buckets))
	for i, c := range cmds {
		out[i] = make(map[string]int64, len(c.Val()))
		for f, v := range c.Val() {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("read stats: field %q of %s: %w", f, s.statsKey(buckets[i]), err)
			}
			out[i][f] = n
		}
	}
	return out, nil
}

// statsKey is the key of bucket b (time.Minute: 1m, else 1h).
func (s *Store) statsKey(b StatsBucket) string {
	kind := "1h:"
	if b.Step == time.Minute {
		kind = "1m:"
	}
	return s.statsPrefix + kind + strconv.FormatInt(b.Start.Unix(), 10)
}
