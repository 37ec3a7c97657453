// Package schedule is the one home of recurring schedules (x-delay-every, `every` in the
// message API, Nats-Schedule's repeating forms): their grammar, validation and the next
// occurrence. Cron expressions are parsed and stepped by github.com/netresearch/go-cron,
// the maintained fork of robfig/cron (the parser Kubernetes CronJob uses, unmaintained
// since 2020): the same grammar, CRON_TZ= prefix and descriptors, with the fork's fixes,
// among them that a fixed time skipped by a daylight-saving jump still fires. On top of
// it, [Every.Next] keeps a fixed-time schedule from firing twice in the hour a
// fall-back repeats, as ISC (Vixie) cron does; see its doc.
package schedule

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	cron "github.com/netresearch/go-cron"
)

// MinInterval is the shortest interval of a duration schedule (as NATS's @every).
const MinInterval = time.Second

// horizon bounds the search for a cron expression's first occurrence: one that has none
// within it (30 February) is refused.
const horizon = 5 * 366 * 24 * time.Hour

// maxRepeats bounds the occurrences Next skips in a repeated hour (one per second of
// the repeated span of a list such as "0-59 0-59 1 * * *").
const maxRepeats = 3600

// ErrInvalid is wrapped by every error of [Parse].
var ErrInvalid = errors.New("invalid schedule")

// Error is why [Parse] refused a schedule: "invalid schedule <text>: <detail>". It wraps
// [ErrInvalid]; a caller that names the schedule its own way (ingress: "invalid every")
// words it from Text and Detail, so that the message says "invalid" once.
type Error struct {
	// Text is the schedule as given.
	Text string
	// Detail says why it was refused.
	Detail string
}

func (e *Error) Error() string { return fmt.Sprintf("%s %q: %s", ErrInvalid, e.Text, e.Detail) }

// Unwrap returns [ErrInvalid].
func (e *Error) Unwrap() error { return ErrInvalid }

// want is what Parse takes, for its errors.
const want = "want a Go duration (30s, 1h) or a cron expression (0 9 * * 1-5, optionally CRON_TZ=Europe/Berlin first)"

func invalid(s, format string, args ...any) error {
	return &Error{Text: s, Detail: fmt.Sprintf(format, args...)}
}

// parser reads cron expressions of 5 fields (minute hour day-of-month month
// day-of-week), or 6 with seconds first (as NATS writes them), the descriptors @hourly,
// @daily, @midnight, @weekly, @monthly, @yearly and @annually, each optionally prefixed
// "CRON_TZ=<IANA zone> " (or "TZ=<zone> "); Parse refuses the machine's zone (Local).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Every is a parsed recurring schedule: a fixed interval, or a cron expression.
type Every struct {
	text     string
	interval time.Duration
	cron     cron.Schedule
	// loc is the cron expression's zone (CRON_TZ=, else UTC); fixed is set when its
	// minute and hour fields are literal (no * or /): a fixed time of day.
	loc   *time.Location
	fixed bool
}

// Parse reads a recurring schedule: a Go duration of at least [MinInterval] ("30s", "1h";
// "@every 30s" is read the same), or a cron expression (see parser) that fires at least
// once in the five years after now. Leading and trailing blanks are ignored. Errors wrap
// [ErrInvalid].
func Parse(s string, now time.Time) (Every, error) {
	text := strings.TrimSpace(s)
	if text == "" {
		return Every{}, invalid(s, "empty")
	}
	if d, ok := strings.CutPrefix(text, "@every "); ok {
		return parseInterval(strings.TrimSpace(d), s)
	}
	if !strings.ContainsAny(text, " \t") && !strings.HasPrefix(text, "@") {
		return parseInterval(text, s) // one word: a duration, or nothing
	}
	if zone, ok := machineZone(text); ok {
		return Every{}, invalid(s, "%s is the zone of the machine that reads it, which may differ between replicas: "+
			"name an IANA zone (CRON_TZ=Europe/Berlin), or leave it out for UTC", zone)
	}
	sched, err := parser.Parse(text)
	if err != nil {
		return Every{}, invalid(s, "%s: %v", want, err)
	}
	if _, ok := sched.(cron.ConstantDelaySchedule); ok {
		return Every{}, invalid(s, "@every takes a duration")
	}
	if next := sched.Next(now); next.IsZero() || next.Sub(now) > horizon {
		return Every{}, invalid(s, "never fires")
	}
	e := Every{text: text, cron: sched, loc: time.UTC, fixed: fixedTime(text)}
	if spec, ok := sched.(*cron.SpecSchedule); ok && spec.Location != nil {
		e.loc = spec.Location
	}
	return e, nil
}

