package intake

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

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
