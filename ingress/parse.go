package ingress

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/delaybridge/delaybridge/internal/contract"
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
	{ErrInvalidDelay, contract.ReasonInvalidDelay},
	{ErrInvalidDeliverAt, contract.ReasonInvalidDeliverAt},
	{ErrInvalidID, contract.ReasonInvalidID},
	{ErrPayloadTooLarge, contract.ReasonPayloadTooLarge},
	{ErrInvalidHeaders, contract.ReasonInvalidHeaders},
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
// of control characters (C0, DEL, C1), and not beginning or ending with a space. The last
// three rules go beyond the contract: the id is echoed in JSON replies and headers, where such
// bytes would be altered (NATS trims blanks around header values), and the message could
// then no longer be addressed by its id. The error wraps [ErrInvalidID].
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
	// At is the due time in unix milliseconds when Absolute. It may lie in the past
	// (delivered at once).
	At int64
}

// ParseSchedule reads x-delay and x-deliver-at (names matched case-insensitively) from h.
// Neither header: due now (the zero Schedule). Both: error wrapping [ErrConflictingSchedule].
// Either one repeated (ambiguous): error wrapping [ErrInvalidDelay] or [ErrInvalidDeliverAt].
// A delay longer than maxDelay, or an x-deliver-at more than
// maxDelay after now, wraps [ErrDelayTooLong]; exactly maxDelay is accepted. An
// x-deliver-at in the past is accepted. now is only used for that bound. maxDelay should
// be > 0 (package config guarantees it); with maxDelay <= 0 only "due now" passes.
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
		if d > maxDelay {
			return Schedule{}, fmt.Errorf("%w: %s %s exceeds the maximum %s (%w)", ErrDelayTooLong, contract.HeaderDelay, quote(delays[0]), maxDelay, ErrInvalidDelay)
		}
		return Schedule{Delay: d}, nil
	case len(ats) == 1:
		at, err := ParseDeliverAt(ats[0])
		if err != nil {
			return Schedule{}, err
		}
		nowMs := now.UnixMilli()
		maxMs := maxDelay.Milliseconds()
		limit := int64(math.MaxInt64)
		if maxMs < 0 || nowMs <= math.MaxInt64-maxMs {
			limit = nowMs + maxMs
		}
		if at > limit {
			return Schedule{}, fmt.Errorf("%w: %s %s is more than %s ahead (%w)", ErrDelayTooLong, contract.HeaderDeliverAt, quote(ats[0]), maxDelay, ErrInvalidDeliverAt)
		}
		return Schedule{Absolute: true, At: at}, nil
	}
	return Schedule{}, nil
}

// maxDelayMs is the largest millisecond count that fits a time.Duration.
const maxDelayMs = math.MaxInt64 / int64(time.Millisecond)

// ParseDelay parses the x-delay grammar (also the HTTP API's "delay"). Accepted, with no
// whitespace anywhere and no sign:
//
//   - integer milliseconds: ASCII digits only ("1500", "0", leading zeros allowed), as
//     RabbitMQ's delayed-message exchange;
//   - a Go duration as time.ParseDuration reads it ("1500ms", "30s", "1h30m", "1.5h",
//     ".5s"; units ns, us, µs, ms, s, m, h);
//   - an ISO-8601 duration "P[nW][nD][T[nH][nM][nS]]" with upper-case designators
//     ("PT30S", "P1DT2H", "P2W", "P1W2D"), components in that order, each at most once,
//     at least one; a fraction with "." or "," only on the last component ("PT0.5S",
//     "PT1,5S", "P1.5D"). Years and months are rejected (their length is ambiguous).
//
// A leading "-" is a negative delay and is rejected, as is "+". Anything that overflows
// time.Duration is rejected, never wrapped. Fractions are truncated to the nanosecond.
// The result is >= 0. Errors wrap [ErrInvalidDelay].
func ParseDelay(s string) (time.Duration, error) {
	if s == "" {
		return 0, delayError(s, "empty")
	}
	switch s[0] {
	case '-':
		return 0, delayError(s, "negative delay (no sign allowed)")
	case '+':
		return 0, delayError(s, "no sign allowed")
	}
	d, detail := parseDelay(s)
	if detail != "" {
		return 0, delayError(s, detail)
	}
	return d, nil
}

