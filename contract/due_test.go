package contract

import (
	"errors"
	"math"
	"math/big"
	"testing"
	"time"
)

// nowMs is a realistic Redis time for the tests: 2026-11-21T15:04:05Z.
const nowMs = 1795273445000

func TestHorizonAt(t *testing.T) {
	h := Horizon{Now: nowMs, MaxDelay: time.Hour}
	for _, c := range []struct {
		name string
		at   int64
		want int64
		err  error
	}{
		{"now", nowMs, nowMs, nil},
		{"at the maximum", nowMs + 3_600_000, nowMs + 3_600_000, nil},
		{"1 ms beyond", nowMs + 3_600_001, 0, ErrBeyondMaxDelay},
		{"max int64 (the bulk reproduction)", math.MaxInt64, 0, ErrBeyondMaxDelay},
		{"past: kept", 1000, 1000, nil},
		{"1970", 0, 0, nil},
		{"before 1970: 1970", -62135596800000, 0, nil},
		{"min int64", math.MinInt64, 0, nil},
	} {
		got, err := h.At(c.at)
		if !errors.Is(err, c.err) || got != c.want {
			t.Errorf("%s: At(%d) = %d, %v; want %d, %v", c.name, c.at, got, err, c.want, c.err)
		}
	}
}

func TestHorizonShiftAndSpan(t *testing.T) {
	h := Horizon{Now: nowMs, MaxDelay: 24 * time.Hour}
	for _, c := range []struct {
		name  string
		due   int64
		shift time.Duration
		want  int64
		err   error
	}{
		{"+1h", nowMs, time.Hour, nowMs + 3_600_000, nil},
		{"-1h into the past", nowMs, -time.Hour, nowMs - 3_600_000, nil},
		{"sub-ms rounds up", nowMs, 1500 * time.Microsecond, nowMs + 2, nil},
		{"negative sub-ms toward zero", nowMs, -1500 * time.Microsecond, nowMs - 1, nil},
		{"beyond", nowMs, 25 * time.Hour, 0, ErrBeyondMaxDelay},
		{"largest shift", nowMs, time.Duration(math.MaxInt64), 0, ErrBeyondMaxDelay},
		{"overflow", math.MaxInt64 - 5, time.Hour, 0, ErrTimeOverflow},
		{"negative overflow", math.MinInt64 + 5, -time.Hour, 0, ErrTimeOverflow},
		{"far past to before 1970", 1000, -time.Hour, 0, nil},
	} {
		got, err := h.Shift(c.due, c.shift)
		if !errors.Is(err, c.err) || got != c.want {
			t.Errorf("%s: Shift(%d, %s) = %d, %v; want %d, %v", c.name, c.due, c.shift, got, err, c.want, c.err)
		}
	}
	if end, err := h.Span(3_600_000, 24); err != nil || end != nowMs+86_400_000 {
		t.Errorf("Span(1h, 24) = %d, %v", end, err)
	}
	if _, err := h.Span(math.MaxInt64, 400); !errors.Is(err, ErrTimeOverflow) {
		t.Errorf("Span(max int64, 400) = %v, want an overflow (the forecast reproduction)", err)
	}
	if _, err := h.Span(3_600_000, 25); !errors.Is(err, ErrBeyondMaxDelay) {
		t.Errorf("Span(1h, 25) = %v, want beyond the maximum", err)
	}
	if _, err := h.Delay(24*time.Hour + time.Nanosecond); !errors.Is(err, ErrBeyondMaxDelay) {
		t.Errorf("Delay(24h+1ns) = %v", err)
	}
}

// FuzzHorizon: every computation of a Horizon is refused, or gives a due time that is not
// early (max(due, now) is now or later; due >= 0) and within the bound (due <= now + max),
// equal to the exact result (computed with big integers) whenever that lies in
// [0, now + max]. Seeds: int64 limits, negative values, huge shifts.
func FuzzHorizon(f *testing.F) {
	hour := int64(time.Hour)
	for _, s := range []struct {
		now, maxNs, at, due, shiftNs, step int64
		n                                  int
	}{
		{nowMs, 8760 * hour, math.MaxInt64, nowMs, hour, 60_000, 60},
		{nowMs, 8760 * hour, math.MinInt64, 0, math.MaxInt64, math.MaxInt64, 400},
		{nowMs, 876600 * hour, nowMs + 876600*3_600_000, math.MaxInt64, math.MinInt64, 3_600_000, 24},
		{math.MaxInt64 - 1, 8760 * hour, math.MaxInt64, math.MaxInt64 - 1, 1, 1, 1},
		{0, 1, 1, -1, -1, math.MaxInt64 / 2, 3},
		{-62135596800000, hour, 253402300799999, -62135596800000, -hour, 1000, 400},
		{nowMs, 0, nowMs, nowMs, 0, 1000, 1},
		{nowMs, -1, nowMs + 1, nowMs + 1, 999_999, 1000, 1},
	} {
		f.Add(s.now, s.maxNs, s.at, s.due, s.shiftNs, s.step, s.n)
	}
	f.Fuzz(func(t *testing.T, now, maxNs, at, due, shiftNs, step int64, n int) {
		h := Horizon{Now: now, MaxDelay: time.Duration(maxNs)}
		latest := new(big.Int).Add(big.NewInt(max(now, 0)), big.NewInt(max(time.Duration(maxNs).Milliseconds(), 0)))
		check := func(what string, got int64, err error, exact *big.Int) {
			t.Helper()
			if err != nil {
				if !errors.Is(err, ErrBeyondMaxDelay) && !errors.Is(err, ErrTimeOverflow) {
					t.Fatalf("%s: unexpected error %v", what, err)
				}
				if exact.Sign() >= 0 && exact.Cmp(latest) <= 0 && exact.IsInt64() && what != "span" {
					t.Fatalf("%s: refused %s, within [0, %s]: %v", what, exact, latest, err)
				}
				return
			}
			if got < 0 || big.NewInt(got).Cmp(latest) > 0 {
				t.Fatalf("%s = %d: outside [0, now + max = %s]", what, got, latest)
			}
			switch {
			case exact.Sign() < 0 && got != 0:
				t.Fatalf("%s = %d, want 0 for %s (before 1970)", what, got, exact)
			case exact.Sign() >= 0 && exact.Cmp(big.NewInt(got)) != 0:
				t.Fatalf("%s = %d, want exactly %s", what, got, exact)
			}
		}
		got, err := h.At(at)
		check("at", got, err, big.NewInt(at))
		d := time.Duration(shiftNs)
		ms := big.NewInt(d.Milliseconds())
		if d > 0 && d%time.Millisecond != 0 {
			ms.Add(ms, big.NewInt(1))
		}
		got, err = h.Shift(due, d)
		check("shift", got, err, new(big.Int).Add(big.NewInt(due), ms))
		if step > 0 && n > 0 {
			end := new(big.Int).Mul(big.NewInt(step), big.NewInt(int64(n)))
			got, err = h.Span(step, n)
			check("span", got, err, end.Add(end, big.NewInt(now)))
		}
		if dd, err := h.Delay(d); err == nil && (dd < 0 || dd > max(h.MaxDelay, 0)) {
			t.Fatalf("Delay(%s) = %s: outside [0, %s]", d, dd, h.MaxDelay)
		}
	})
}
