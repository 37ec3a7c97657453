package intake

import (
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/contract"
)

// TestPrepareExpires: x-delay-expires takes the x-delay grammar, is kept with the message
// (Envelope.Expires, whole milliseconds) and not forwarded; a bad one is refused as
// invalid_expires.
func TestPrepareExpires(t *testing.T) {
	r := prepareRules()
	for _, tt := range []struct {
		value  []string
		want   time.Duration
		reason string
	}{
		{value: nil, want: 0},
		{value: []string{"5m"}, want: 5 * time.Minute},
		{value: []string{"1500"}, want: 1500 * time.Millisecond},
		{value: []string{"PT1H"}, want: time.Hour},
		{value: []string{"1.0009s"}, want: 1000 * time.Millisecond},
		{value: []string{"1ms"}, want: time.Millisecond},
		{value: []string{"0"}, reason: contract.ReasonInvalidExpires},
		{value: []string{"999us"}, reason: contract.ReasonInvalidExpires},
		{value: []string{"-5s"}, reason: contract.ReasonInvalidExpires},
		{value: []string{"soon"}, reason: contract.ReasonInvalidExpires},
		{value: []string{""}, reason: contract.ReasonInvalidExpires},
		{value: []string{"1s", "2s"}, reason: contract.ReasonInvalidExpires},
	} {
		hs := []string{"x-target", "a.b", "x-delay", "1s", "keep", "me"}
		for _, v := range tt.value {
			hs = append(hs, "X-Delay-Expires", v)
		}
		req, err := r.Prepare(prepareIn("nats", hs...), time.Now())
		if got := Reason(err); got != tt.reason {
			t.Fatalf("%q: reason %q (%v), want %q", tt.value, got, err, tt.reason)
		}
		if err != nil {
			continue
		}
		if req.Envelope.Expires != tt.want {
			t.Errorf("%q: expires %s, want %s", tt.value, req.Envelope.Expires, tt.want)
		}
		if want := hl("keep", "me", contract.HeaderHops, "1"); !equalList(req.Envelope.Headers, want) {
			t.Errorf("%q: forwarded %q, want %q", tt.value, req.Envelope.Headers, want)
		}
	}
}

