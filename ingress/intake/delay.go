package intake

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

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
