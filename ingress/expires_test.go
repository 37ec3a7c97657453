package ingress

import (
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/contract"
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
