package intake

import (
	"fmt"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/contract"
)

// TestPrepareWindow: x-delay-window takes the x-delay grammar up to an hour and is not
// forwarded; the due time becomes one drawn in [due, due + window] (an absolute one
// stays absolute, a relative one relative: the store adds the Redis time), the window
// is kept with the message; a bad or too long one is refused as invalid_window, and a
// window whose end lies beyond BRIDGE_MAX_DELAY as delay_too_long.
func TestPrepareWindow(t *testing.T) {
	r := prepareRules() // MaxDelay 24h
	now := time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC)
	at := now.Add(time.Hour).UnixMilli()
	for _, tt := range []struct {
		name   string
		hs     []string
		window time.Duration
		reason string
	}{
		{name: "none", hs: []string{"x-delay", "5s"}},
		{name: "zero", hs: []string{"x-delay", "5s", "x-delay-window", "0"}},
		{name: "relative", hs: []string{"x-delay", "5s", "X-Delay-Window", "10s"}, window: 10 * time.Second},
		{name: "absolute", hs: []string{"x-deliver-at", fmt.Sprint(at), "x-delay-window", "PT1H"}, window: time.Hour},
		{name: "due now", hs: []string{"x-delay-window", "1500"}, window: 1500 * time.Millisecond},
		{name: "sub-millisecond part dropped", hs: []string{"x-delay", "1s", "x-delay-window", "1.0009s"}, window: time.Second},
		{name: "longer than an hour", hs: []string{"x-delay", "1s", "x-delay-window", "61m"}, reason: contract.ReasonInvalidWindow},
		{name: "negative", hs: []string{"x-delay", "1s", "x-delay-window", "-5s"}, reason: contract.ReasonInvalidWindow},
		{name: "malformed", hs: []string{"x-delay", "1s", "x-delay-window", "soon"}, reason: contract.ReasonInvalidWindow},
		{name: "overflowing", hs: []string{"x-delay", "1s", "x-delay-window", "99999999999999999999"}, reason: contract.ReasonInvalidWindow},
		{name: "repeated", hs: []string{"x-delay", "1s", "x-delay-window", "1s", "x-delay-window", "1s"}, reason: contract.ReasonInvalidWindow},
		{name: "relative end beyond the maximum delay", hs: []string{"x-delay", "23h59m", "x-delay-window", "2m"}, reason: contract.ReasonDelayTooLong},
		{name: "absolute end beyond the maximum delay", hs: []string{"x-deliver-at", fmt.Sprint(now.Add(24 * time.Hour).UnixMilli()), "x-delay-window", "1ms"}, reason: contract.ReasonDelayTooLong},
		{name: "absolute end overflows", hs: []string{"x-deliver-at", "9223372036854775807", "x-delay-window", "1h"}, reason: contract.ReasonDelayTooLong},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hs := append([]string{"x-target", "a.b", "keep", "me"}, tt.hs...)
			in := prepareIn("nats", hs...)
			in.Received = now
			req, err := r.Prepare(in, now)
			if got := Reason(err); got != tt.reason {
				t.Fatalf("reason %q (%v), want %q", got, err, tt.reason)
			}
			if err != nil {
				return
			}
			if req.Envelope.Window != tt.window || req.Envelope.Anchor != 0 {
				t.Errorf("window %s anchor %d, want %s and none", req.Envelope.Window, req.Envelope.Anchor, tt.window)
			}
			if want := hl("keep", "me", contract.HeaderHops, "1"); !equalList(req.Envelope.Headers, want) {
				t.Errorf("forwarded %q, want %q", req.Envelope.Headers, want)
			}
			// The same message without the window: the due time it is drawn from.
			plain := prepareIn("nats", "x-target", "a.b", "keep", "me")
			for i := 0; i+1 < len(tt.hs); i += 2 {
				if tt.hs[i] != "x-delay-window" && tt.hs[i] != "X-Delay-Window" {
					plain.Headers.Add(tt.hs[i], tt.hs[i+1])
				}
			}
			plain.Received = now
			base, err := r.Prepare(plain, now)
			if err != nil {
				t.Fatal(err)
			}
			if req.Absolute != base.Absolute {
				t.Fatalf("absolute %v, want %v as without the window", req.Absolute, base.Absolute)
			}
			got, from := req.Delay.Milliseconds(), base.Delay.Milliseconds()
			if req.Absolute {
				got, from = req.At, base.At
			}
			if got < from || got > from+tt.window.Milliseconds() {
				t.Errorf("due %d, outside [%d, %d]", got, from, from+tt.window.Milliseconds())
			}
		})
	}
}

// TestPrepareWindowDraw: the draw is uniform over ids (10,000 messages due at one
// millisecond with a 10 s window: every second of it holds 1,000 +- 25%) and fixed by
// the id and the due time as given: a redelivery of the source message draws the same.
func TestPrepareWindowDraw(t *testing.T) {
	r := prepareRules()
	now := time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC)
	at := now.Add(time.Minute).UnixMilli()
	var perSecond [10]int
	for i := range 10_000 {
		in := prepareIn("nats", "x-target", "a.b", "x-deliver-at", fmt.Sprint(at), "x-delay-window", "10s")
		in.SourceID = fmt.Sprintf("js:IN:%d", i)
		req, err := r.Prepare(in, now)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := r.Prepare(in, now.Add(time.Second)) // redelivered a second later
		if again.At != req.At {
			t.Fatalf("%s drew %d, its redelivery %d", in.SourceID, req.At, again.At)
		}
		off := req.At - at
		if off < 0 || off > 10_000 {
			t.Fatalf("%s drawn %d ms after its due time", in.SourceID, off)
		}
		perSecond[min(off/1000, 9)]++
	}
	for s, n := range perSecond {
		if n < 750 || n > 1250 {
			t.Errorf("second %d of the window holds %d messages, want 1000 +- 25%% (all: %v)", s, n, perSecond)
		}
	}
}

// TestPrepareWindowRecurring: a recurring message with a window is parked at an absolute
// time (its first firing drawn in the window of its first occurrence, x-delay counted
// from receipt) and remembers that occurrence (Envelope.Anchor), which its next firings
// count from.
func TestPrepareWindowRecurring(t *testing.T) {
	r := prepareRules()
	now := time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		hs    []string
		first int64
	}{
		{"first occurrence", []string{"x-delay-every", "1h"}, now.Add(time.Hour).UnixMilli()},
		{"x-delay", []string{"x-delay-every", "1h", "x-delay", "5s"}, now.Add(5 * time.Second).UnixMilli()},
		{"x-deliver-at", []string{"x-delay-every", "0 9 * * *", "x-deliver-at", "1795600000000"}, 1795600000000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := prepareIn("nats", append([]string{"x-target", "a.b", "x-delay-window", "10m"}, tt.hs...)...)
			in.Received = now
			req, err := r.Prepare(in, now)
			if err != nil {
				t.Fatal(err)
			}
			if !req.Absolute || req.Envelope.Anchor != tt.first || req.Envelope.Window != 10*time.Minute {
				t.Fatalf("absolute %v anchor %d window %s, want true, %d, 10m", req.Absolute, req.Envelope.Anchor, req.Envelope.Window, tt.first)
			}
			if req.At < tt.first || req.At > tt.first+600_000 {
				t.Fatalf("first firing at %d, outside [%d, %d]", req.At, tt.first, tt.first+600_000)
			}
		})
	}
}
