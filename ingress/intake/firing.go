package intake

import (
	"errors"
	"fmt"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/schedule"
)

// ParseExpires reads x-delay-expires (name matched case-insensitively) from h: how long
// after its due time the message may still be delivered, in the x-delay grammar
// ([ParseDelay]), whole milliseconds, at least 1 ms. Absent: 0 (never expires). Repeated,
// malformed, zero or below a millisecond: an error wrapping [ErrInvalidExpires].
func ParseExpires(h headers.List) (time.Duration, error) {
	vs := h.Values(contract.HeaderExpires)
	switch len(vs) {
	case 0:
		return 0, nil
	case 1:
	default:
		return 0, fmt.Errorf("%w: %s given %d times", ErrInvalidExpires, contract.HeaderExpires, len(vs))
	}
	d, err := ParseDelay(vs[0])
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrInvalidExpires, contract.HeaderExpires, err)
	}
	d = d.Truncate(time.Millisecond)
	if d <= 0 {
		return 0, fmt.Errorf("%w: %s %s: must be at least 1ms (omit it for a message that never expires)", ErrInvalidExpires, contract.HeaderExpires, quote(vs[0]))
	}
	return d, nil
}

// ParseEvery reads x-delay-every (name matched case-insensitively) from h: the recurring
// schedule of the message ([schedule.Parse]: a Go duration of at least 1s, or a cron
// expression, optionally CRON_TZ=<zone> first). Absent: the zero Every (delivered once).
// Repeated or invalid: an error wrapping [ErrInvalidEvery]. A schedule that does not
// keep its firings within maxDelay (BRIDGE_MAX_DELAY) of now, an interval longer than it
// or a cron expression whose next occurrence after now lies beyond it
// ([schedule.Every.Within]), is invalid too.
func ParseEvery(h headers.List, maxDelay time.Duration, now time.Time) (schedule.Every, error) {
	vs := h.Values(contract.HeaderEvery)
	switch len(vs) {
	case 0:
		return schedule.Every{}, nil
	case 1:
	default:
		return schedule.Every{}, fmt.Errorf("%w: %s given %d times", ErrInvalidEvery, contract.HeaderEvery, len(vs))
	}
	e, err := schedule.Parse(vs[0], now)
	if err == nil {
		err = e.Within(now, maxDelay)
	}
	if err != nil {
		return schedule.Every{}, everyError{err}
	}
	return e, nil
}

// firstFiring sets the due time of a recurring message that gives none of its own
// (neither x-delay nor x-deliver-at): its schedule's first occurrence after now.
func firstFiring(req *delaystore.ParkRequest, h headers.List, every schedule.Every, now time.Time) {
	if every.IsZero() || len(h.Values(contract.HeaderDelay)) > 0 || len(h.Values(contract.HeaderDeliverAt)) > 0 {
		return
	}
	req.Absolute, req.At, req.Delay = true, every.First(now).UnixMilli(), 0
}

// ParseMisfire reads x-delay-misfire (name matched case-insensitively) from h: what the
// recurring message does with occurrences it missed ([schedule.ParseMisfire]: once,
// skip or all). Absent: [schedule.MisfireOnce]. Repeated, invalid, or given for a
// message that is not recurring (every is zero: x-delay-expires is what drops a late
// one-shot message): an error wrapping [ErrInvalidEvery].
func ParseMisfire(h headers.List, every schedule.Every) (schedule.Misfire, error) {
	vs := h.Values(contract.HeaderMisfire)
	switch {
	case len(vs) == 0:
		return schedule.MisfireOnce, nil
	case len(vs) > 1:
		return schedule.MisfireOnce, fmt.Errorf("%w: %s given %d times", ErrInvalidEvery, contract.HeaderMisfire, len(vs))
	case every.IsZero():
		return schedule.MisfireOnce, fmt.Errorf("%w: %s applies to recurring messages only (give %s; %s drops a late one-shot message)",
			ErrInvalidEvery, contract.HeaderMisfire, contract.HeaderEvery, contract.HeaderExpires)
	}
	m, err := schedule.ParseMisfire(vs[0])
	if err != nil {
		return schedule.MisfireOnce, fmt.Errorf("%w: %s: %w", ErrInvalidEvery, contract.HeaderMisfire, err)
	}
	return m, nil
}

