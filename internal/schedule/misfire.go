package schedule

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Misfire is what a recurring message does with the occurrences it missed
// (x-delay-misfire, docs/contract.md section 9). An occurrence is missed when it could
// not fire at its time: see [Every.Missed].
type Misfire uint8

const (
	// MisfireOnce (the default, as NATS schedules and Kubernetes CronJobs do): the missed
	// occurrences fire as one firing, due at the latest of them; the schedule goes on
	// from the next occurrence after now.
	MisfireOnce Misfire = iota
	// MisfireSkip: missed occurrences never fire; the schedule goes on from the next
	// occurrence after now.
	MisfireSkip
	// MisfireAll: each missed occurrence fires, oldest first, at most [MaxCatchUp] of them
	// (the latest; older ones are skipped).
	MisfireAll
)

// MaxCatchUp is the most missed occurrences that [MisfireAll] fires.
const MaxCatchUp = 100

// MisfireGrace is the longest an occurrence may wait for its firing before it counts as
// missed, for schedules whose next occurrence comes later than that (Quartz's default
// misfire threshold): an hourly message delivered 2 minutes late was missed; an every-1s
// one is missed as soon as its next occurrence is due.
const MisfireGrace = time.Minute

// ParseMisfire reads an x-delay-misfire value: "once", "skip" or "all" (any case,
// blanks around ignored); "" is the default, [MisfireOnce]. Errors wrap [ErrInvalid].
func ParseMisfire(s string) (Misfire, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "once":
		return MisfireOnce, nil
	case "skip":
		return MisfireSkip, nil
	case "all":
		return MisfireAll, nil
	}
	return MisfireOnce, fmt.Errorf("%w %q: a misfire policy is once (the default), skip or all", ErrInvalid, s)
}

// String is "once", "skip" or "all"; ParseMisfire(m.String()) is m.
func (m Misfire) String() string {
	switch m {
	case MisfireSkip:
		return "skip"
	case MisfireAll:
		return "all"
	}
	return "once"
}

// Missed reports whether the occurrence due, taken for delivery at now, was missed: now
// is at or after its deadline, the earlier of the schedule's next occurrence after due
// and due + [MisfireGrace]. A firing taken before its deadline is only late and fires as
// it is, whatever the policy.
func (e Every) Missed(due, now time.Time) bool {
	if now.Sub(due) >= MisfireGrace {
		return true
	}
	next := e.Next(due, due)
	return !next.IsZero() && !now.Before(next)
}

// CatchUp is what the firing of the occurrence due, taken for delivery at now, does under
// policy m: fire reports whether it is published at all, at is the occurrence it is
// published as (its x-delay-due; the schedule goes on from the first occurrence after
// at). Not missed (Missed): due itself. Missed, the missed occurrences are every
// occurrence from due up to now: MisfireOnce fires once, as the latest of them;
// MisfireSkip fires none (the caller parks the message for e.Next(due, now));
// MisfireAll fires the latest MaxCatchUp of them, oldest first (at is the oldest of
// those: the ones after it come due at once, one after the other). The search is
// bounded: arithmetic for an interval, at most MaxCatchUp backward searches of bounded
// steps for a cron expression.
func (e Every) CatchUp(due, now time.Time, m Misfire) (at time.Time, fire bool) {
	if !e.Missed(due, now) {
		return due, true
	}
	switch m {
	case MisfireSkip:
		return time.Time{}, false
	case MisfireAll:
		return e.latest(due, now, MaxCatchUp), true
	}
	return e.latest(due, now, 1), true
}

// latest is the oldest of the n latest occurrences in [due, now] (due counts as one,
// whether or not the schedule names it): due when there are n or fewer. n >= 1.
func (e Every) latest(due, now time.Time, n int) time.Time {
	if !now.After(due) {
		return due
	}
	if e.cron == nil {
		if e.interval <= 0 {
			return due
		}
		k := now.Sub(due)/e.interval - time.Duration(n-1) // now.Sub saturates: never wraps
		if k <= 0 {
			return due
		}
		return due.Add(k * e.interval)
	}
	at, before := due, now.Add(time.Nanosecond)
	for range n {
		p := e.prev(before, due)
		if p.IsZero() {
			return due
		}
		at, before = p, p
	}
	return at
}

// maxSearch bounds each phase of prev: doubling a window of a second reaches past any
// time a time.Time holds in 64 steps; narrowing halves the window or jumps an occurrence
// each step.
const maxSearch = 64

// prev is the latest occurrence of the cron expression strictly before x and strictly
// after floor, the zero time when none. It looks back in windows doubling from a second
// until one holds an occurrence (Next(x - w) < x), then narrows the window by halves:
// at most 3 x maxSearch calls of Next, whatever lies between floor and x.
func (e Every) prev(x, floor time.Time) time.Time {
	before := func(s time.Time) time.Time { // the first occurrence after s, when before x
		if n := e.cron.Next(s); !n.IsZero() && n.Before(x) {
			return n
		}
		return time.Time{}
	}
	// Invariant: no occurrence lies in (hi, x).
	lo, hi, w := time.Time{}, x, time.Second
	for range maxSearch {
		s := floor
		if span := x.Sub(floor); w < span && w <= math.MaxInt64/2 {
			s = x.Add(-w)
		}
		if lo = before(s); !lo.IsZero() || s.Equal(floor) {
			break
		}
		hi, w = s, 2*w
	}
	if lo.IsZero() || !lo.After(floor) {
		return time.Time{}
	}
	// lo is an occurrence before x: move it to the latest.
	for range 2 * maxSearch {
		n := before(lo)
		if n.IsZero() {
			return lo
		}
		lo = n
		if hi.Sub(lo) > time.Second {
			mid := lo.Add(hi.Sub(lo) / 2)
			if m := before(mid); !m.IsZero() {
				lo = m
			} else {
				hi = mid
			}
		}
	}
	return lo // not reached: the window is narrowed to a second within maxSearch steps
}