func delayError(s, detail string) error {
	return fmt.Errorf("%w %s: %s", ErrInvalidDelay, quote(s), detail)
}

const delayForms = "want integer milliseconds (1500), a Go duration (1500ms, 1h30m) or an ISO-8601 duration (PT30S, P1DT2H)"

// parseDelay parses an unsigned delay; detail is non-empty on failure.
func parseDelay(s string) (d time.Duration, detail string) {
	if isDigits(s) {
		ms, ok := parseUint(s, uint64(maxDelayMs))
		if !ok {
			return 0, "overflows: at most " + strconv.FormatInt(maxDelayMs, 10) + " ms"
		}
		return time.Duration(ms) * time.Millisecond, ""
	}
	if hasSpace(s) {
		return 0, "whitespace is not allowed"
	}
	switch s[0] {
	case 'P':
		return parseISODuration(s)
	case 'p':
		return 0, "ISO-8601 designators must be upper case (PT30S)"
	}
	if !isGoDuration(s) {
		switch c := s[len(s)-1]; {
		case isDigit(s[0]) && (c == 'd' || c == 'D') && isDigits(s[:len(s)-1]):
			return 0, "Go durations have no day unit: use 24h or P1D"
		case isDigit(s[0]) && strings.IndexByte("WDHMS", c) >= 0:
			return 0, "ISO-8601 durations start with P (PT30S)"
		}
		return 0, delayForms
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		// The syntax is right, so the value is out of range.
		return 0, "overflows: at most " + time.Duration(math.MaxInt64).String()
	}
	return d, ""
}

// isGoDuration reports whether s is an unsigned Go duration syntactically:
// one or more of [digits][.digits] followed by a unit, with a digit on either side of
// the dot.
func isGoDuration(s string) bool {
	if s == "" {
		return false
	}
	for s != "" {
		i := 0
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		pre := i > 0
		post := false
		if i < len(s) && s[i] == '.' {
			i++
			j := i
			for i < len(s) && isDigit(s[i]) {
				i++
			}
			post = i > j
		}
		if !pre && !post {
			return false
		}
		s = s[i:]
		n := goUnitLen(s)
		if n == 0 {
			return false
		}
		s = s[n:]
	}
	return true
}

// goUnitLen returns the length of the Go duration unit s starts with, or 0.
func goUnitLen(s string) int {
	for _, u := range [...]string{"ns", "us", "µs", "μs", "ms", "s", "m", "h"} {
		// "ms" before "m" and "s"; the longest unit that matches wins.
		if strings.HasPrefix(s, u) {
			return len(u)
		}
	}
	return 0
}

// ISO-8601 components in their required order.
const (
	isoWeek = iota + 1
	isoDay
	isoHour
	isoMinute
	isoSecond
)

var isoUnit = [...]uint64{
	isoWeek:   uint64(7 * 24 * time.Hour),
	isoDay:    uint64(24 * time.Hour),
	isoHour:   uint64(time.Hour),
	isoMinute: uint64(time.Minute),
	isoSecond: uint64(time.Second),
}

// parseISODuration parses "P...": see ParseDelay. s[0] == 'P'.
func parseISODuration(s string) (time.Duration, string) {
	rest := s[1:]
	inTime, fraction := false, false
	last, n := 0, 0
	var total uint64
	for rest != "" {
		if rest[0] == 'T' {
			switch {
			case inTime:
				return 0, "ISO-8601: T given twice"
			case fraction:
				return 0, "ISO-8601: a fraction is allowed only on the last component"
			}
			inTime = true
			rest = rest[1:]
			if rest == "" {
				return 0, "ISO-8601: T without a time component"
			}
			continue
		}
		if fraction {
			return 0, "ISO-8601: a fraction is allowed only on the last component"
		}
		whole, frac, after, problem := isoNumber(rest)
		if problem != "" {
			return 0, problem
		}
		fraction = frac != ""
		comp, problem := isoDesignator(after[0], inTime)
		if problem != "" {
			return 0, problem
		}
		rest = after[1:]
		if comp <= last {
			return 0, "ISO-8601: components repeated or out of order (P[nW][nD][T[nH][nM][nS]])"
		}
		last = comp
		n++
		v, ok := isoComponent(whole, frac, isoUnit[comp])
		if !ok || v > math.MaxInt64-total {
			return 0, "overflows: at most " + time.Duration(math.MaxInt64).String()
		}
		total += v
	}
	if n == 0 {
		return 0, "ISO-8601 duration without components (PT30S)"
	}
	return time.Duration(total), ""
}

