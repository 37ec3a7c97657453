package intake

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// MaxIDLen is the longest accepted x-delay-id, in bytes.
const MaxIDLen = 256

// Sentinel errors. Every error returned by this package's parsers wraps at least one of
// them (test with errors.Is); [Reason] maps them to a short machine code.
var (
	// ErrInvalidDelay: x-delay is malformed, negative, or overflows.
	ErrInvalidDelay = errors.New("invalid delay")
	// ErrInvalidDeliverAt: x-deliver-at is malformed or overflows.
	ErrInvalidDeliverAt = errors.New("invalid deliver-at")
	// ErrInvalidExpires: x-delay-expires is malformed, repeated, or not at least 1 ms.
	ErrInvalidExpires = errors.New("invalid expires")
	// ErrInvalidEvery: x-delay-every is repeated or not a schedule (internal/schedule).
	ErrInvalidEvery = errors.New("invalid every")
	// ErrInvalidWindow: x-delay-window is malformed, repeated, or longer than
	// contract.MaxWindow.
	ErrInvalidWindow = errors.New("invalid window")
	// ErrInvalidMaxWait: x-delay-max-wait is malformed, repeated, under a millisecond,
	// longer than the maximum delay, or given without x-delay-id or with x-delay-every.
	ErrInvalidMaxWait = errors.New("invalid max-wait")
	// ErrInvalidOrderingKey: x-delay-ordering-key is repeated, empty, longer than
	// contract.MaxOrderingKey, or given with x-delay-every.
	ErrInvalidOrderingKey = errors.New("invalid ordering key")
	// ErrConflictingSchedule: both x-delay and x-deliver-at.
	ErrConflictingSchedule = errors.New("conflicting schedule")
	// ErrDelayTooLong: the delay, or the distance to x-deliver-at, exceeds the maximum.
	ErrDelayTooLong = errors.New("delay too long")
	// ErrMissingTarget: no x-target, or an empty one.
	ErrMissingTarget = errors.New("missing target")
	// ErrInvalidTarget: the target is malformed, reserved, or not permitted. Every target
	// error wraps it, including the more specific ones below.
	ErrInvalidTarget = errors.New("invalid target")
	// ErrTargetLoop: the target is (or overlaps) one of the bridge's own subjects/topics.
	ErrTargetLoop = errors.New("target loops back to the bridge")
	// ErrTargetNotAllowed: the target matches no allow-list pattern.
	ErrTargetNotAllowed = errors.New("target not allowed")
	// ErrBrokerNotConfigured: the target's broker is not configured in this bridge.
	ErrBrokerNotConfigured = errors.New("broker not configured")
	// ErrInvalidID: x-delay-id is empty, too long, repeated, or has control characters.
	ErrInvalidID = errors.New("invalid id")
	// ErrPayloadTooLarge: the payload exceeds the maximum size.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrInvalidHeaders: too many headers, too many header bytes, a repeated or malformed
	// x-kafka-key or x-delay-hops, or (for a NATS target) a header NATS would alter.
	ErrInvalidHeaders = errors.New("invalid headers")
	// ErrQuotaExceeded: the store refused the message: its target's BRIDGE_TARGET_QUOTA
	// pattern is full (delaystore.Parked.OverQuota). Not a parse error: ingress wraps it.
	ErrQuotaExceeded = errors.New("quota exceeded")
)

// reasons is ordered from the most to the least specific: an error may wrap several
// sentinels (a target loop is also an invalid target).
var reasons = []struct {
	err  error
	code string
}{
	{ErrTargetLoop, contract.ReasonTargetLoop},
	{ErrTargetNotAllowed, contract.ReasonTargetNotAllowed},
	{ErrBrokerNotConfigured, contract.ReasonBrokerNotConfigured},
	{ErrMissingTarget, contract.ReasonMissingTarget},
	{ErrInvalidTarget, contract.ReasonInvalidTarget},
	{ErrConflictingSchedule, contract.ReasonConflictingSchedule},
	{ErrDelayTooLong, contract.ReasonDelayTooLong},
	{ErrInvalidExpires, contract.ReasonInvalidExpires},
	{ErrInvalidEvery, contract.ReasonInvalidEvery},
	{ErrInvalidWindow, contract.ReasonInvalidWindow},
	{ErrInvalidMaxWait, contract.ReasonInvalidMaxWait},
	{ErrInvalidOrderingKey, contract.ReasonInvalidOrderingKey},
	{ErrInvalidDelay, contract.ReasonInvalidDelay},
	{ErrInvalidDeliverAt, contract.ReasonInvalidDeliverAt},
	{ErrInvalidID, contract.ReasonInvalidID},
	{ErrPayloadTooLarge, contract.ReasonPayloadTooLarge},
	{ErrInvalidHeaders, contract.ReasonInvalidHeaders},
	{ErrQuotaExceeded, contract.ReasonQuotaExceeded},
}

// Reasons lists every code [Reason] can return for a non-nil error, contract.ReasonUnknown last.
func Reasons() []string {
	out := make([]string, 0, len(reasons)+1)
	for _, r := range reasons {
		out = append(out, r.code)
	}
	return append(out, contract.ReasonUnknown)
}

