package schedule

import (
	"errors"
	"testing"
	"time"

	cron "github.com/netresearch/go-cron"
)

func TestParseMisfire(t *testing.T) {
	for s, want := range map[string]Misfire{"": MisfireOnce, "once": MisfireOnce, " SKIP ": MisfireSkip, "all": MisfireAll, "All": MisfireAll} {
		got, err := ParseMisfire(s)
		if err != nil || got != want {
			t.Errorf("ParseMisfire(%q) = %v, %v; want %v", s, got, err, want)
		}
		if back, _ := ParseMisfire(got.String()); back != got {
			t.Errorf("%v does not read back", got)
		}
	}
	for _, s := range []string{"none", "latest", "1", "once,all"} {
		if _, err := ParseMisfire(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseMisfire(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

// TestMissed: an occurrence is missed once its next occurrence is due too, or a minute
// after it, whichever comes first.
func TestMissed(t *testing.T) {
	due := now
	for _, c := range []struct {
		spec string
		late time.Duration
		want bool
	}{
		{"1s", 0, false}, {"1s", 999 * time.Millisecond, false}, {"1s", time.Second, true}, {"1s", time.Hour, true},
		{"1h", 59 * time.Second, false}, {"1h", MisfireGrace, true},
		{"0 12 * * *", 30 * time.Second, false}, {"0 12 * * *", 2 * time.Minute, true},
		{"*/10 * * * * *", 9 * time.Second, false}, {"*/10 * * * * *", 10 * time.Second, true},
	} {
		if got := mustParse(t, c.spec).Missed(due, due.Add(c.late)); got != c.want {
			t.Errorf("%q taken %s late: missed %v, want %v", c.spec, c.late, got, c.want)
		}
	}
}

// TestCatchUpInterval: x-deliver-at 0 with every 1s, taken in 2026: once fires one firing
// as the latest occurrence, skip none, all the latest 100; not missed, each fires as due.
func TestCatchUpInterval(t *testing.T) {
	e := mustParse(t, "1s")
	due, at := time.UnixMilli(0), now.Add(400*time.Millisecond)
	for m, want := range map[Misfire]time.Time{MisfireOnce: now, MisfireAll: now.Add(-99 * time.Second)} {
		if got, fire := e.CatchUp(due, at, m); !fire || !got.Equal(want) {
			t.Errorf("%v: fires %v as %s, want %s", m, fire, got.UTC(), want)
		}
	}
	if got, fire := e.CatchUp(due, at, MisfireSkip); fire {
		t.Errorf("skip fires as %s", got)
	}
	if next := e.Next(due, at); !next.Equal(now.Add(time.Second)) {
		t.Errorf("skip: next %s, want %s", next, now.Add(time.Second))
	}
	// 30 missed: all fires each of them.
	due = now.Add(-30 * time.Second)
	if got, _ := e.CatchUp(due, at, MisfireAll); !got.Equal(due) {
		t.Errorf("all of 30: fires from %s, want %s", got, due)
	}
	for _, m := range []Misfire{MisfireOnce, MisfireSkip, MisfireAll} {
		if got, fire := e.CatchUp(now, at, m); !fire || !got.Equal(now) {
			t.Errorf("%v, 400 ms late: fires %v as %s, want as due", m, fire, got)
		}
	}
}

// TestCatchUpCron: the latest occurrences of a cron expression found backwards from now
// are those that stepping forward from due finds, for dense, sparse and zoned schedules.
func TestCatchUpCron(t *testing.T) {
	for _, c := range []struct {
		spec string
		back time.Duration
	}{
		{"* * * * * *", 10 * time.Minute}, {"*/7 * * * * *", time.Hour}, {"0 9 * * 1-5", 400 * 24 * time.Hour},
		{"CRON_TZ=Europe/Berlin 30 2 * * *", 300 * 24 * time.Hour}, {"0 0 29 2 *", 20 * 366 * 24 * time.Hour},
		{"0 0 1 1 *", 3 * 366 * 24 * time.Hour}, {"* * 1 1 *", 600 * 24 * time.Hour},
	} {
		e := mustParse(t, c.spec)
		due := now.Add(-c.back)
		occ := []time.Time{due}
		for at := e.cron.Next(due); !at.After(now); at = e.cron.Next(at) {
			occ = append(occ, at)
		}
		for m, k := range map[Misfire]int{MisfireOnce: 1, MisfireAll: MaxCatchUp} {
			want := occ[max(0, len(occ)-k)]
			if got, fire := e.CatchUp(due, now, m); !fire || !got.Equal(want) {
				t.Errorf("%q from %s, %v: fires as %s, want %s (%d occurrences)", c.spec, due.Format(time.RFC3339), m, got, want, len(occ))
			}
		}
	}
}

// counting counts the Next calls of a cron schedule.
type counting struct {
	cron.Schedule
	n *int
}

func (c counting) Next(t time.Time) time.Time {
	*c.n++
	return c.Schedule.Next(t)
}

// TestCatchUpBounded: from 1970 to now, a catch-up takes a bounded number of steps,
// whatever the schedule (no walk over the occurrences in between).
func TestCatchUpBounded(t *testing.T) {
	for _, spec := range []string{"* * * * * *", "0 0 29 2 *", "0 9 * * 1-5", "* * 1 1 *", "0 0 1 1 *"} {
		e := mustParse(t, spec)
		var n int
		e.cron = counting{e.cron, &n}
		start := time.Now()
		for _, m := range []Misfire{MisfireOnce, MisfireAll} {
			e.CatchUp(time.UnixMilli(0), now, m)
		}
		if limit := (MaxCatchUp + 2) * 3 * maxSearch; n > limit {
			t.Errorf("%q: %d calls of Next, want at most %d", spec, n, limit)
		}
		t.Logf("%q: %d calls of Next, %s", spec, n, time.Since(start))
	}
	e := mustParse(t, "1s")
	if got, _ := e.CatchUp(time.UnixMilli(0), time.Unix(1<<40, 0), MisfireAll); got.Before(time.UnixMilli(0)) {
		t.Errorf("far future: %s", got)
	}
}