// ParseWindow reads x-delay-window (name matched case-insensitively) from h: the spread
// window, in the x-delay grammar ([ParseDelay]), whole milliseconds, at most
// [contract.MaxWindow]. Absent, or under a millisecond ("0"): 0 (no spread). Repeated,
// malformed or longer: an error wrapping [ErrInvalidWindow].
func ParseWindow(h headers.List) (time.Duration, error) {
	vs := h.Values(contract.HeaderWindow)
	switch len(vs) {
	case 0:
		return 0, nil
	case 1:
	default:
		return 0, fmt.Errorf("%w: %s given %d times", ErrInvalidWindow, contract.HeaderWindow, len(vs))
	}
	d, err := ParseDelay(vs[0])
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrInvalidWindow, contract.HeaderWindow, err)
	}
	if d > contract.MaxWindow {
		return 0, fmt.Errorf("%w: %s %s: at most %s", ErrInvalidWindow, contract.HeaderWindow, quote(vs[0]), contract.MaxWindow)
	}
	return d.Truncate(time.Millisecond), nil
}

// ParseMaxWait reads x-delay-max-wait (name matched case-insensitively) from h: the
// bound of a debounced message, in the x-delay grammar ([ParseDelay]), whole
// milliseconds, at least 1 ms and at most maxDelay (BRIDGE_MAX_DELAY, as x-delay).
// Absent: 0 (no bound). Repeated, malformed, under a millisecond or longer: an error
// wrapping [ErrInvalidMaxWait]. Whether the message may carry one at all is
// [firing.checkMaxWait]'s.
func ParseMaxWait(h headers.List, maxDelay time.Duration) (time.Duration, error) {
	vs := h.Values(contract.HeaderMaxWait)
	switch len(vs) {
	case 0:
		return 0, nil
	case 1:
	default:
		return 0, fmt.Errorf("%w: %s given %d times", ErrInvalidMaxWait, contract.HeaderMaxWait, len(vs))
	}
	d, err := ParseDelay(vs[0])
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrInvalidMaxWait, contract.HeaderMaxWait, err)
	}
	if d > maxDelay {
		return 0, fmt.Errorf("%w: %s %s: at most BRIDGE_MAX_DELAY (%s)", ErrInvalidMaxWait, contract.HeaderMaxWait, quote(vs[0]), maxDelay)
	}
	d = d.Truncate(time.Millisecond)
	if d <= 0 {
		return 0, fmt.Errorf("%w: %s %s: must be at least 1ms", ErrInvalidMaxWait, contract.HeaderMaxWait, quote(vs[0]))
	}
	return d, nil
}

// checkMaxWait refuses an x-delay-max-wait on a message it cannot bound: one that
// replaces nothing (replace false: without x-delay-id, its id is its source's or a new
// one; a kafka-message-scheduler key acts as an x-delay-id), since only replacements are
// debounced, and a recurring one, whose firings egress schedules. The error wraps
// [ErrInvalidMaxWait].
func (f firing) checkMaxWait(replace bool) error {
	switch {
	case f.maxWait == 0:
		return nil
	case !replace:
		return fmt.Errorf("%w: %s bounds the replacements of a message with %s: give %s",
			ErrInvalidMaxWait, contract.HeaderMaxWait, contract.HeaderID, contract.HeaderID)
	case !f.every.IsZero():
		return fmt.Errorf("%w: %s applies to one-shot messages, not with %s",
			ErrInvalidMaxWait, contract.HeaderMaxWait, contract.HeaderEvery)
	}
	return nil
}

