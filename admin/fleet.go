package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// The fleet's counts (docs/design.md, "Fleet-wide view"): every replica adds its counts
// of the last few seconds (internal/fleetstats) to the bucket of the minute and the bucket
// of the hour that hold them (delaystore.Store.AddStats); GET /v1/overview?scope=fleet
// reads the last hour of minutes and the last 7 days of hours. A minute bucket expires
// MinuteStatsKept after its start, an hour bucket HourStatsKept after its start.
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
// hour bucket holding at, and sets when they expire. One script call, one round trip,
// however many fields; nothing when counts has none. A field must be 1 to MaxStatsField
// bytes, at most MaxStatsFields of them, and a count must not be negative: the fields are
// the caller's own fixed names (internal/fleetstats), never input. On a full Redis the
// call is refused (an error): nothing was added. An error other than Redis answering one
// (a timeout) leaves it unknown whether the counts were added. It blocks until Redis
// answered or ctx is done; safe for concurrent use.
func (a *Admin) AddStats(ctx context.Context, at time.Time, counts map[string]int64) error {
	if len(counts) > MaxStatsFields {
		return fmt.Errorf("add stats: %d fields, more than %d", len(counts), MaxStatsFields)
	}
	add := make(map[string]int64, len(counts))
	for f, n := range counts {
		switch {
		case f == "" || len(f) > MaxStatsField:
			return fmt.Errorf("add stats: field of %d bytes: want 1 to %d", len(f), MaxStatsField)
		case n < 0:
			return fmt.Errorf("add stats: field %q: negative count %d", f, n)
		case n > 0:
			add[f] = n
		}
	}
	if len(add) == 0 {
		return nil
	}
	minute, hour := at.Truncate(time.Minute), at.Truncate(time.Hour)
	return a.store.AddStats(ctx, [2]delaystore.StatsBucket{
		{Step: time.Minute, Start: minute, Expires: minute.Add(MinuteStatsKept)},
		{Step: time.Hour, Start: hour, Expires: hour.Add(HourStatsKept)},
	}, add)
}

// ReadStats returns n buckets of step (time.Minute or time.Hour) from the one holding
// from, oldest first: each the fields and counts added to it (an empty map for a bucket
// nobody added to, or that expired). n is 1 to MaxStatsBuckets. One pipeline of n HGETALL
// (one Cluster slot), one round trip. It blocks until Redis answered or ctx is done; safe
// for concurrent use.
func (a *Admin) ReadStats(ctx context.Context, step time.Duration, from time.Time, n int) ([]map[string]int64, error) {
	if step != time.Minute && step != time.Hour {
		return nil, fmt.Errorf("read stats: step %s: want 1m or 1h", step)
	}
	if n < 1 || n > MaxStatsBuckets {
		return nil, fmt.Errorf("read stats: %d buckets: want 1 to %d", n, MaxStatsBuckets)
	}
	start := from.Truncate(step)
	buckets := make([]delaystore.StatsBucket, n)
	for i := range buckets {
		buckets[i] = delaystore.StatsBucket{Step: step, Start: start.Add(time.Duration(i) * step)}
	}
	return a.store.ReadStats(ctx, buckets)
}

// LiveMembers returns how many replicas of the fleet are live at now: the store's
// membership (delaystore.Store.LiveMembers), which the fleet overview shows beside the
// counts. One ZCOUNT; it blocks until Redis answered or ctx is done.
func (a *Admin) LiveMembers(ctx context.Context, now time.Time) (int64, error) {
	return a.store.LiveMembers(ctx, now)
}