// Reason returns the short machine code of an error from this package's parsers
// ("invalid_delay", "target_loop", ...; see the Reason* constants), the most specific one
// when the error wraps several sentinels, and "unknown" for any other error. It returns
// "" for nil.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.code
		}
	}
	return contract.ReasonUnknown
}

// ValidateID checks an x-delay-id: non-empty, at most [MaxIDLen] bytes, valid UTF-8, free
// of control characters (C0, DEL, C1), not beginning or ending with a space, and neither
// "." nor "..". The last four rules go beyond the contract: the id is echoed in JSON replies
// and headers, where such bytes would be altered (NATS trims blanks around header values),
// and it is a segment of the API's URL paths (/v1/messages/{id}), where browsers and URL
// libraries remove a "." or ".." segment, even percent-encoded (%2E): the message could then
// no longer be addressed by its id. The error wraps [ErrInvalidID].
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalidID)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidID, len(id), MaxIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w %s: not valid UTF-8", ErrInvalidID, quote(id))
	case id[0] == ' ' || id[len(id)-1] == ' ':
		return fmt.Errorf("%w %s: begins or ends with a space", ErrInvalidID, quote(id))
	case id == "." || id == "..":
		return fmt.Errorf("%w %s: a URL path cannot address it (/v1/messages/%s is normalised away by browsers and URL libraries)", ErrInvalidID, quote(id), id)
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w %s: contains a control character", ErrInvalidID, quote(id))
		}
	}
	return nil
}

// Schedule is the parsed due time of a message: either a relative Delay (counted from the
// moment the bridge received the message) or, when Absolute, the unix-ms time At.
type Schedule struct {
	// Absolute selects At; otherwise Delay applies.
	Absolute bool
	// Delay is the relative delay, >= 0, when !Absolute.
	Delay time.Duration
	// At is the due time in unix milliseconds when Absolute, >= 0. It may lie in the
	// past (delivered at once).
	At int64
}

// ParseSchedule reads x-delay and x-deliver-at (names matched case-insensitively) from h.
// Neither header: due now (the zero Schedule). Both: error wrapping [ErrConflictingSchedule].
// Either one repeated (ambiguous): error wrapping [ErrInvalidDelay] or [ErrInvalidDeliverAt].
// Both are bounded by [contract.Horizon] (the one rule of every due time computed from
// input): a delay longer than maxDelay, or an x-deliver-at more than maxDelay after now,
// wraps [ErrDelayTooLong] (and contract.ErrBeyondMaxDelay); exactly maxDelay is accepted.
// An x-deliver-at in the past is accepted (due at once); one before 1970 is 1970 (At 0).
// now is only used for that bound. maxDelay should be > 0 (package config guarantees it);
// with maxDelay <= 0 only "due now" passes.
func ParseSchedule(h headers.List, maxDelay time.Duration, now time.Time) (Schedule, error) {
	delays := h.Values(contract.HeaderDelay)
	ats := h.Values(contract.HeaderDeliverAt)
	switch {
	case len(delays) > 0 && len(ats) > 0:
		return Schedule{}, fmt.Errorf("%w: both %s and %s given", ErrConflictingSchedule, contract.HeaderDelay, contract.HeaderDeliverAt)
	case len(delays) > 1:
		return Schedule{}, fmt.Errorf("%w: %s given %d times", ErrInvalidDelay, contract.HeaderDelay, len(delays))
	case len(ats) > 1:
		return Schedule{}, fmt.Errorf("%w: %s given %d times", ErrInvalidDeliverAt, contract.HeaderDeliverAt, len(ats))
	case len(delays) == 1:
		d, err := ParseDelay(delays[0])
		if err != nil {
			return Schedule{}, err
		}
		bound := contract.Horizon{Now: now.UnixMilli(), MaxDelay: maxDelay}
		if _, err := bound.Delay(d); err != nil {
			return Schedule{}, fmt.Errorf("%w: %s %s: %w (%w)", ErrDelayTooLong, contract.HeaderDelay, quote(delays[0]), err, ErrInvalidDelay)
		}
		return Schedule{Delay: d}, nil
	case len(ats) == 1:
		at, err := ParseDeliverAt(ats[0])
		if err != nil {
			return Schedule{}, err
		}
		bound := contract.Horizon{Now: now.UnixMilli(), MaxDelay: maxDelay}
		if at, err = bound.At(at); err != nil {
			return Schedule{}, fmt.Errorf("%w: %s %s: %w (%w)", ErrDelayTooLong, contract.HeaderDeliverAt, quote(ats[0]), err, ErrInvalidDeliverAt)
		}
		return Schedule{Absolute: true, At: at}, nil
	}
	return Schedule{}, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isDigits reports whether s is non-empty and all ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// parseUint parses ASCII digits (already checked) into a value <= limit; false when it
// exceeds limit.
func parseUint(s string, limit uint64) (uint64, bool) {
	var n uint64
	for i := 0; i < len(s); i++ {
		d := uint64(s[i] - '0')
		if n > (limit-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// hasSpace reports whether s contains whitespace or control characters (any encoding).
func hasSpace(s string) bool {
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// quote quotes s for an error message, shortened to a sane length.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}
