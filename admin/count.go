package admin

import (
	"context"
	"fmt"
	"math"
	"time"
)

// countScanMax is the most messages Count reads to count a selector with both a target
// and a due range exactly: about what one page of the listing reads (listMax in the API).
// A range holding more is estimated.
const countScanMax = 1000

// Count returns how many parked messages the selector of q (Match, Literals, From, To;
// Limit and After are ignored) picks, and whether the number is exact. It is exact, and
// costs no scan, without a due range (the per-target counts, summed over the targets
// Match accepts) or without a target (one ZCOUNT per shard). With both it reads the due
// range when it holds at most countScanMax messages and the reading ends within budget;
// otherwise the number is an estimate: the range's count times the share of the parked
// messages whose targets Match accepts. The counts are not one snapshot across shards.
// It changes nothing and blocks until done, ctx is done, or a Redis call fails.
func (a *Admin) Count(ctx context.Context, q ListQuery, budget time.Duration) (n int64, exact bool, err error) {
	ranged := q.From != 0 || q.To != 0
	var matched, total int64
	if q.Match != nil || !ranged {
		if matched, total, err = a.countTargets(ctx, q.Match); err != nil || !ranged {
			return matched, err == nil, err
		}
	}
	to := q.To
	if to == 0 {
		to = math.MaxInt64
	}
	inRange, err := a.store.CountScheduled(ctx, q.From, to)
	if err != nil || q.Match == nil {
		return inRange, err == nil, err
	}
	if inRange <= countScanMax {
		scan := q
		scan.Limit, scan.After = int(inRange)+1, nil
		page, next, err := a.List(ctx, scan, budget)
		if err != nil {
			return 0, false, fmt.Errorf("count: %w", err)
		}
		if next == nil {
			return int64(len(page)), true, nil
		}
	}
	if total == 0 {
		return 0, false, nil
	}
	return int64(math.Round(float64(inRange) * float64(matched) / float64(total))), false, nil
}

// countTargets sums the per-target counts: of the targets match accepts (nil: all), and
// of all.
func (a *Admin) countTargets(ctx context.Context, match func(string) bool) (matched, total int64, err error) {
	perShard, err := a.store.ParkedByTarget(ctx, false)
	if err != nil {
		return 0, 0, fmt.Errorf("count: %w", err)
	}
	for _, shard := range perShard {
		for t, n := range shard {
			total += n
			if match == nil || match(t) {
				matched += n
			}
		}
	}
	return matched, total, nil
}