// isoNumber reads the number at the start of s: its whole digits, the digits after a
// decimal separator ("." or ","; "" when none), and what follows, which starts with the
// designator; or why s holds no such number.
func isoNumber(s string) (whole, frac, rest, problem string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == 0 {
		return "", "", "", isoBadChar(s)
	}
	whole, rest = s[:i], s[i:]
	if rest != "" && (rest[0] == '.' || rest[0] == ',') {
		j := 1
		for j < len(rest) && isDigit(rest[j]) {
			j++
		}
		if j == 1 {
			return "", "", "", "ISO-8601: a decimal separator needs digits after it"
		}
		frac, rest = rest[1:j], rest[j:]
	}
	if rest == "" {
		return "", "", "", "ISO-8601: number without a designator"
	}
	return whole, frac, rest, ""
}

// isoDesignator is the component (isoWeek...isoSecond) of designator des, in the date
// part (before T) or the time part; or why des is not accepted there.
func isoDesignator(des byte, inTime bool) (int, string) {
	switch {
	case !inTime && des == 'Y':
		return 0, "ISO-8601 years are not accepted: their length is ambiguous (use weeks or days)"
	case !inTime && des == 'M':
		return 0, "ISO-8601 months are not accepted: their length is ambiguous (use weeks or days; minutes are PTnM)"
	case !inTime && des == 'W':
		return isoWeek, ""
	case !inTime && des == 'D':
		return isoDay, ""
	case inTime && des == 'H':
		return isoHour, ""
	case inTime && des == 'M':
		return isoMinute, ""
	case inTime && des == 'S':
		return isoSecond, ""
	case des >= 'a' && des <= 'z':
		return 0, "ISO-8601 designators must be upper case (PT30S)"
	case !inTime && (des == 'H' || des == 'S'):
		return 0, fmt.Sprintf("ISO-8601: %c needs T before it (PT1%c)", des, des)
	case inTime && (des == 'Y' || des == 'W' || des == 'D'):
		return 0, fmt.Sprintf("ISO-8601: %c belongs before T", des)
	default:
		return 0, "ISO-8601: unknown designator " + strconv.QuoteRune(rune(des))
	}
}

// isoBadChar explains a character where an ISO-8601 number was expected.
func isoBadChar(rest string) string {
	switch c := rest[0]; {
	case c == '-' || c == '+':
		return "ISO-8601: no sign allowed"
	case c == '.' || c == ',':
		return "ISO-8601: a fraction needs a digit before the decimal separator"
	case c >= 'a' && c <= 'z':
		return "ISO-8601 designators must be upper case (PT30S)"
	case c >= 'A' && c <= 'Z':
		return "ISO-8601: designator " + strconv.QuoteRune(rune(c)) + " without a number"
	}
	return "ISO-8601: expected a number at " + quote(rest)
}

// isoComponent returns whole.frac * unit nanoseconds (fraction truncated), and false on
// overflow of int64.
func isoComponent(whole, frac string, unit uint64) (uint64, bool) {
	n, ok := parseUint(whole, math.MaxInt64)
	if !ok {
		return 0, false
	}
	hi, v := bits.Mul64(n, unit)
	if hi != 0 || v > math.MaxInt64 {
		return 0, false
	}
	// floor(0.frac * unit), exactly: Horner's scheme from the last digit, since
	// floor((a + floor(y)) / 10) == floor((a + y) / 10) for integer a. acc stays < unit.
	var acc uint64
	for i := len(frac) - 1; i >= 0; i-- {
		acc = (uint64(frac[i]-'0')*unit + acc) / 10
	}
	if acc > math.MaxInt64-v {
		return 0, false
	}
	return v + acc, true
}

