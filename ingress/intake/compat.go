package intake

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// Compatibility headers (lower case, matched case-insensitively like the native ones), so
// that producers written for NATS JetStream message schedules (ADR-51, nats-server 2.12)
// or for etf1/kafka-message-scheduler move to the bridge unchanged. Each maps onto the
// native contract; see [translateCompat] and docs/using.md, section "Migrating from NATS
// schedules or kafka-message-scheduler".
const (
	// HeaderNATSSchedule is NATS's schedule pattern: the one-shot "@at <RFC 3339>" form
	// stands for x-deliver-at, the repeating ones ("@every <duration>", cron expressions,
	// "@hourly"...) for x-delay-every.
	HeaderNATSSchedule = "nats-schedule"
	// HeaderNATSScheduleTarget is NATS's schedule target subject, as x-target.
	HeaderNATSScheduleTarget = "nats-schedule-target"
	// HeaderNATSScheduleSource (publish the latest message of another subject) is
	// refused. HeaderNATSScheduleTimeZone is the zone of a cron schedule (CRON_TZ= of
	// x-delay-every); refused with @at and @every, as NATS does.
	HeaderNATSScheduleSource   = "nats-schedule-source"
	HeaderNATSScheduleTimeZone = "nats-schedule-time-zone"
	// HeaderSchedulerEpoch is kafka-message-scheduler's due time in unix seconds, as
	// x-deliver-at.
	HeaderSchedulerEpoch = "scheduler-epoch"
	// HeaderSchedulerTargetTopic is kafka-message-scheduler's target topic, as x-target.
	HeaderSchedulerTargetTopic = "scheduler-target-topic"
	// HeaderSchedulerTargetKey is kafka-message-scheduler's key of the delivered record.
	HeaderSchedulerTargetKey = "scheduler-target-key"
)

// natsAtPrefix starts the only accepted Nats-Schedule form, as nats-server spells it.
const natsAtPrefix = "@at "

// compat is what a message's compatibility headers ask for, beyond the native headers
// translateCompat adds to the list.
type compat struct {
	// scheduler is set when scheduler-epoch or scheduler-target-topic is present: the
	// message is a kafka-message-scheduler schedule, whose record key is its identity.
	scheduler bool
	// key is the scheduler-target-key value when hasKey.
	key    string
	hasKey bool
}

// translateCompat returns h with the schedule and target given by compatibility headers
// added as the native x-deliver-at (unix ms) and x-target, and what else they ask for. The
// compatibility headers themselves stay in the list; [isDropped] removes them from the
// delivered message. h is not modified.
//
// A compatibility header is refused like the native header it stands for: given twice, or
// malformed, it wraps [ErrInvalidDeliverAt], [ErrInvalidTarget] or [ErrInvalidHeaders]; a
// due time given by more than one of x-delay, x-deliver-at, Nats-Schedule and
// scheduler-epoch wraps [ErrConflictingSchedule]; a target given by more than one of
// x-target, Nats-Schedule-Target and scheduler-target-topic wraps [ErrInvalidTarget];
// scheduler-target-key with x-kafka-key wraps [ErrInvalidHeaders].
func translateCompat(h headers.List) (headers.List, compat, error) {
	var c compat
	natsAt := h.Values(HeaderNATSSchedule)
	epochs := h.Values(HeaderSchedulerEpoch)
	natsTargets := h.Values(HeaderNATSScheduleTarget)
	topics := h.Values(HeaderSchedulerTargetTopic)
	keys := h.Values(HeaderSchedulerTargetKey)
	c.scheduler = len(epochs) > 0 || len(topics) > 0
	if len(h.Values(HeaderNATSScheduleSource)) > 0 {
		return nil, c, fmt.Errorf("%w: %s is not supported (the bridge delivers the message's own payload)", ErrInvalidHeaders, HeaderNATSScheduleSource)
	}
	if len(natsAt) == 0 && len(epochs) == 0 && len(natsTargets) == 0 && len(topics) == 0 && len(keys) == 0 {
		return h, c, nil
	}

	if n := countGiven(h, contract.HeaderDelay, contract.HeaderDeliverAt, HeaderNATSSchedule, HeaderSchedulerEpoch); n > 1 {
		return nil, c, fmt.Errorf("%w: the due time is given by more than one of %s", ErrConflictingSchedule,
			givenNames(h, contract.HeaderDelay, contract.HeaderDeliverAt, HeaderNATSSchedule, HeaderSchedulerEpoch))
	}
	if n := countGiven(h, contract.HeaderTarget, HeaderNATSScheduleTarget, HeaderSchedulerTargetTopic); n > 1 {
		return nil, c, &targetError{value: "", detail: "the target is given by more than one of " +
			givenNames(h, contract.HeaderTarget, HeaderNATSScheduleTarget, HeaderSchedulerTargetTopic)}
	}
	out := make(headers.List, len(h), len(h)+2)
	copy(out, h)
	at, err := compatDueTime(h, natsAt, epochs)
	if err != nil {
		return nil, c, err
	}
	if at != "" {
		out.Add(contract.HeaderDeliverAt, at)
	}
	every, err := compatEvery(h, natsAt)
	if err != nil {
		return nil, c, err
	}
	if every != "" {
		out.Add(contract.HeaderEvery, every)
	}
	if err := addCompatTarget(h, &out); err != nil {
		return nil, c, err
	}

	switch {
	case len(keys) > 1:
		return nil, c, fmt.Errorf("%w: %s given %d times", ErrInvalidHeaders, HeaderSchedulerTargetKey, len(keys))
	case len(keys) == 1:
		if len(h.Values(contract.HeaderKafkaKey)) > 0 {
			return nil, c, fmt.Errorf("%w: both %s and %s give the record key", ErrInvalidHeaders, HeaderSchedulerTargetKey, contract.HeaderKafkaKey)
		}
		c.key, c.hasKey = keys[0], true
	}
	return out, c, nil
}

