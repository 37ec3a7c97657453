package intake

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

func TestParseDelayAccepts(t *testing.T) {
	const maxDur = time.Duration(math.MaxInt64)
	tests := []struct {
		in   string
		want time.Duration
	}{
		// Integer milliseconds.
		{"1500", 1500 * time.Millisecond},
		{"0", 0},
		{"000", 0},
		{"0001500", 1500 * time.Millisecond},
		{"1", time.Millisecond},
		{"86400000", 24 * time.Hour},
		{"9223372036854", 9223372036854 * time.Millisecond},
		// Go durations.
		{"1500ms", 1500 * time.Millisecond},
		{"30s", 30 * time.Second},
		{"1h30m", 90 * time.Minute},
		{"1.5h", 90 * time.Minute},
		{"0s", 0},
		{".5s", 500 * time.Millisecond},
		{"5.s", 5 * time.Second},
		{"1ns", 1},
		{"1us", time.Microsecond},
		{"1µs", time.Microsecond},
		{"1μs", time.Microsecond},
		{"1m30s500ms", 90*time.Second + 500*time.Millisecond},
		{"2562047h", 2562047 * time.Hour},
		{"9223372036854775807ns", maxDur},
		// ISO-8601.
		{"PT30S", 30 * time.Second},
		{"P1DT2H", 26 * time.Hour},
		{"P2W", 14 * 24 * time.Hour},
		{"PT0.5S", 500 * time.Millisecond},
		{"PT1,5S", 1500 * time.Millisecond},
		{"P1W2D", 9 * 24 * time.Hour},
		{"PT1M", time.Minute},
		{"PT1H30M", 90 * time.Minute},
		{"P1D", 24 * time.Hour},
		{"P0D", 0},
		{"PT0S", 0},
		{"P1.5D", 36 * time.Hour},
		{"P0,5W", 84 * time.Hour},
		{"PT1H0.5M", time.Hour + 30*time.Second},
		{"P1DT0,25H", 24*time.Hour + 15*time.Minute},
		{"P1W1DT1H1M1.001S", 8*24*time.Hour + time.Hour + time.Minute + time.Second + time.Millisecond},
		{"PT0.000000001S", 1},
		{"PT0.0000000019S", 1}, // truncated to the nanosecond
		{"PT0.1S", 100 * time.Millisecond},
		{"PT0.333333333333333333333333333333S", 333333333},
		{"PT0.999999999999999999999999999999H", time.Hour - 1},
		{"P007D", 7 * 24 * time.Hour},
		{"PT2562047H", 2562047 * time.Hour},
		{"P15250W", 15250 * 7 * 24 * time.Hour},
		{"PT9223372036.854775807S", maxDur},
		{"PT153722867M", 153722867 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDelay(tt.in)
			if err != nil {
				t.Fatalf("ParseDelay(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseDelay(%q) = %v (%d ns), want %v (%d ns)", tt.in, got, int64(got), tt.want, int64(tt.want))
			}
		})
	}
}

