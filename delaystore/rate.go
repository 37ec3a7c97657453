package delaystore

import (
	"context"
	"fmt"
	"time"
)

// Slots are publish slots of a rate-limited target that [Store.Reserve] handed out:
// Count slots at First + i x Interval, in Redis microseconds. Now is the Redis time of the
// call.
type Slots struct {
	Now, First int64
	Interval   int64
	Count      int
}

// At is slot i (Redis microseconds).
func (s Slots) At(i int) int64 { return s.First + int64(i)*s.Interval }

// Reserve hands out up to n publish slots of target, one per interval, shared by every
// replica (rate.lua, one hash field per target): the first is at the Redis time or after
// the last slot handed out, whichever is later, and none lies beyond now + horizon. It
// blocks until Redis answered or ctx is done. interval and horizon are rounded to the
// microsecond, interval to at least 1 us.
func (s *Store) Reserve(ctx context.Context, target string, n int, interval, horizon time.Duration) (Slots, error) {
	if n < 1 {
		return Slots{}, fmt.Errorf("reserve %s: %d slots", target, n)
	}
	iv := max(interval.Microseconds(), 1)
	res, err := s.scripts[scriptRate].Run(ctx, s.rdb, []string{s.rateKey}, target, n, iv, horizon.Microseconds()).Int64Slice()
	if err != nil {
		return Slots{}, fmt.Errorf("reserve %s: %w", target, err)
	}
	if len(res) != 3 {
		return Slots{}, fmt.Errorf("reserve %s: unexpected reply of %d values", target, len(res))
	}
	return Slots{Now: res[0], First: res[1], Interval: iv, Count: int(res[2])}, nil
}
