package schedule

import (
	"math/bits"
	"time"

	"github.com/delaybridge/delaybridge/contract"
)

// Offset is the spread drawn for a message with window w (x-delay-window): whole
// milliseconds in [0, w] (w rounded down to the millisecond; <= 0: 0), uniform over
// messages, and a pure function of id and seed, so every replica, and a redelivery of the
// same source message, draws the same. seed is what fixes the occurrence: the due time
// (unix ms) as given, or for a relative delay its milliseconds (the moment it counts from
// is Redis's, which the caller does not know). Safe for concurrent use; no allocation.
func Offset(id string, seed int64, w time.Duration) int64 {
	span := w.Milliseconds()
	if span <= 0 {
		return 0
	}
	// FNV-1a over id, then seed folded in through the splitmix64 finalizer: every bit of
	// both moves every bit of the result.
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	h = mix(h ^ mix(uint64(seed)))
	// Lemire's multiply-shift maps h onto [0, span]; its bias (span+1)/2^64 is nil here.
	hi, _ := bits.Mul64(h, uint64(span)+1)
	return int64(hi)
}

// mix is the splitmix64 finalizer.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Spread is the time (unix ms) a message of id due at due (unix ms) is delivered at under
// the spread window w: due + Offset(id, due, w), in [due, due + w]. ok is false when due
// + w overflows int64 (never a wrapped time); the caller bounds it further (ingress: by
// contract.Horizon, the window's end at most BRIDGE_MAX_DELAY away).
func Spread(id string, due int64, w time.Duration) (at int64, ok bool) {
	if _, ok := contract.AddMillis(due, w.Truncate(time.Millisecond)); !ok {
		return 0, false
	}
	return due + Offset(id, due, w), true
}

// NextSpread is the next firing (unix ms, drawn: Spread) of a recurring message with
// spread window w after its firing due at due (the drawn time) ends, with floor after
// (unix ms; the caller's, as in Next). Each firing draws its own time in its own window.
// The occurrences stay on the schedule, never on the drawn times: an interval counts from
// anchor (the nominal time of the first firing: anchor + k x interval), a cron expression
// from its own times; so the spread never accumulates (anchor <= 0: the interval counts
// from due, as Next does). The next occurrence is the first
// after the drawn time due (and after): with a window longer than the schedule's
// interval, occurrences that fall before the previous firing's drawn time are left out
// (one firing per window, in order). 0 when there is none (or it would overflow).
func (e Every) NextSpread(id string, due, anchor, after int64, w time.Duration) int64 {
	from := due
	if e.cron == nil && anchor > 0 {
		from = anchor
	}
	next := e.Next(time.UnixMilli(from), time.UnixMilli(max(due, after)))
	if next.IsZero() {
		return 0
	}
	at, ok := Spread(id, next.UnixMilli(), w)
	if !ok {
		return 0
	}
	return at
}
