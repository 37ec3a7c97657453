// Package backoff is the one home of delaybridge's retry policy: the waits (exponential,
// doubling from a minimum to a cap: Exp, Backoff, Sleep), how a run of failures is logged
// (Streak: Warn once, Debug after, Info on recovery), and Retry, the retry loop with both
// built in, which every "try until it works" loop of the bridge uses.
package backoff

import (
	"context"
	"time"
)

// Exp is the wait before attempt n (n >= 1): min, doubled for every attempt after the
// first, capped at max.
func Exp(min, max time.Duration, n int) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return clamp(d, min, max)
}

func clamp(d, min, max time.Duration) time.Duration {
	if d > max {
		return max
	}
	if d < min {
		return min
	}
	return d
}

// Backoff is the state of one retry loop: Next returns Min, then twice the last wait, up
// to Max, until Reset. Not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	n        int
}

// Next returns the wait before the next try and counts the failure.
func (b *Backoff) Next() time.Duration {
	b.n++
	return Exp(b.Min, b.Max, b.n)
}

// Failing reports whether a failure was counted since the last Reset (a loop logs the
// first failure of a streak loudly and the rest quietly).
func (b *Backoff) Failing() bool { return b.n > 0 }

// Reset starts over at Min after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d or until ctx ends; it reports whether the whole wait passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