func TestParseDelayRejects(t *testing.T) {
	tests := []struct {
		in     string
		detail string // substring of the error
	}{
		// docs/faults.md G1.
		{"abc", "want integer milliseconds"},
		{"", "empty"},
		{"1d", "no day unit"},
		{"30 s", "whitespace"},
		{" 30s", "whitespace"},
		{"30s ", "whitespace"},
		{"30s\n", "whitespace"},
		{"\t30s", "whitespace"},
		{"PT30S ", "whitespace"},
		{"15\u00a0s", "whitespace"},
		{"30S", "start with P"},
		{"1H", "start with P"},
		{"1e3s", ""},
		{"1e3", ""},
		{"١٢٣", ""},        // Arabic-Indic digits
		{"１２３", ""},        // full-width digits
		{"１２３ms", ""},      // full-width digits with a unit
		{"PT٣S", "number"}, // Arabic-Indic digit in ISO
		{"NaN", ""},
		{"Inf", ""},
		{"infinity", ""},
		{"0x10", ""},
		{"1_000", ""},
		{"1,5s", ""},
		{"1.5", ""},
		{"ms", ""},
		{".s", ""},
		{"1h 30m", "whitespace"},
		// docs/faults.md G2: negative.
		{"-5s", "negative delay"},
		{"-PT5S", "negative delay"},
		{"-1500", "negative delay"},
		{"-0", "negative delay"},
		{"PT-5S", "sign"},
		{"P-1D", "sign"},
		{"+30s", "sign"},
		{"+1500", "sign"},
		{"+PT5S", "sign"},
		{"PT+5S", "sign"},
		// docs/faults.md G3: huge, years, months.
		{"P10000Y", "ambiguous"},
		{"P1Y", "ambiguous"},
		{"P1M", "ambiguous"},
		{"P1Y2M3D", "ambiguous"},
		{"P0Y", "ambiguous"},
		{"P200000W", "overflows"},
		{"P15251W", "overflows"},
		{"PT2562048H", "overflows"},
		{"PT9223372036.854775808S", "overflows"},
		{"PT9223372037S", "overflows"},
		{"P106751D1DT1H", "out of order"},
		{"P106752D", "overflows"},
		{"P106751DT23H47M16.854775808S", "overflows"},
		{"P99999999999999999999999W", "overflows"},
		{"9223372036854775808", "overflows"},
		{"9223372036855", "overflows"},
		{"99999999999999999999999999", "overflows"},
		{"2562048h", "overflows"},
		{"9223372036854775808ns", "overflows"},
		{"9223372036854775807ms", "overflows"},
		{"2562047h47m17s", "overflows"},
		// ISO-8601 syntax.
		{"P", "without components"},
		{"PT", "without a time component"},
		{"P1DT", "without a time component"},
		{"pt30s", "upper case"},
		{"PT30s", "upper case"},
		{"P1dT2h", "upper case"},
		{"Pt30S", "upper case"},
		{"P1.5DT2H", "last component"},
		{"PT1.5H30M", "last component"},
		{"PT1,5H30M", "last component"},
		{"PT1S1M", "out of order"},
		{"PT1S1S", "out of order"},
		{"P1W1W", "out of order"},
		{"P1D1W", "out of order"},
		{"P1H", "needs T"},
		{"P1S", "needs T"},
		{"PT1D", "before T"},
		{"PT1W", "before T"},
		{"PT1Y", "before T"},
		{"PT.5S", "digit before"},
		{"PT5.S", "digits after"},
		{"PT5,S", "digits after"},
		{"PTS", "without a number"},
		{"PT5", "without a designator"},
		{"P5", "without a designator"},
		{"PTT5S", "twice"},
		{"PT1HT1M", "twice"},
		{"P1X", "unknown designator"},
		{"PT1.5.5S", "designator"},
		{"P1,5DT", "last component"},
		{"PT1S ", "whitespace"},
		{"P 1D", "whitespace"},
		{"P1W2D3", "without a designator"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d, err := ParseDelay(tt.in)
			if err == nil {
				t.Fatalf("ParseDelay(%q) = %v, want an error", tt.in, d)
			}
			if !errors.Is(err, ErrInvalidDelay) {
				t.Fatalf("error %v does not wrap ErrInvalidDelay", err)
			}
			if Reason(err) != contract.ReasonInvalidDelay {
				t.Fatalf("Reason = %q", Reason(err))
			}
			if !strings.Contains(err.Error(), tt.detail) {
				t.Fatalf("error %q does not contain %q", err, tt.detail)
			}
		})
	}
}