// TestPrepareEvery: x-delay-every is kept with the message (Envelope.Every, as stored) and
// not forwarded; without x-delay or x-deliver-at the first firing is the schedule's first
// occurrence; with one, that due time; a bad one is refused as invalid_every. Nats-Schedule's
// repeating forms map onto it, Nats-Schedule-Time-Zone onto CRON_TZ=.
func TestPrepareEvery(t *testing.T) {
	r := prepareRules()
	now := time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		hs     []string
		every  string
		due    time.Time // absolute due; zero: relative delay wanted
		delay  time.Duration
		reason string
	}{
		{name: "interval, first after one interval", hs: []string{"x-delay-every", "30s"}, every: "30s", due: now.Add(30 * time.Second)},
		{name: "interval with x-delay", hs: []string{"x-delay-every", "1h", "x-delay", "5s"}, every: "1h0m0s", delay: 5 * time.Second},
		{name: "cron with a zone", hs: []string{"X-Delay-Every", "CRON_TZ=Europe/Berlin 0 9 * * *"}, every: "CRON_TZ=Europe/Berlin 0 9 * * *",
			due: time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC).Add(24 * time.Hour)},
		{name: "cron with x-deliver-at", hs: []string{"x-delay-every", "0 9 * * *", "x-deliver-at", "1795600000000"}, every: "0 9 * * *", due: time.UnixMilli(1795600000000)},
		{name: "NATS @every", hs: []string{"Nats-Schedule", "@every 5m"}, every: "5m0s", due: now.Add(5 * time.Minute)},
		{name: "NATS cron with seconds and a zone", hs: []string{"Nats-Schedule", "0 30 9 * * *", "Nats-Schedule-Time-Zone", "America/New_York"},
			every: "CRON_TZ=America/New_York 0 30 9 * * *", due: time.Date(2026, 11, 25, 14, 30, 0, 0, time.UTC)},
		{name: "NATS descriptor", hs: []string{"Nats-Schedule", "@hourly"}, every: "@hourly", due: now.Add(30 * time.Minute)},
		{name: "under a second", hs: []string{"x-delay-every", "500ms"}, reason: contract.ReasonInvalidEvery},
		{name: "not a schedule", hs: []string{"x-delay-every", "daily"}, reason: contract.ReasonInvalidEvery},
		{name: "unknown zone", hs: []string{"x-delay-every", "CRON_TZ=Nowhere/Town 0 9 * * *"}, reason: contract.ReasonInvalidEvery},
		{name: "repeated", hs: []string{"x-delay-every", "1m", "x-delay-every", "1m"}, reason: contract.ReasonInvalidEvery},
		{name: "NATS zone twice", hs: []string{"Nats-Schedule", "0 0 9 * * *", "Nats-Schedule-Time-Zone", "UTC", "Nats-Schedule-Time-Zone", "UTC"}, reason: contract.ReasonInvalidEvery},
	} {
		req, err := r.Prepare(prepareIn("nats", append([]string{"x-target", "a.b", "keep", "me"}, tt.hs...)...), now)
		if got := Reason(err); got != tt.reason {
			t.Fatalf("%s: reason %q (%v), want %q", tt.name, got, err, tt.reason)
		}
		if err != nil {
			continue
		}
		if req.Envelope.Every != tt.every {
			t.Errorf("%s: every %q, want %q", tt.name, req.Envelope.Every, tt.every)
		}
		if !tt.due.IsZero() && (!req.Absolute || req.At != tt.due.UnixMilli()) {
			t.Errorf("%s: due absolute=%v at=%s, want %s", tt.name, req.Absolute, time.UnixMilli(req.At).UTC(), tt.due)
		}
		if tt.due.IsZero() && (req.Absolute || req.Delay != tt.delay) {
			t.Errorf("%s: due absolute=%v delay=%s, want delay %s", tt.name, req.Absolute, req.Delay, tt.delay)
		}
		if want := hl("keep", "me", contract.HeaderHops, "1"); !equalList(req.Envelope.Headers, want) {
			t.Errorf("%s: forwarded %q, want %q", tt.name, req.Envelope.Headers, want)
		}
	}
}

// TestPrepareMisfire: x-delay-misfire is kept with the message only when it is not the
// default (Envelope.Misfire "" is once) and not forwarded; a Nats-Schedule repeating form
// gets the default, once, which is what NATS does with missed schedules; a bad value, a
// repeated one, or one on a message that is not recurring is refused as invalid_every.
func TestPrepareMisfire(t *testing.T) {
	r := prepareRules()
	now := time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		hs      []string
		misfire string
		reason  string
	}{
		{name: "absent: once", hs: []string{"x-delay-every", "1s"}},
		{name: "once: the default, not stored", hs: []string{"x-delay-every", "1s", "x-delay-misfire", "once"}},
		{name: "skip", hs: []string{"x-delay-every", "1s", "X-Delay-Misfire", "skip"}, misfire: "skip"},
		{name: "all, any case", hs: []string{"x-delay-every", "0 9 * * *", "x-delay-misfire", "ALL"}, misfire: "all"},
		{name: "NATS @every: once", hs: []string{"Nats-Schedule", "@every 1s"}},
		{name: "NATS cron with a policy", hs: []string{"Nats-Schedule", "0 0 9 * * *", "x-delay-misfire", "skip"}, misfire: "skip"},
		{name: "unknown", hs: []string{"x-delay-every", "1s", "x-delay-misfire", "latest"}, reason: contract.ReasonInvalidEvery},
		{name: "repeated", hs: []string{"x-delay-every", "1s", "x-delay-misfire", "skip", "x-delay-misfire", "skip"}, reason: contract.ReasonInvalidEvery},
		{name: "not recurring", hs: []string{"x-delay", "5s", "x-delay-misfire", "skip"}, reason: contract.ReasonInvalidEvery},
	} {
		req, err := r.Prepare(prepareIn("nats", append([]string{"x-target", "a.b", "keep", "me"}, tt.hs...)...), now)
		if got := Reason(err); got != tt.reason {
			t.Fatalf("%s: reason %q (%v), want %q", tt.name, got, err, tt.reason)
		}
		if err != nil {
			if !strings.Contains(err.Error(), contract.HeaderMisfire) {
				t.Errorf("%s: %v does not name %s", tt.name, err, contract.HeaderMisfire)
			}
			continue
		}
		if req.Envelope.Misfire != tt.misfire {
			t.Errorf("%s: misfire %q, want %q", tt.name, req.Envelope.Misfire, tt.misfire)
		}
		if want := hl("keep", "me", contract.HeaderHops, "1"); !equalList(req.Envelope.Headers, want) {
			t.Errorf("%s: forwarded %q, want %q", tt.name, req.Envelope.Headers, want)
		}
	}
}

