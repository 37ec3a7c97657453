package schedule

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestOffsetUniform: over many ids the draws of one due time fill [0, w] evenly (each of
// 10 equal slices within 10% of its share), reach both ends' slices, and the same id and
// seed always draw the same.
func TestOffsetUniform(t *testing.T) {
	const n, w, slices = 100_000, 10 * time.Second, 10
	due := int64(1795273445000)
	var counts [slices]int
	for i := range n {
		id := fmt.Sprintf("msg-%d", i)
		o := Offset(id, due, w)
		if o < 0 || o > w.Milliseconds() {
			t.Fatalf("Offset(%s) = %d, outside [0, %d]", id, o, w.Milliseconds())
		}
		if again := Offset(id, due, w); again != o {
			t.Fatalf("Offset(%s) drew %d then %d", id, o, again)
		}
		counts[min(o*slices/(w.Milliseconds()+1), slices-1)]++
	}
	for i, c := range counts {
		if want := n / slices; c < want*9/10 || c > want*11/10 {
			t.Errorf("slice %d of the window holds %d draws, want %d +-10%% (all: %v)", i, c, want, counts)
		}
	}
}

// TestOffsetPerOccurrence: one id draws anew for each occurrence (a recurring message's
// firings are not all at the same place in their windows).
func TestOffsetPerOccurrence(t *testing.T) {
	seen := map[int64]bool{}
	for k := range int64(50) {
		seen[Offset("daily-report", 1795273445000+k*86_400_000, time.Hour)] = true
	}
	if len(seen) < 45 {
		t.Fatalf("50 firings of one message drew only %d distinct offsets", len(seen))
	}
}

func TestOffsetNoWindow(t *testing.T) {
	for _, w := range []time.Duration{0, -time.Second, time.Microsecond, 999 * time.Microsecond} {
		if o := Offset("a", 1, w); o != 0 {
			t.Errorf("Offset with window %s = %d, want 0", w, o)
		}
	}
}

// TestNextSpreadStaysOnSchedule: the firings of a recurring message with a window each
// lie in their own occurrence's window, and the spread does not accumulate: an interval
// counts from the anchor, a cron expression from its own times.
func TestNextSpreadStaysOnSchedule(t *testing.T) {
	anchor := int64(1795273445000) // nominal first firing
	for _, tc := range []struct {
		every string
		w     time.Duration
		nth   func(k int64) int64 // nominal time of the k-th firing
	}{
		{"1h", 10 * time.Minute, func(k int64) int64 { return anchor + k*3_600_000 }},
		{"2s", time.Second, func(k int64) int64 { return anchor + k*2000 }},
		{"0 9 * * *", time.Hour, func(k int64) int64 {
			first := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC).UnixMilli() // the first 09:00 after anchor
			return first + k*86_400_000
		}},
	} {
		t.Run(tc.every, func(t *testing.T) {
			e, err := Parse(tc.every, time.UnixMilli(anchor))
			if err != nil {
				t.Fatal(err)
			}
			first := anchor
			if e.cron != nil {
				first = tc.nth(0)
			}
			due, _ := Spread("r", first, tc.w)
			for k := int64(1); k <= 200; k++ {
				next := e.NextSpread("r", due, first, due, tc.w)
				n := tc.nth(k)
				if next < n || next > n+tc.w.Milliseconds() {
					t.Fatalf("firing %d at %d, outside its window [%d, %d] (previous firing %d)", k, next, n, n+tc.w.Milliseconds(), due)
				}
				due = next
			}
		})
	}
}