// ParseDeliverAt parses the x-deliver-at grammar (also the HTTP API's "deliver_at") into
// unix milliseconds. Accepted, with no whitespace:
//
//   - integer unix milliseconds: ASCII digits only, no sign, fitting int64;
//   - an RFC 3339 date-time "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)", strictly:
//     fixed-width fields, a real calendar date, hours 00-23, no leap second (:60),
//     offsets up to 23:59; "T" and "Z" in either case (RFC 3339 allows it); a fraction
//     of any length after "." (not ","). A time that is not a whole millisecond is
//     rounded up to the next millisecond, so the message is never early.
//
// The result may lie in the past (even before 1970 for RFC 3339 dates). Errors wrap
// [ErrInvalidDeliverAt].
func ParseDeliverAt(s string) (int64, error) {
	if s == "" {
		return 0, deliverAtError(s, "empty")
	}
	if isDigits(s) {
		ms, ok := parseUint(s, math.MaxInt64)
		if !ok {
			return 0, deliverAtError(s, "overflows int64 milliseconds")
		}
		return int64(ms), nil
	}
	if s[0] == '-' || s[0] == '+' {
		return 0, deliverAtError(s, "no sign allowed")
	}
	if hasSpace(s) {
		return 0, deliverAtError(s, "whitespace is not allowed")
	}
	ms, detail := parseRFC3339Millis(s)
	if detail != "" {
		return 0, deliverAtError(s, detail)
	}
	return ms, nil
}

func deliverAtError(s, detail string) error {
	return fmt.Errorf("%w %s: %s", ErrInvalidDeliverAt, quote(s), detail)
}

const rfc3339Form = "want RFC 3339 (2026-11-21T15:04:05.123Z) or integer unix milliseconds"

// parseRFC3339Millis parses a strict RFC 3339 date-time into unix ms, rounding up.
func parseRFC3339Millis(s string) (int64, string) {
	// YYYY-MM-DDTHH:MM:SS is 19 bytes; the shortest zone is "Z".
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') || s[13] != ':' || s[16] != ':' {
		return 0, rfc3339Form
	}
	field := func(i, n int) (int, bool) {
		if !isDigits(s[i : i+n]) {
			return 0, false
		}
		v, _ := strconv.Atoi(s[i : i+n])
		return v, true
	}
	year, ok1 := field(0, 4)
	month, ok2 := field(5, 2)
	day, ok3 := field(8, 2)
	hour, ok4 := field(11, 2)
	minute, ok5 := field(14, 2)
	sec, ok6 := field(17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return 0, rfc3339Form
	}
	switch {
	case month < 1 || month > 12:
		return 0, "month out of range"
	case day < 1 || day > daysIn(year, month):
		return 0, "day out of range"
	case hour > 23:
		return 0, "hour out of range"
	case minute > 59:
		return 0, "minute out of range"
	case sec > 59:
		return 0, "second out of range (leap seconds are not accepted)"
	}
	rest := s[19:]
	frac := ""
	if rest[0] == '.' {
		i := 1
		for i < len(rest) && isDigit(rest[i]) {
			i++
		}
		if i == 1 {
			return 0, "a decimal point needs digits after it"
		}
		frac = rest[1:i]
		rest = rest[i:]
	}
	offset, problem := rfc3339Zone(rest)
	if problem != "" {
		return 0, problem
	}
	unix := time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC).Unix() - int64(offset)
	ms := unix * 1000
	for i, scale := 0, int64(100); i < 3 && i < len(frac); i, scale = i+1, scale/10 {
		ms += int64(frac[i]-'0') * scale
	}
	if len(frac) > 3 && strings.Trim(frac[3:], "0") != "" {
		ms++ // sub-millisecond: round up, never early
	}
	return ms, ""
}

// rfc3339Zone is the offset, in seconds east of UTC, of an RFC 3339 zone (Z, +HH:MM,
// -HH:MM), or why s is none.
func rfc3339Zone(s string) (int, string) {
	switch {
	case s == "Z" || s == "z":
		return 0, ""
	case len(s) == 6 && (s[0] == '+' || s[0] == '-') && s[3] == ':' && isDigits(s[1:3]) && isDigits(s[4:6]):
		oh, _ := strconv.Atoi(s[1:3])
		om, _ := strconv.Atoi(s[4:6])
		if oh > 23 || om > 59 {
			return 0, "zone offset out of range"
		}
		if s[0] == '-' {
			return -(oh*3600 + om*60), ""
		}
		return oh*3600 + om*60, ""
	}
	return 0, "want a zone: Z, +HH:MM or -HH:MM"
}

func daysIn(year, month int) int {
	return time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day()
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
