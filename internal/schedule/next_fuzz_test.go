package schedule

import (
	"testing"
	"time"
)

// FuzzNext: the next occurrence of a schedule is none (the zero time: the message ends
// with this firing) or strictly after both the firing's due time and the floor, never a
// wrapped time; First is strictly after now. Seeds: intervals up to the largest Duration,
// dues and floors from 1970 to far beyond, cron forms.
func FuzzNext(f *testing.F) {
	now := int64(1795273445000)
	for _, s := range []struct {
		every        string
		due, afterMs int64
	}{
		{"1s", 0, now}, {"2562047h47m16s", 0, now}, {"2562047h47m16s", now, now},
		{"1s", 0, 1 << 52}, {"7s", 1, 1 << 40}, {"1h", -62135596800000, 253402300799999},
		{"2000000h", 0, now}, {"@every 1s", now, now + 1}, {"0 9 * * 1-5", now, now},
		{"CRON_TZ=Europe/Berlin 30 2 * * *", now, now}, {"@yearly", 253402300799999, 253402300799999},
	} {
		f.Add(s.every, s.due, s.afterMs)
	}
	f.Fuzz(func(t *testing.T, every string, dueMs, afterMs int64) {
		const limit = 1 << 52 // unix ms up to the year ~144,000: what time.UnixMilli keeps exactly
		if dueMs < 0 || afterMs < 0 || dueMs > limit || afterMs > limit {
			return
		}
		due, after := time.UnixMilli(dueMs), time.UnixMilli(afterMs)
		e, err := Parse(every, after)
		if err != nil {
			return
		}
		if first := e.First(after); !first.After(after) {
			t.Fatalf("%q: First(%s) = %s, not after it", every, after, first)
		}
		next := e.Next(due, after)
		if !next.IsZero() && (!next.After(due) || !next.After(after)) {
			t.Fatalf("%q: Next(%s, %s) = %s, not after both", every, due, after, next)
		}
	})
}