// spread draws the delivery time of a message with a spread window (x-delay-window) in
// [due, due + window] (schedule.Offset, a pure function of the id and the due time as
// given, sched: a redelivery of the source message draws the same) and fixes it in req: the
// store parks the drawn time as the due time. The window's end is bounded as the due
// time is ([contract.Horizon], maxDelay from now): beyond it wraps [ErrDelayTooLong]. A
// recurring message is made absolute (its first firing's due time, x-delay counted from
// now, is its Envelope.Anchor: an interval counts from it), as one without x-delay is
// (firstFiring); a one-shot relative delay stays relative to the Redis clock, the draw
// added to it.
func spread(req *delaystore.ParkRequest, sched Schedule, w, maxDelay time.Duration, now time.Time) error {
	if w <= 0 {
		return nil
	}
	bound := contract.Horizon{Now: now.UnixMilli(), MaxDelay: maxDelay}
	if req.Envelope.Every != "" && !req.Absolute {
		at, ok := contract.AddMillis(bound.Now, req.Delay)
		if !ok {
			return fmt.Errorf("%w: %w", ErrDelayTooLong, contract.ErrTimeOverflow)
		}
		req.Absolute, req.At, req.Delay = true, at, 0
	}
	if !req.Absolute {
		if _, err := bound.Delay(req.Delay + w); err != nil {
			return fmt.Errorf("%w: the end of the %s %s: %w", ErrDelayTooLong, contract.HeaderWindow, w, err)
		}
		req.Delay += time.Duration(schedule.Offset(req.ID, sched.Delay.Milliseconds(), w)) * time.Millisecond
		req.Envelope.Window = w
		return nil
	}
	end, ok := contract.AddMillis(req.At, w)
	if !ok {
		return fmt.Errorf("%w: the end of the %s %s: %w", ErrDelayTooLong, contract.HeaderWindow, w, contract.ErrTimeOverflow)
	}
	if _, err := bound.At(end); err != nil {
		return fmt.Errorf("%w: the end of the %s %s: %w", ErrDelayTooLong, contract.HeaderWindow, w, err)
	}
	if req.Envelope.Every != "" {
		req.Envelope.Anchor = max(req.At, 1)
	}
	req.At += schedule.Offset(req.ID, req.At, w)
	req.Envelope.Window = w
	return nil
}

// firing is what the firing-control headers say.
type firing struct {
	expires time.Duration
	every   schedule.Every
	misfire schedule.Misfire
	window  time.Duration
	maxWait time.Duration
}

// storedMisfire is the Envelope.Misfire of f: "" for the default (not stored).
func (f firing) storedMisfire() string {
	if f.misfire == schedule.MisfireOnce {
		return ""
	}
	return f.misfire.String()
}

// parseFiring reads the firing-control headers: x-delay-expires, x-delay-every (bounded
// by maxDelay), x-delay-misfire, x-delay-window and x-delay-max-wait (bounded by
// maxDelay).
func parseFiring(h headers.List, maxDelay time.Duration, now time.Time) (firing, error) {
	var f firing
	var err error
	if f.expires, err = ParseExpires(h); err != nil {
		return f, err
	}
	if f.window, err = ParseWindow(h); err != nil {
		return f, err
	}
	if f.maxWait, err = ParseMaxWait(h, maxDelay); err != nil {
		return f, err
	}
	if f.every, err = ParseEvery(h, maxDelay, now); err != nil {
		return f, err
	}
	f.misfire, err = ParseMisfire(h, f.every)
	return f, err
}

// everyError is an x-delay-every that internal/schedule refused: "invalid every <value>:
// <detail>", once (not "invalid every: x-delay-every: invalid schedule ..."). It wraps
// [ErrInvalidEvery] and the schedule's error.
type everyError struct{ err error }

func (e everyError) Error() string {
	var se *schedule.Error
	if !errors.As(e.err, &se) {
		return ErrInvalidEvery.Error() + ": " + e.err.Error()
	}
	return fmt.Sprintf("%s %s: %s", ErrInvalidEvery, quote(se.Text), se.Detail)
}

func (e everyError) Unwrap() []error { return []error{ErrInvalidEvery, e.err} }