func TestParseDeliverAtAccepts(t *testing.T) {
	const base = 1795273445000 // 2026-11-21T15:04:05Z
	tests := []struct {
		in   string
		want int64
	}{
		{"2026-11-21T15:04:05.123Z", base + 123},
		{"2026-11-21T15:04:05Z", base},
		{"2026-11-21T15:04:05.1Z", base + 100},
		{"2026-11-21T15:04:05.12Z", base + 120},
		{"2026-11-21T15:04:05.123000000Z", base + 123},
		{"2026-11-21T15:04:05.1230000000000000Z", base + 123},
		{"2026-11-21T15:04:05.1234Z", base + 124},          // rounded up
		{"2026-11-21T15:04:05.123000001Z", base + 124},     // rounded up
		{"2026-11-21T15:04:05.1230000000001Z", base + 124}, // beyond nanoseconds: still up
		{"2026-11-21T15:04:05.0000001Z", base + 1},         // rounded up
		{"2026-11-21T15:04:05.999999999Z", base + 1000},    // rounded up into the next second
		{"2026-11-21T15:04:05.000Z", base},                 // whole ms
		{"2026-11-21T17:04:05+02:00", base},                // offset
		{"2026-11-21T10:04:05-05:00", base},                // negative offset
		{"2026-11-21T20:34:05.5+05:30", base + 500},        // half-hour offset
		{"2026-11-21T15:04:05-00:00", base},                // unknown local offset
		{"2026-11-21T15:04:05+00:00", base},                // zero offset
		{"2026-11-22T14:03:05+22:59", base},                // largest offsets
		{"2026-11-20T15:05:05-23:59", base},
		{"2026-11-21t15:04:05z", base},                      // lower case allowed by RFC 3339
		{"2024-02-29T00:00:00Z", 1709164800000},             // leap day
		{"1970-01-01T00:00:00Z", 0},                         // epoch
		{"1969-12-31T23:59:59.999Z", -1},                    // before the epoch: past
		{"1969-12-31T23:59:59.9995Z", 0},                    // rounded up, toward the future
		{"0000-01-01T00:00:00Z", -62167219200000},           // smallest
		{"9999-12-31T23:59:59.999999999Z", 253402300800000}, // largest, rounded up
		{"1795273445123", base + 123},                       // unix ms
		{"0", 0},                                            // epoch, in the past
		{"000123", 123},                                     // leading zeros
		{"9223372036854775807", math.MaxInt64},              // largest unix ms
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDeliverAt(tt.in)
			if err != nil {
				t.Fatalf("ParseDeliverAt(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseDeliverAt(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseDeliverAtRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"-1",
		"+1",
		"-2026-11-21T15:04:05Z",
		"9223372036854775808",
		"99999999999999999999999",
		"1.5",
		"1e12",
		"１２３",
		"now",
		" 1795273445123",
		"1795273445123 ",
		"2026-11-21T15:04:05.123Z\n",
		"2026-11-21 15:04:05Z",
		"2026-11-21T15:04:05",
		"2026-11-21T15:04:05.123",
		"2026-11-21",
		"2026-11-21T15:04Z",
		"2026-11-21T5:04:05Z",
		"2026-11-21T15:4:05Z",
		"2026-1-21T15:04:05Z",
		"26-11-21T15:04:05Z",
		"20261-11-21T15:04:05Z",
		"2026-11-21T15:04:05,123Z",
		"2026-11-21T15:04:05.Z",
		"2026-11-21T15:04:05.123ZZ",
		"2026-11-21T15:04:05+0200",
		"2026-11-21T15:04:05+02",
		"2026-11-21T15:04:05+24:00",
		"2026-11-21T15:04:05+02:60",
		"2026-11-21T15:04:05 +02:00",
		"2026-11-21T15:04:05UTC",
		"2026-11-21T24:00:00Z",
		"2026-11-21T23:60:00Z",
		"2026-11-21T23:59:60Z",
		"2026-02-30T15:04:05Z",
		"2025-02-29T00:00:00Z",
		"2026-13-01T00:00:00Z",
		"2026-00-01T00:00:00Z",
		"2026-11-00T00:00:00Z",
		"2026-11-31T00:00:00Z",
		"2026-11-21X15:04:05Z",
		"２026-11-21T15:04:05Z",
		"2026-11-21T15:04:05.１Z",
		"Sat, 21 Nov 2026 15:04:05 GMT",
	} {
		t.Run(in, func(t *testing.T) {
			ms, err := ParseDeliverAt(in)
			if err == nil {
				t.Fatalf("ParseDeliverAt(%q) = %d, want an error", in, ms)
			}
			if !errors.Is(err, ErrInvalidDeliverAt) || Reason(err) != contract.ReasonInvalidDeliverAt {
				t.Fatalf("error %v: reason %q", err, Reason(err))
			}
		})
	}
}

// TestParseDeliverAtMatchesTime checks the hand-written RFC 3339 reader against the
// standard library on a spread of instants and zones.
func TestParseDeliverAtMatchesTime(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("", 5*3600+30*60), time.FixedZone("", -(23*3600 + 59*60))}
	for _, sec := range []int64{-62135596800, -1, 0, 1, 951782400, 1709164799, 1795273445, 4102444800, 253402214400} {
		for _, nsec := range []int{0, 1, 999999, 1000000, 123456789, 999999999} {
			for _, z := range zones {
				ts := time.Unix(sec, int64(nsec)).In(z)
				if ts.Year() < 0 || ts.Year() > 9999 {
					continue
				}
				s := ts.Format(time.RFC3339Nano)
				got, err := ParseDeliverAt(s)
				if err != nil {
					t.Fatalf("ParseDeliverAt(%q): %v", s, err)
				}
				want := ts.UnixMilli()
				if ts.Nanosecond()%int(time.Millisecond) != 0 {
					want++
				}
				if got != want {
					t.Fatalf("ParseDeliverAt(%q) = %d, want %d", s, got, want)
				}
			}
		}
	}
}

func TestParseSchedule(t *testing.T) {
	now := time.UnixMilli(1795273445000) // 2026-11-21T15:04:05Z
	const maxDelay = 7 * 24 * time.Hour
	maxMs := maxDelay.Milliseconds()
	h := func(kv ...string) headers.List {
		var l headers.List
		for i := 0; i < len(kv); i += 2 {
			l.Add(kv[i], kv[i+1])
		}
		return l
	}
	tests := []struct {
		name    string
		h       headers.List
		max     time.Duration
		want    Schedule
		reason  string
		alsoErr error
	}{
		{name: "neither: due now", h: h("x-target", "a"), want: Schedule{}},
		{name: "nil headers", h: nil, want: Schedule{}},
		{name: "delay", h: h("x-delay", "30s"), want: Schedule{Delay: 30 * time.Second}},
		{name: "delay case-insensitive", h: h("X-Delay", "1500"), want: Schedule{Delay: 1500 * time.Millisecond}},
		{name: "delay upper", h: h("X-DELAY", "PT1M"), want: Schedule{Delay: time.Minute}},
		{name: "delay zero", h: h("x-delay", "0"), want: Schedule{}},
		{name: "delay = max", h: h("x-delay", "168h"), want: Schedule{Delay: maxDelay}},
		{name: "delay = max, ISO", h: h("x-delay", "P1W"), want: Schedule{Delay: maxDelay}},
		{name: "delay = max + 1ns", h: h("x-delay", "168h0m0.000000001s"), reason: contract.ReasonDelayTooLong, alsoErr: ErrInvalidDelay},
		{name: "delay = max + 1ms", h: h("x-delay", strconv.FormatInt(maxMs+1, 10)), reason: contract.ReasonDelayTooLong},
		{name: "delay huge", h: h("x-delay", "2562047h"), reason: contract.ReasonDelayTooLong},
		{name: "delay invalid", h: h("x-delay", "abc"), reason: contract.ReasonInvalidDelay},
		{name: "delay negative", h: h("x-delay", "-5s"), reason: contract.ReasonInvalidDelay},
		{name: "delay empty value", h: h("x-delay", ""), reason: contract.ReasonInvalidDelay},
		{name: "delay repeated", h: h("x-delay", "1s", "X-Delay", "1s"), reason: contract.ReasonInvalidDelay},
		{name: "deliver-at repeated", h: h("x-deliver-at", "0", "x-deliver-at", "0"), reason: contract.ReasonInvalidDeliverAt},
		{name: "both", h: h("x-delay", "1s", "x-deliver-at", "0"), reason: contract.ReasonConflictingSchedule},
		{name: "both, one invalid", h: h("x-delay", "abc", "X-Deliver-At", "0"), reason: contract.ReasonConflictingSchedule},
		{name: "deliver-at rfc3339", h: h("x-deliver-at", "2026-11-21T15:04:06.5Z"), want: Schedule{Absolute: true, At: 1795273446500}},
		{name: "deliver-at case-insensitive", h: h("X-Deliver-At", "1795273446500"), want: Schedule{Absolute: true, At: 1795273446500}},
		{name: "deliver-at = now + max", h: h("x-deliver-at", strconv.FormatInt(now.UnixMilli()+maxMs, 10)), want: Schedule{Absolute: true, At: now.UnixMilli() + maxMs}},
		{name: "deliver-at = now + max + 1ms", h: h("x-deliver-at", strconv.FormatInt(now.UnixMilli()+maxMs+1, 10)), reason: contract.ReasonDelayTooLong, alsoErr: ErrInvalidDeliverAt},
		{name: "deliver-at sub-ms over max rounds up", h: h("x-deliver-at", "2026-11-28T15:04:05.0001Z"), reason: contract.ReasonDelayTooLong},
		{name: "deliver-at max rfc3339", h: h("x-deliver-at", "2026-11-28T15:04:05Z"), want: Schedule{Absolute: true, At: now.UnixMilli() + maxMs}},
		{name: "deliver-at past", h: h("x-deliver-at", "2020-01-01T00:00:00Z"), want: Schedule{Absolute: true, At: 1577836800000}},
		{name: "deliver-at epoch", h: h("x-deliver-at", "0"), want: Schedule{Absolute: true, At: 0}},
		// Before 1970: due at once, as 1970 (the store keeps unsigned unix ms; a negative due
		// was parked but then invisible to listing and bulk changes).
		{name: "deliver-at before epoch", h: h("x-deliver-at", "1900-01-01T00:00:00Z"), want: Schedule{Absolute: true, At: 0}},
		{name: "deliver-at year 0001", h: h("x-deliver-at", "0001-01-01T00:00:00Z"), want: Schedule{Absolute: true, At: 0}},
		{name: "deliver-at max int64", h: h("x-deliver-at", "9223372036854775807"), reason: contract.ReasonDelayTooLong},
		{name: "deliver-at max int64, largest max", h: h("x-deliver-at", "9223372036854775807"), max: time.Duration(math.MaxInt64), reason: contract.ReasonDelayTooLong},
		{name: "deliver-at = now + largest max", h: h("x-deliver-at", "11018645481854"), max: time.Duration(math.MaxInt64), want: Schedule{Absolute: true, At: 11018645481854}},
		{name: "deliver-at invalid", h: h("x-deliver-at", "tomorrow"), reason: contract.ReasonInvalidDeliverAt},
		{name: "other headers ignored", h: h("x-delayed", "abc", "delay", "x", "x-delay", "2s"), want: Schedule{Delay: 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			max := tt.max
			if max == 0 {
				max = maxDelay
			}
			got, err := ParseSchedule(tt.h, max, now)
			if tt.reason != "" {
				if err == nil {
					t.Fatalf("got %+v, want error %s", got, tt.reason)
				}
				if r := Reason(err); r != tt.reason {
					t.Fatalf("Reason(%v) = %q, want %q", err, r, tt.reason)
				}
				if tt.alsoErr != nil && !errors.Is(err, tt.alsoErr) {
					t.Fatalf("error %v does not wrap %v", err, tt.alsoErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestParseScheduleNowNearOverflow: now + maxDelay beyond int64 does not wrap.
func TestParseScheduleNowNearOverflow(t *testing.T) {
	now := time.UnixMilli(math.MaxInt64 - 10)
	h := headers.List{{Key: "x-deliver-at", Value: "9223372036854775807"}}
	got, err := ParseSchedule(h, time.Hour, now)
	if err != nil || got.At != math.MaxInt64 {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestValidateID(t *testing.T) {
	ok := []string{"a", "order-42", "ordér 42", "01J9ZQ5W8X7Y6Z", strings.Repeat("x", MaxIDLen), strings.Repeat("é", MaxIDLen/2), "js:ORDERS:42", "{a}", ".a", "a.", "...", "a..b", "./a", "%2E"}
	for _, id := range ok {
		if err := ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q): %v", id, err)
		}
	}
	bad := []string{"", strings.Repeat("x", MaxIDLen+1), strings.Repeat("é", MaxIDLen/2) + "x", "a\nb", "a\rb", "\x00", "a\tb", "a\x7fb", "a\u0085b", "\xff", "a\xc3", " a", "a ", " ", ".", ".."}
	for _, id := range bad {
		err := ValidateID(id)
		if err == nil {
			t.Errorf("ValidateID(%q) = nil, want an error", id)
			continue
		}
		if !errors.Is(err, ErrInvalidID) || Reason(err) != contract.ReasonInvalidID {
			t.Errorf("ValidateID(%q) = %v: reason %q", id, err, Reason(err))
		}
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("boom"), contract.ReasonUnknown},
		{ErrInvalidDelay, contract.ReasonInvalidDelay},
		{fmt.Errorf("x: %w", ErrInvalidDeliverAt), contract.ReasonInvalidDeliverAt},
		{ErrConflictingSchedule, contract.ReasonConflictingSchedule},
		{ErrDelayTooLong, contract.ReasonDelayTooLong},
		{fmt.Errorf("%w (%w)", ErrDelayTooLong, ErrInvalidDelay), contract.ReasonDelayTooLong},
		{ErrMissingTarget, contract.ReasonMissingTarget},
		{ErrInvalidTarget, contract.ReasonInvalidTarget},
		{ErrTargetLoop, contract.ReasonTargetLoop},
		{ErrTargetNotAllowed, contract.ReasonTargetNotAllowed},
		{ErrBrokerNotConfigured, contract.ReasonBrokerNotConfigured},
		{ErrInvalidID, contract.ReasonInvalidID},
		{fmt.Errorf("wrapped: %w", ErrPayloadTooLarge), contract.ReasonPayloadTooLarge},
		{fmt.Errorf("wrapped: %w", ErrInvalidHeaders), contract.ReasonInvalidHeaders},
		{&targetError{kind: ErrTargetLoop}, contract.ReasonTargetLoop},
		{&targetError{}, contract.ReasonInvalidTarget},
		{&targetError{kind: ErrMissingTarget}, contract.ReasonMissingTarget},
		{fmt.Errorf("%w: x-delay-expires: %w", ErrInvalidExpires, ErrInvalidDelay), contract.ReasonInvalidExpires},
		{fmt.Errorf("wrapped: %w", ErrInvalidEvery), contract.ReasonInvalidEvery},
		{fmt.Errorf("%w: x-delay-window: %w", ErrInvalidWindow, ErrInvalidDelay), contract.ReasonInvalidWindow},
		{fmt.Errorf("%w: x-delay-max-wait: %w", ErrInvalidMaxWait, ErrInvalidDelay), contract.ReasonInvalidMaxWait},
		{fmt.Errorf("%w: x-delay-ordering-key given 2 times", ErrInvalidOrderingKey), contract.ReasonInvalidOrderingKey},
		{fmt.Errorf("%w: target x", ErrQuotaExceeded), contract.ReasonQuotaExceeded},
	}
	for _, tt := range tests {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
	if got := Reasons(); len(got) != 19 || got[len(got)-1] != contract.ReasonUnknown {
		t.Errorf("Reasons() = %v", got)
	}
}

// isoString formats d >= 0 as an ISO-8601 duration in seconds.
func isoString(d time.Duration) string {
	return fmt.Sprintf("PT%d.%09dS", d/time.Second, d%time.Second)
}

func FuzzParseDelay(f *testing.F) {
	for _, s := range []string{"1500", "0", "1500ms", "30s", "1h30m", "1.5h", "PT30S", "P1DT2H", "P2W",
		"PT0.5S", "PT1,5S", "-5s", "-PT5S", "P10000Y", "P1M", "2562047h", "9223372036854775808", "abc",
		"1d", "30S", "1e3s", "NaN", " 30s", "١٢٣", "PT9223372036.854775807S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDelay(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidDelay) || Reason(err) != contract.ReasonInvalidDelay {
				t.Fatalf("ParseDelay(%q): error %v has reason %q", s, err, Reason(err))
			}
			if d != 0 {
				t.Fatalf("ParseDelay(%q) = %v with an error", s, d)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseDelay(%q) = %v < 0", s, d)
		}
		if strings.TrimSpace(s) != s || strings.ContainsAny(s, " \t\r\n+-") {
			t.Fatalf("ParseDelay(%q) accepted whitespace or a sign", s)
		}
		// Every accepted value re-parses to itself in each form.
		forms := []string{d.String(), isoString(d)}
		if d%time.Millisecond == 0 {
			forms = append(forms, strconv.FormatInt(int64(d/time.Millisecond), 10))
		}
		for _, form := range forms {
			if d2, err := ParseDelay(form); err != nil || d2 != d {
				t.Fatalf("ParseDelay(%q) = %v, but its form %q re-parses to %v, %v", s, d, form, d2, err)
			}
		}
		// A Go form agrees with the standard library.
		if !isDigits(s) && s[0] != 'P' {
			if want, err := time.ParseDuration(s); err != nil || want != d {
				t.Fatalf("ParseDelay(%q) = %v, time.ParseDuration = %v, %v", s, d, want, err)
			}
		}
	})
}

func FuzzParseDeliverAt(f *testing.F) {
	for _, s := range []string{"2026-11-21T15:04:05.123Z", "2026-11-21T17:04:05+02:00", "2026-11-21t15:04:05.0001z",
		"1795273445123", "0", "9223372036854775808", "2026-02-30T15:04:05Z", "2026-11-21T15:04:05,1Z", "-1",
		"9999-12-31T23:59:59.999999999Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := ParseDeliverAt(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidDeliverAt) || Reason(err) != contract.ReasonInvalidDeliverAt {
				t.Fatalf("ParseDeliverAt(%q): error %v has reason %q", s, err, Reason(err))
			}
			return
		}
		if isDigits(s) {
			if ms < 0 {
				t.Fatalf("ParseDeliverAt(%q) = %d < 0", s, ms)
			}
			return
		}
		// An accepted RFC 3339 time agrees with the standard library (which accepts a
		// superset), rounded up to the millisecond.
		norm := []byte(s)
		norm[10] = 'T'
		if norm[len(norm)-1] == 'z' {
			norm[len(norm)-1] = 'Z'
		}
		ts, err := time.Parse(time.RFC3339Nano, string(norm))
		if err != nil {
			t.Fatalf("ParseDeliverAt(%q) = %d, but time.Parse fails: %v", s, ms, err)
		}
		if diff := ms - ts.UnixMilli(); diff != 0 && diff != 1 {
			t.Fatalf("ParseDeliverAt(%q) = %d, time.Parse = %d ms", s, ms, ts.UnixMilli())
		}
		if ts.Nanosecond()%int(time.Millisecond) != 0 && ms != ts.UnixMilli()+1 {
			t.Fatalf("ParseDeliverAt(%q) = %d, not rounded up from %v", s, ms, ts)
		}
		// And re-parses through both forms.
		forms := []string{}
		if at := time.UnixMilli(ms).UTC(); at.Year() >= 0 && at.Year() <= 9999 {
			forms = append(forms, at.Format("2006-01-02T15:04:05.000Z07:00"))
		}
		if ms >= 0 { // no sign in the integer form
			forms = append(forms, strconv.FormatInt(ms, 10))
		}
		for _, form := range forms {
			if ms2, err := ParseDeliverAt(form); err != nil || ms2 != ms {
				t.Fatalf("ParseDeliverAt(%q) = %d, but %q re-parses to %d, %v", s, ms, form, ms2, err)
			}
		}
	})
}
