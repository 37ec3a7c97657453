package admin

import (
	"errors"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// TestBulkBounded: a reschedule never wraps a due time. deliver_at 2^63-1 (which Lua
// would format as -2^63: delivered at once) and a shift beyond BulkOp.MaxDelay leave the
// message alone and are not counted as changed; a shift into the past makes it due at
// once, never before 1970.
func TestBulkBounded(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	hour := int64(time.Hour / time.Millisecond)
	f.parkFor(t, "nats:t", now+hour, "near")
	f.parkFor(t, "nats:t", now+23*hour, "far")
	before, _ := f.s.Get(t.Context(), "far")
	day := 24 * time.Hour

	res, err := f.a.Bulk(t.Context(), Selector{ID: "far"}, delaystore.BulkOp{Kind: delaystore.BulkDeliverAt, At: math.MaxInt64, MaxDelay: day}, false, nil, time.Minute)
	if err != nil || res.Matched != 1 || res.Changed != 0 {
		t.Fatalf("deliver_at max int64 = %+v, %v; want matched 1, changed 0", res, err)
	}
	if m, err := f.s.Get(t.Context(), "far"); err != nil || m.Due != before.Due || m.Version != before.Version {
		t.Fatalf("far after deliver_at max int64: due %d version %d, want %d %d untouched (%v)", m.Due, m.Version, before.Due, before.Version, err)
	}
	res, err = f.a.Bulk(t.Context(), Selector{Match: targetIs("nats:t")}, delaystore.BulkOp{Kind: delaystore.BulkShift, Shift: 2 * time.Hour, MaxDelay: day}, false, nil, time.Minute)
	if err != nil || res.Matched != 2 || res.Changed != 1 {
		t.Fatalf("shift +2h = %+v, %v; want matched 2, changed 1 (far would be 25h ahead)", res, err)
	}
	if m, _ := f.s.Get(t.Context(), "near"); m.Due != now+3*hour {
		t.Fatalf("near: due %d, want now + 3h", m.Due-now)
	}
	if m, _ := f.s.Get(t.Context(), "far"); m.Due != before.Due || m.Version != before.Version {
		t.Fatalf("far moved beyond the maximum delay: %+v", m)
	}
	res, err = f.a.Bulk(t.Context(), Selector{ID: "near"}, delaystore.BulkOp{Kind: delaystore.BulkShift, Shift: -100 * 8766 * time.Hour, MaxDelay: day}, false, nil, time.Minute)
	if m, _ := f.s.Get(t.Context(), "near"); err != nil || res.Changed != 1 || m.Due != 0 {
		t.Fatalf("shift -100y = %+v, %v: due %d, want 0 (due at once, 1970)", res, err, m.Due)
	}
	for _, op := range []delaystore.BulkOp{{Kind: delaystore.BulkShift, Shift: time.Hour}, {Kind: delaystore.BulkDeliverAt, At: now}, {Kind: "later"}} {
		if _, err := f.a.Bulk(t.Context(), Selector{ID: "far"}, op, false, nil, time.Minute); !errors.Is(err, delaystore.ErrBadOp) {
			t.Errorf("Bulk(%+v) = %v, want delaystore.ErrBadOp", op, err)
		}
	}
}

// FuzzBulkBound: whatever shift or deliver_at a bulk reschedule is given, bulk.lua leaves
// the message as it was (not counted as changed) or gives it a due in [0, Redis now +
// MaxDelay], equal to the exact result (big integers) when that lies in that range and
// 0 when it lies before 1970. Against a real Redis: run as a normal test on the seeds
// (int64 limits, huge and negative shifts, year 0001 and 9999); -fuzz explores further.
func FuzzBulkBound(f *testing.F) {
	for _, s := range []struct {
		at                       bool
		value, dueFromNow, maxMs int64
	}{
		{true, math.MaxInt64, 3_600_000, 86_400_000}, {true, math.MinInt64, 0, 86_400_000},
		{true, 253402300799999, 0, 3_155_760_000_000}, {true, -62135596800000, 0, 86_400_000},
		{false, int64(time.Duration(math.MaxInt64).Milliseconds()), 0, 3_155_760_000_000},
		{false, -int64(time.Duration(math.MaxInt64).Milliseconds()), 0, 86_400_000},
		{false, 82_800_000, 3_600_000, 86_400_000}, {false, 82_800_001, 3_600_000, 86_400_000},
		{false, -1, -1_795_273_445_000, 1}, {true, 0, 0, 1},
	} {
		f.Add(s.at, s.value, s.dueFromNow, s.maxMs)
	}
	f.Fuzz(func(t *testing.T, at bool, value, dueFromNow, maxMs int64) {
		const century = 3_155_760_000_000 // BRIDGE_MAX_DELAY is at most 100 years
		if maxMs < 1 || maxMs > century || dueFromNow < -1<<42 || dueFromNow > century {
			return
		}
		fx := setup(t)
		now := fx.now(t)
		due := max(now+dueFromNow, 0)
		fx.parkFor(t, "nats:fz", due, "fz")
		op := delaystore.BulkOp{Kind: delaystore.BulkDeliverAt, At: value, MaxDelay: time.Duration(maxMs) * time.Millisecond}
		exact := big.NewInt(value)
		if !at {
			op = delaystore.BulkOp{Kind: delaystore.BulkShift, Shift: time.Duration(value) * time.Millisecond, MaxDelay: op.MaxDelay}
			if value > math.MaxInt64/int64(time.Millisecond) || value < math.MinInt64/int64(time.Millisecond) {
				return // not a Duration
			}
			exact.Add(exact, big.NewInt(due))
		}
		res, err := fx.a.Bulk(t.Context(), Selector{ID: "fz"}, op, false, nil, time.Minute)
		after := fx.now(t)
		m, gerr := fx.s.Get(t.Context(), "fz")
		if err != nil || gerr != nil || res.Matched != 1 {
			t.Fatalf("%+v: %+v, %v, %v", op, res, err, gerr)
		}
		lo := big.NewInt(now + maxMs)   // within this: must be changed
		hi := big.NewInt(after + maxMs) // beyond this: must not be
		switch {
		case res.Changed == 0:
			if m.Due != due || exact.Cmp(lo) <= 0 {
				t.Fatalf("%+v: not changed, due %d (was %d), exact %s within now + max %s", op, m.Due, due, exact, lo)
			}
		case m.Due < 0 || big.NewInt(m.Due).Cmp(hi) > 0:
			t.Fatalf("%+v: due %d outside [0, %s]", op, m.Due, hi)
		case exact.Sign() < 0 && m.Due != 0, exact.Sign() >= 0 && exact.Cmp(big.NewInt(m.Due)) != 0:
			t.Fatalf("%+v: due %d, want %s (0 before 1970)", op, m.Due, exact)
		}
	})
}