// TestEveryBoundedByMaxDelay (issue 37 item 7): a recurring schedule whose firings would
// lie further than BRIDGE_MAX_DELAY apart is invalid_every through every header form
// (x-delay-every from NATS or Kafka, Nats-Schedule's @every and cron forms): an interval
// longer than it (the largest Duration among them: its first firing would be in 2319), a
// cron expression whose next occurrence lies beyond it (29 February, 30 February). An
// interval of exactly BRIDGE_MAX_DELAY and a cron expression that fires within it pass.
func TestEveryBoundedByMaxDelay(t *testing.T) {
	r := prepareRules()
	r.MaxDelay = 8760 * time.Hour
	now := time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		hs     []string
		reason string
	}{
		{"the largest Duration", []string{"x-delay-every", "2562047h47m16s"}, contract.ReasonInvalidEvery},
		{"one second over", []string{"x-delay-every", "8760h0m1s"}, contract.ReasonInvalidEvery},
		{"over, with x-delay", []string{"x-delay-every", "9000h", "x-delay", "1s"}, contract.ReasonInvalidEvery},
		{"over, with x-deliver-at", []string{"x-delay-every", "9000h", "x-deliver-at", "1795600000000"}, contract.ReasonInvalidEvery},
		{"NATS @every over", []string{"Nats-Schedule", "@every 8761h"}, contract.ReasonInvalidEvery},
		{"29 February (next in 2028)", []string{"x-delay-every", "0 0 29 2 *"}, contract.ReasonInvalidEvery},
		{"30 February (never)", []string{"x-delay-every", "0 0 30 2 *"}, contract.ReasonInvalidEvery},
		{"NATS cron of 29 February", []string{"Nats-Schedule", "0 0 0 29 2 *"}, contract.ReasonInvalidEvery},
		{"exactly the maximum", []string{"x-delay-every", "8760h"}, ""},
		{"yearly", []string{"x-delay-every", "@yearly"}, ""},
		{"1 March", []string{"Nats-Schedule", "0 0 0 1 3 *"}, ""},
	} {
		for _, broker := range []string{"nats", "kafka"} {
			req, err := r.Prepare(prepareIn(broker, append([]string{"x-target", "a.b"}, tt.hs...)...), now)
			if got := Reason(err); got != tt.reason {
				t.Fatalf("%s from %s: reason %q (%v), want %q", tt.name, broker, got, err, tt.reason)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "BRIDGE_MAX_DELAY") && !strings.Contains(err.Error(), "never fires") {
					t.Errorf("%s: %q does not name BRIDGE_MAX_DELAY", tt.name, err)
				}
				continue
			}
			if req.Absolute && time.UnixMilli(req.At).Sub(now) > r.MaxDelay {
				t.Errorf("%s: first firing %s, beyond the maximum", tt.name, time.UnixMilli(req.At).UTC())
			}
		}
	}
}
