package contract

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Errors of [Horizon]: a due time computed from input is refused, never wrapped or clamped
// (docs/contract.md sections 1 and 8). Both are refusals of the request or message that
// gave the input (ReasonDelayTooLong at ingress, a 400 on the message API).
var (
	// ErrBeyondMaxDelay: the time lies more than BRIDGE_MAX_DELAY after now.
	ErrBeyondMaxDelay = errors.New("beyond the maximum delay")
	// ErrTimeOverflow: computing the time overflows int64 milliseconds.
	ErrTimeOverflow = errors.New("time overflows")
)

// Horizon is the one bound on every due time the bridge computes from input: x-delay and
// x-deliver-at at ingress (and their compatibility forms), deliver_at and shift of the
// message API's bulk reschedule, the end of a forecast, and a spread window's end
// (x-delay-window, ingress/intake). A due time may lie at most MaxDelay after Now; a
// computation that overflows, or lands beyond, is refused. A due time in the past is kept (the message is
// due at once, as an x-deliver-at in the past), but never before 1970: the store keeps
// unsigned unix milliseconds, so an earlier time is 0. Bulk changes apply the same rule
// in delaystore/lua/bulk.lua against the Redis time (the new due of each message).
// A Horizon is a value; its methods are pure and safe for concurrent use.
type Horizon struct {
	// Now is the time the bound counts from, unix ms (a clock before 1970 counts as 1970).
	Now int64
	// MaxDelay is the longest accepted distance from Now (BRIDGE_MAX_DELAY); <= 0 bounds
	// every due time at Now.
	MaxDelay time.Duration
}

// Latest is the latest due time the horizon accepts: Now + MaxDelay (whole milliseconds),
// saturating at math.MaxInt64.
func (h Horizon) Latest() int64 {
	now, ms := max(h.Now, 0), max(h.MaxDelay.Milliseconds(), 0)
	if now > math.MaxInt64-ms {
		return math.MaxInt64
	}
	return now + ms
}

// At bounds an absolute due time at (unix ms): more than MaxDelay after Now is an error
// wrapping [ErrBeyondMaxDelay]; a time before 1970 is 0 (due at once); else at itself.
func (h Horizon) At(at int64) (int64, error) {
	if at > h.Latest() {
		return 0, fmt.Errorf("%w: %s after now, the maximum is %s", ErrBeyondMaxDelay, span(at, h.Now), h.MaxDelay)
	}
	return max(at, 0), nil
}

// Delay bounds a relative delay (counted from Now): longer than MaxDelay is an error
// wrapping [ErrBeyondMaxDelay]; a negative delay is due now (0).
func (h Horizon) Delay(d time.Duration) (time.Duration, error) {
	if d > h.MaxDelay {
		return 0, fmt.Errorf("%w: %s, the maximum is %s", ErrBeyondMaxDelay, d, h.MaxDelay)
	}
	return max(d, 0), nil
}

// Shift is due (unix ms) moved by d, bounded by [Horizon.At]: d is counted in whole
// milliseconds, a positive one rounded up (never early); an overflow wraps
// [ErrTimeOverflow].
func (h Horizon) Shift(due int64, d time.Duration) (int64, error) {
	at, ok := AddMillis(due, d)
	if !ok {
		return 0, fmt.Errorf("%w: %d ms shifted by %s", ErrTimeOverflow, due, d)
	}
	return h.At(at)
}

// Span is the end of n steps of step ms from Now (a forecast's last bucket), bounded by
// [Horizon.Latest]: an overflow wraps [ErrTimeOverflow], an end beyond it
// [ErrBeyondMaxDelay]. step and n must be positive.
func (h Horizon) Span(step int64, n int) (int64, error) {
	if step <= 0 || n <= 0 {
		return 0, fmt.Errorf("%w: %d steps of %d ms", ErrTimeOverflow, n, step)
	}
	hi, total := bits.Mul64(uint64(step), uint64(n))
	if hi != 0 || total > math.MaxInt64 || h.Now > math.MaxInt64-int64(total) {
		return 0, fmt.Errorf("%w: %d steps of %d ms", ErrTimeOverflow, n, step)
	}
	return h.At(h.Now + int64(total))
}

// AddMillis is t (unix ms) + d in whole milliseconds, a positive d rounded up to the next
// millisecond and a negative one toward zero (both never early), and false when the sum
// overflows int64.
func AddMillis(t int64, d time.Duration) (int64, bool) {
	ms := d.Milliseconds()
	if d > 0 && d%time.Millisecond != 0 {
		ms++
	}
	if (ms > 0 && t > math.MaxInt64-ms) || (ms < 0 && t < math.MinInt64-ms) {
		return 0, false
	}
	return t + ms, true
}

// span is the distance from now to at (at > now) for an error text.
func span(at, now int64) string {
	if now < 0 && at > math.MaxInt64+now {
		return "more than " + time.Duration(math.MaxInt64).String()
	}
	ms := at - now
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return fmt.Sprintf("%d ms", ms)
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