// TestNextSpreadFloor: a floor past several occurrences (an expired firing) moves to the
// first occurrence after it, drawn in its window; a window longer than the interval
// leaves out the occurrences before the previous drawn time.
func TestNextSpreadFloor(t *testing.T) {
	anchor := int64(1795273445000)
	e, _ := Parse("1m", time.UnixMilli(anchor))
	next := e.NextSpread("x", anchor+5, anchor, anchor+150_000, 10*time.Second)
	if n := anchor + 180_000; next < n || next > n+10_000 {
		t.Fatalf("after a floor of anchor+150s: %d, want in [%d, %d]", next, n, n+10_000)
	}
	e, _ = Parse("1s", time.UnixMilli(anchor))
	due := anchor + 3500 // drawn 3.5 s into a 10 s window
	next = e.NextSpread("x", due, anchor, due, 10*time.Second)
	if n := anchor + 4000; next < n || next > n+10_000 {
		t.Fatalf("1s schedule, 10s window: %d, want in [%d, %d]", next, n, n+10_000)
	}
}

// FuzzSpread: the drawn time is never early, never beyond due + window, and never a
// wrapped time: a due time whose window end overflows is refused.
func FuzzSpread(f *testing.F) {
	for _, s := range []struct {
		id  string
		due int64
		w   int64
	}{
		{"a", 0, 10_000}, {"b", 1795273445000, 3_600_000}, {"", math.MaxInt64, 1},
		{"c", math.MaxInt64 - 3_600_000, 3_600_000}, {"d", -5, 1000}, {"e", 1 << 53, 0},
		{"f", math.MinInt64, 3_600_000},
	} {
		f.Add(s.id, s.due, s.w)
	}
	f.Fuzz(func(t *testing.T, id string, due, wMs int64) {
		if wMs < 0 || wMs > 3_600_000 {
			return // the grammar bounds it (contract.MaxWindow)
		}
		w := time.Duration(wMs) * time.Millisecond
		at, ok := Spread(id, due, w)
		if !ok {
			if due <= math.MaxInt64-wMs {
				t.Fatalf("Spread(%q, %d, %s) refused a window end that fits", id, due, w)
			}
			return
		}
		if at < due || at-due > wMs {
			t.Fatalf("Spread(%q, %d, %s) = %d: outside [due, due + window]", id, due, w, at)
		}
		if again, _ := Spread(id, due, w); again != at {
			t.Fatalf("Spread(%q, %d, %s) drew %d then %d", id, due, w, at, again)
		}
	})
}

// FuzzNextSpread: the next firing of a recurring message with a window is none or after
// the previous firing (and the floor), and within the window of an occurrence of the
// schedule: never early for its occurrence, never beyond it + window.
func FuzzNextSpread(f *testing.F) {
	now := int64(1795273445000)
	f.Add("1h", now, now, now, int64(600_000))
	f.Add("1s", now+3500, now, now+3500, int64(3_600_000))
	f.Add("0 9 * * *", now, now, now, int64(3_600_000))
	f.Add("1m", now+5, now, now+150_000, int64(10_000)) // a floor past occurrences (an expired firing)
	f.Add("2562047h47m16s", int64(1<<52), int64(0), int64(1<<52), int64(3_600_000))
	f.Fuzz(func(t *testing.T, every string, due, anchor, after, wMs int64) {
		const limit = 1 << 52
		if due < 0 || anchor < 0 || after < 0 || due > limit || anchor > due || after > limit || wMs < 0 || wMs > 3_600_000 {
			return
		}
		e, err := Parse(every, time.UnixMilli(after))
		if err != nil {
			return
		}
		w := time.Duration(wMs) * time.Millisecond
		next := e.NextSpread("id", due, anchor, after, w)
		if next == 0 {
			return
		}
		if next <= due || next <= after {
			t.Fatalf("%q: next %d not after due %d and floor %d", every, next, due, after)
		}
		// The occurrence it was drawn for: the schedule's next one after due and after.
		from := due
		if e.cron == nil && anchor > 0 {
			from = anchor
		}
		occ := e.Next(time.UnixMilli(from), time.UnixMilli(max(due, after))).UnixMilli()
		if next < occ || next > occ+wMs {
			t.Fatalf("%q: next %d outside the window [%d, %d] of its occurrence", every, next, occ, occ+wMs)
		}
	})
}