// compatDueTime is the due time (unix ms, as x-deliver-at takes it) that Nats-Schedule
// (@at) or scheduler-epoch give, or "" when neither does.
func compatDueTime(h headers.List, natsAt, epochs []string) (string, error) {
	var at int64
	var err error
	switch {
	case len(natsAt) > 1:
		return "", fmt.Errorf("%w: %s given %d times", ErrInvalidDeliverAt, HeaderNATSSchedule, len(natsAt))
	case len(natsAt) == 1 && !strings.HasPrefix(natsAt[0], natsAtPrefix):
		return "", nil // a repeating schedule: compatEvery
	case len(natsAt) == 1:
		if len(h.Values(HeaderNATSScheduleTimeZone)) > 0 {
			return "", fmt.Errorf("%w: %s is not supported with @at (NATS refuses it too)", ErrInvalidDeliverAt, HeaderNATSScheduleTimeZone)
		}
		at, err = ParseNATSSchedule(natsAt[0])
	case len(epochs) > 1:
		return "", fmt.Errorf("%w: %s given %d times", ErrInvalidDeliverAt, HeaderSchedulerEpoch, len(epochs))
	case len(epochs) == 1:
		at, err = ParseSchedulerEpoch(epochs[0])
	default:
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(at, 10), nil
}

// compatEvery is the x-delay-every that a repeating Nats-Schedule gives ("@every <d>" ->
// "<d>"; a cron expression or descriptor with Nats-Schedule-Time-Zone <zone> -> "CRON_TZ=<zone>
// <expression>"), or "" when there is none. It is validated as x-delay-every is; errors
// wrap [ErrInvalidEvery].
func compatEvery(h headers.List, natsAt []string) (string, error) {
	if len(natsAt) != 1 || strings.HasPrefix(natsAt[0], natsAtPrefix) {
		return "", nil
	}
	if len(h.Values(contract.HeaderEvery)) > 0 {
		return "", fmt.Errorf("%w: both %s and a repeating %s given", ErrInvalidEvery, contract.HeaderEvery, HeaderNATSSchedule)
	}
	v, zones := natsAt[0], h.Values(HeaderNATSScheduleTimeZone)
	switch d, every := strings.CutPrefix(v, "@every "); {
	case len(zones) > 1:
		return "", fmt.Errorf("%w: %s given %d times", ErrInvalidEvery, HeaderNATSScheduleTimeZone, len(zones))
	case every && len(zones) > 0:
		return "", fmt.Errorf("%w: %s is not supported with @every (NATS refuses it too)", ErrInvalidEvery, HeaderNATSScheduleTimeZone)
	case every:
		return d, nil
	case len(zones) == 1 && strings.Contains(v, "TZ="):
		return "", fmt.Errorf("%w: %s %s names a zone, and %s gives one too", ErrInvalidEvery, HeaderNATSSchedule, quote(v), HeaderNATSScheduleTimeZone)
	case len(zones) == 1:
		return "CRON_TZ=" + zones[0] + " " + v, nil
	}
	return v, nil
}

// addCompatTarget adds to out the x-target that Nats-Schedule-Target or
// scheduler-target-topic give (at most one of them is present: checked before).
func addCompatTarget(h headers.List, out *headers.List) error {
	for _, name := range []string{HeaderNATSScheduleTarget, HeaderSchedulerTargetTopic} {
		vs := h.Values(name)
		switch {
		case len(vs) > 1:
			return &targetError{value: vs[0], detail: fmt.Sprintf("%s given %d times", name, len(vs))}
		case len(vs) == 1:
			if vs[0] == "" {
				return &targetError{kind: ErrMissingTarget, detail: name + " is empty"}
			}
			out.Add(contract.HeaderTarget, vs[0])
		}
	}
	return nil
}

// countGiven counts how many of names occur in h.
func countGiven(h headers.List, names ...string) int {
	n := 0
	for _, name := range names {
		if len(h.Values(name)) > 0 {
			n++
		}
	}
	return n
}

// givenNames lists those of names that occur in h, joined by " and ".
func givenNames(h headers.List, names ...string) string {
	var given []string
	for _, name := range names {
		if len(h.Values(name)) > 0 {
			given = append(given, name)
		}
	}
	return strings.Join(given, " and ")
}

// ParseNATSSchedule parses a one-shot Nats-Schedule value into unix milliseconds: "@at
// <RFC 3339>" (a single space after "@at", as nats-server reads it), with the strict RFC
// 3339 grammar of [ParseDeliverAt] (sub-millisecond times rounded up). The repeating forms
// are x-delay-every's (compatEvery), not this function's: they are refused here. Errors
// wrap [ErrInvalidDeliverAt].
func ParseNATSSchedule(s string) (int64, error) {
	if !strings.HasPrefix(s, natsAtPrefix) {
		return 0, fmt.Errorf("%w: %s %s: only the one-shot form \"@at <RFC 3339>\" is supported, not repeating schedules",
			ErrInvalidDeliverAt, HeaderNATSSchedule, quote(s))
	}
	v := s[len(natsAtPrefix):]
	if v == "" || isDigits(v) || hasSpace(v) {
		return 0, fmt.Errorf("%w: %s %s: %s", ErrInvalidDeliverAt, HeaderNATSSchedule, quote(s), rfc3339Form)
	}
	ms, detail := parseRFC3339Millis(v)
	if detail != "" {
		return 0, fmt.Errorf("%w: %s %s: %s", ErrInvalidDeliverAt, HeaderNATSSchedule, quote(s), detail)
	}
	return ms, nil
}

// maxEpochSeconds is the largest unix-seconds value whose milliseconds fit int64.
const maxEpochSeconds = math.MaxInt64 / 1000

// ParseSchedulerEpoch parses a scheduler-epoch value (kafka-message-scheduler: unix
// seconds, decimal) into unix milliseconds. ASCII digits only: no sign (a time before
// 1970 is no schedule anyone means), no fraction, no blanks; a value whose milliseconds
// overflow int64 is refused. Errors wrap [ErrInvalidDeliverAt].
func ParseSchedulerEpoch(s string) (int64, error) {
	if !isDigits(s) {
		return 0, fmt.Errorf("%w: %s %s: want unix seconds, ASCII digits only", ErrInvalidDeliverAt, HeaderSchedulerEpoch, quote(s))
	}
	sec, ok := parseUint(s, maxEpochSeconds)
	if !ok {
		return 0, fmt.Errorf("%w: %s %s: overflows (at most %d seconds)", ErrInvalidDeliverAt, HeaderSchedulerEpoch, quote(s), int64(maxEpochSeconds))
	}
	return int64(sec) * 1000, nil
}
