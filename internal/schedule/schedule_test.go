package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func mustParse(t *testing.T, s string) Every {
	t.Helper()
	e, err := Parse(s, now)
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return e
}

func TestParse(t *testing.T) {
	for s, want := range map[string]string{
		"30s":                              "30s",
		"1h":                               "1h0m0s",
		"1s":                               "1s",
		"@every 90s":                       "1m30s",
		"0 9 * * 1-5":                      "0 9 * * 1-5",
		"CRON_TZ=Europe/Berlin 0 9 * * *":  "CRON_TZ=Europe/Berlin 0 9 * * *",
		"*/10 * * * * *":                   "*/10 * * * * *",
		"@daily":                           "@daily",
		"CRON_TZ=America/New_York @hourly": "CRON_TZ=America/New_York @hourly",
	} {
		if got := mustParse(t, s).String(); got != want {
			t.Errorf("Parse(%q).String() = %q, want %q", s, got, want)
		}
	}
	for _, s := range []string{"", "999ms", "0s", "-5s", "1500", "soon", "@every", "@every 10ms", "@reboot",
		"0 9 * *", "61 * * * *", "0 9 * * * * *", "CRON_TZ=Mars/Olympus 0 9 * * *", "0 0 30 2 *"} {
		if _, err := Parse(s, now); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

// TestMachineZoneRefused (issue 23 item 9, docs/contract.md section 9): CRON_TZ=Local
// (and TZ=Local, and localtime, a link to /etc/localtime) is each replica's own zone, which
// may differ: refused with a reason that says so; an IANA zone is taken.
func TestMachineZoneRefused(t *testing.T) {
	for _, s := range []string{"CRON_TZ=Local 0 9 * * *", "TZ=Local 0 9 * * *", "CRON_TZ=local @daily",
		"  CRON_TZ=Local\t0 9 * * 1-5", "CRON_TZ=localtime 0 9 * * *", "TZ=LOCALTIME 30 2 * * *", "CRON_TZ=Local */5 * * * * *"} {
		_, err := Parse(s, now)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "may differ between replicas") {
			t.Errorf("Parse(%q) = %v, want ErrInvalid naming the replicas' zones", s, err)
		}
	}
	for _, s := range []string{"CRON_TZ=UTC 0 9 * * *", "TZ=Europe/Berlin 0 9 * * *", "CRON_TZ=America/New_York @hourly"} {
		if _, err := Parse(s, now); err != nil {
			t.Errorf("Parse(%q) = %v", s, err)
		}
	}
}

// TestIntervalNext: an interval counts from the due time of the firing, so a late
// confirmation does not shift the next one, and missed occurrences are skipped.
func TestIntervalNext(t *testing.T) {
	e := mustParse(t, "10s")
	due := now
	for _, c := range []struct {
		done time.Duration
		want time.Duration
	}{{5 * time.Millisecond, 10 * time.Second}, {9 * time.Second, 10 * time.Second}, {10 * time.Second, 20 * time.Second}, {35 * time.Second, 40 * time.Second}} {
		if got := e.Next(due, due.Add(c.done)).Sub(due); got != c.want {
			t.Errorf("confirmed %s after due: next %s after due, want %s", c.done, got, c.want)
		}
	}
	if got := e.First(now); !got.Equal(now.Add(10 * time.Second)) {
		t.Errorf("First = %s", got)
	}
}

// fire steps e from start n times (each firing confirmed at its due time) and returns the
// firings in UTC.
func fire(e Every, start time.Time, n int) []string {
	var out []string
	at := start
	for range n {
		at = e.Next(at, at)
		out = append(out, at.UTC().Format("01-02 15:04Z"))
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCronAcrossDST: a cron expression with CRON_TZ through both daylight-saving changes
// of 2026 in Europe/Berlin (29 March 02:00 -> 03:00, 25 October 03:00 -> 02:00) and in
// America/New_York (1 November 02:00 -> 01:00), with the clock given, not read.
func TestCronAcrossDST(t *testing.T) {
	march := time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC)
	october := time.Date(2026, 10, 23, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name, spec string
		start      time.Time
		n          int
		want       []string
	}{
		{"fixed time fires at its local time (CET = UTC+1, CEST = UTC+2)", "CRON_TZ=Europe/Berlin 0 9 * * *", march, 3,
			[]string{"03-28 08:00Z", "03-29 07:00Z", "03-30 07:00Z"}},
		{"a time the spring-forward skips fires once, the gap later", "CRON_TZ=Europe/Berlin 30 2 * * *", march, 3,
			[]string{"03-28 01:30Z", "03-29 01:30Z", "03-30 00:30Z"}},
		{"a time the fall-back repeats fires once, at its first pass", "CRON_TZ=Europe/Berlin 30 2 * * *", october, 3,
			[]string{"10-24 00:30Z", "10-25 00:30Z", "10-26 01:30Z"}},
		{"the same in New York", "CRON_TZ=America/New_York 30 1 * * *", time.Date(2026, 10, 30, 12, 0, 0, 0, time.UTC), 3,
			[]string{"10-31 05:30Z", "11-01 05:30Z", "11-02 06:30Z"}},
		{"a list in the repeated hour fires each time once", "CRON_TZ=Europe/Berlin 0,30 2 * * *", time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC), 3,
			[]string{"10-25 00:00Z", "10-25 00:30Z", "10-26 01:00Z"}},
		{"a wildcard hour follows real time through the repeated hour", "CRON_TZ=Europe/Berlin 0 * * * *", time.Date(2026, 10, 24, 23, 30, 0, 0, time.UTC), 4,
			[]string{"10-25 00:00Z", "10-25 01:00Z", "10-25 02:00Z", "10-25 03:00Z"}},
		{"without CRON_TZ: UTC", "0 9 * * *", october, 2, []string{"10-24 09:00Z", "10-25 09:00Z"}},
		{"six fields: seconds first", "*/20 * * * * *", now, 3, []string{"11-25 12:00Z", "11-25 12:00Z", "11-25 12:01Z"}},
	} {
		if got := fire(mustParse(t, c.spec), c.start, c.n); !equal(got, c.want) {
			t.Errorf("%s: %q from %s fires %v, want %v", c.name, c.spec, c.start.Format(time.RFC3339), got, c.want)
		}
	}
}

// TestCronNextSkipsMissed: a cron firing confirmed late steps from the confirmation: the
// occurrences in between are not fired.
func TestCronNextSkipsMissed(t *testing.T) {
	e := mustParse(t, "0 * * * *")
	due := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	if got := e.Next(due, due.Add(150*time.Minute)); !got.Equal(due.Add(3 * time.Hour)) {
		t.Fatalf("next = %s", got)
	}
}