// machineZone reports whether a cron expression's CRON_TZ= (or TZ=) names the zone of the
// machine rather than an IANA zone: Local (Go's name for it) or localtime (a link to
// /etc/localtime in Debian's zone files), in any case; it returns the prefix as given.
func machineZone(text string) (string, bool) {
	f := strings.Fields(text)
	if len(f) == 0 {
		return "", false
	}
	for _, prefix := range []string{"CRON_TZ=", "TZ="} {
		if z, ok := strings.CutPrefix(f[0], prefix); ok && (strings.EqualFold(z, "Local") || strings.EqualFold(z, "localtime")) {
			return f[0], true
		}
	}
	return "", false
}

// fixedTime reports whether a cron expression names fixed times of day: its minute and
// hour fields (and seconds, with six fields) are free of "*" and "/", or it is a
// descriptor other than @hourly. ISC cron calls the others wildcard jobs: they follow
// real time through a daylight-saving change.
func fixedTime(text string) bool {
	f := strings.Fields(text)
	if len(f) > 0 && (strings.HasPrefix(f[0], "CRON_TZ=") || strings.HasPrefix(f[0], "TZ=")) {
		f = f[1:]
	}
	if len(f) == 1 {
		return f[0] != "@hourly"
	}
	n := 2
	if len(f) == 6 {
		n = 3
	}
	for _, field := range f[:min(n, len(f))] {
		if strings.ContainsAny(field, "*/?") {
			return false
		}
	}
	return true
}

func parseInterval(d, s string) (Every, error) {
	iv, err := time.ParseDuration(d)
	if err != nil {
		return Every{}, invalid(s, "%s", want) // time's error would quote s again
	}
	if iv < MinInterval {
		return Every{}, invalid(s, "the interval must be at least %s", MinInterval)
	}
	return Every{text: iv.String(), interval: iv}, nil
}

// Within returns an error wrapping [ErrInvalid] when e cannot keep every firing within
// maxDelay of its time (BRIDGE_MAX_DELAY, docs/contract.md section 9): an interval longer
// than maxDelay, or a cron expression whose next occurrence after now lies more than
// maxDelay after now (0 0 29 2 * in a year whose February has no 29th). nil for the zero
// Every. A cron expression that passes may still have a later gap longer than maxDelay
// (29 February fires, and the next lies four years on): egress ends such a schedule with
// the firing before the gap (docs/using.md, "Recurring messages").
func (e Every) Within(now time.Time, maxDelay time.Duration) error {
	switch {
	case e.IsZero():
		return nil
	case e.cron == nil && e.interval > maxDelay:
		return invalid(e.text, "the interval is longer than BRIDGE_MAX_DELAY (%s)", maxDelay)
	case e.cron != nil:
		if next := e.cron.Next(now); next.IsZero() || next.Sub(now) > maxDelay {
			return invalid(e.text, "its next occurrence (%s) lies more than BRIDGE_MAX_DELAY (%s) from now",
				next.UTC().Format(time.RFC3339), maxDelay)
		}
	}
	return nil
}

// String is the schedule as stored with a message: the interval as a Go duration, or the
// cron expression as given (trimmed). Parse(e.String(), now) is e.
func (e Every) String() string { return e.text }

// IsZero reports whether e is the zero Every (no schedule).
func (e Every) IsZero() bool { return e.text == "" }

// First is the first occurrence after now of a message that gives no due time of its
// own: now + the interval, or the cron expression's next time after now.
func (e Every) First(now time.Time) time.Time {
	if e.cron != nil {
		return e.cron.Next(now)
	}
	return now.Add(e.interval)
}

// Next is the first occurrence of the schedule strictly after both due (the due time of
// a firing) and after (the caller's floor: due itself to fire every occurrence, a later
// time to skip the ones before it). An interval counts from due (due + k x interval), so
// a late firing does not shift the ones after it. For a fixed-time cron expression
// (fixedTime) an occurrence whose wall-clock time in the schedule's zone is not after
// due's is skipped: the second pass of a repeated fall-back hour (ISC cron: "if the time
// has moved backwards, jobs that fall into the repeated time will not be re-run"). The
// zero time when none exists (also when after lies more than a time.Duration beyond due:
// the occurrence is never computed by a product that wraps).
func (e Every) Next(due, after time.Time) time.Time {
	if due.After(after) {
		after = due
	}
	if e.cron != nil {
		next := e.cron.Next(after)
		if e.fixed {
			prev := wallClock(due, e.loc)
			for range maxRepeats {
				if next.IsZero() || wallClock(next, e.loc).After(prev) {
					break
				}
				next = e.cron.Next(next)
			}
		}
		return next
	}
	if e.interval <= 0 {
		return time.Time{}
	}
	k := after.Sub(due)/e.interval + 1
	if k > math.MaxInt64/e.interval || after.Sub(due) == math.MaxInt64 {
		return time.Time{} // beyond what a Duration holds: none, never a wrapped time
	}
	return due.Add(k * e.interval)
}

// wallClock is the local date and time of t in loc, as a UTC time to compare.
func wallClock(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}
