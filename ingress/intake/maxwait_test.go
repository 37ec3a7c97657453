package intake

import (
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/contract"
)

// TestPrepareMaxWait: x-delay-max-wait takes the x-delay grammar, at least 1 ms and at
// most BRIDGE_MAX_DELAY, with x-delay-id (or a kafka-message-scheduler key, which acts as
// one); it is kept with the message, not forwarded, and leaves the due time to the store.
// A bad, repeated, zero or too long one, one without x-delay-id, or one with x-delay-every
// is refused as invalid_max_wait.
func TestPrepareMaxWait(t *testing.T) {
	r := prepareRules() // MaxDelay 24h
	now := time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		hs      []string
		key     string
		maxWait time.Duration
		reason  string
	}{
		{name: "none", hs: []string{"x-delay-id", "d", "x-delay", "2s"}},
		{name: "go duration", hs: []string{"x-delay-id", "d", "x-delay", "2s", "X-Delay-Max-Wait", "3s"}, maxWait: 3 * time.Second},
		{name: "milliseconds", hs: []string{"x-delay-id", "d", "x-delay-max-wait", "1500"}, maxWait: 1500 * time.Millisecond},
		{name: "iso 8601", hs: []string{"x-delay-id", "d", "x-deliver-at", "1795600000000", "x-delay-max-wait", "PT1M"}, maxWait: time.Minute},
		{name: "sub-millisecond part dropped", hs: []string{"x-delay-id", "d", "x-delay-max-wait", "1.0009s"}, maxWait: time.Second},
		{name: "the maximum delay", hs: []string{"x-delay-id", "d", "x-delay-max-wait", "24h"}, maxWait: 24 * time.Hour},
		{name: "scheduler key as the id", hs: []string{"scheduler-epoch", "1795600000", "scheduler-target-topic", "out", "x-delay-max-wait", "1m"},
			key: "k", maxWait: time.Minute},
		{name: "beyond the maximum delay", hs: []string{"x-delay-id", "d", "x-delay-max-wait", "24h1ms"}, reason: contract.ReasonInvalidMaxWait},
		{name: "zero", hs: []string{"x-delay-id", "d", "x-delay-max-wait", "0"}, reason: contract.ReasonInvalidMaxWait},
		{name: "under a millisecond", hs: []string{"x-delay-id", "d", "x-delay-max-wait", "500us"}, reason: contract.ReasonInvalidMaxWait},
		{name: "negative", hs: []string{"x-delay-id", "d", "x-delay-max-wait", "-3s"}, reason: contract.ReasonInvalidMaxWait},
		{name: "malformed", hs: []string{"x-delay-id", "d", "x-delay-max-wait", "soon"}, reason: contract.ReasonInvalidMaxWait},
		{name: "overflowing", hs: []string{"x-delay-id", "d", "x-delay-max-wait", "99999999999999999999"}, reason: contract.ReasonInvalidMaxWait},
		{name: "repeated", hs: []string{"x-delay-id", "d", "x-delay-max-wait", "1s", "x-delay-max-wait", "1s"}, reason: contract.ReasonInvalidMaxWait},
		{name: "without x-delay-id", hs: []string{"x-delay", "2s", "x-delay-max-wait", "3s"}, reason: contract.ReasonInvalidMaxWait},
		{name: "recurring", hs: []string{"x-delay-id", "d", "x-delay-every", "1m", "x-delay-max-wait", "3s"}, reason: contract.ReasonInvalidMaxWait},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hs := append([]string{"keep", "me"}, tt.hs...)
			if tt.key == "" {
				hs = append(hs, "x-target", "a.b")
			}
			in := prepareIn("kafka", hs...)
			in.Received = now
			if tt.key != "" {
				in.Key = []byte(tt.key)
			}
			req, err := r.Prepare(in, now)
			if got := Reason(err); got != tt.reason {
				t.Fatalf("reason %q (%v), want %q", got, err, tt.reason)
			}
			if err != nil {
				return
			}
			if req.Envelope.MaxWait != tt.maxWait || req.Envelope.DueBy != 0 || !req.Replace {
				t.Errorf("max wait %s, due by %d, replace %v; want %s, 0, true", req.Envelope.MaxWait, req.Envelope.DueBy, req.Replace, tt.maxWait)
			}
			for _, h := range req.Envelope.Headers {
				if h.Key == "x-delay-max-wait" || h.Key == "X-Delay-Max-Wait" {
					t.Errorf("forwarded %q", req.Envelope.Headers)
				}
			}
		})
	}
}
