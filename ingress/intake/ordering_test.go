package intake

import (
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/contract"
)

// TestPrepareOrderingKey: x-delay-ordering-key (1 to 256 bytes, as given) is kept with
// the message and not forwarded; repeated, empty, too long, not UTF-8, with a control
// character, or on a recurring message it
// is refused as invalid_ordering_key.
func TestPrepareOrderingKey(t *testing.T) {
	r := prepareRules()
	r.MaxHeaderBytes = 4096 // a 256-byte key and its name
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	long := strings.Repeat("k", contract.MaxOrderingKey)
	for _, tt := range []struct {
		name   string
		hs     []string
		key    string
		reason string
	}{
		{name: "none", hs: []string{"x-delay", "2s"}},
		{name: "a key", hs: []string{"x-delay", "2s", "X-Delay-Ordering-Key", "order-42"}, key: "order-42"},
		{name: "256 bytes", hs: []string{"x-delay-ordering-key", long}, key: long},
		{name: "with an id", hs: []string{"x-delay-id", "d", "x-delay-ordering-key", "o 1"}, key: "o 1"},
		{name: "257 bytes", hs: []string{"x-delay-ordering-key", long + "k"}, reason: contract.ReasonInvalidOrderingKey},
		{name: "a star and markup", hs: []string{"x-delay-ordering-key", `<b>*"</b>`}, key: `<b>*"</b>`},
		{name: "not UTF-8", hs: []string{"x-delay-ordering-key", "k\xff"}, reason: contract.ReasonInvalidOrderingKey},
		{name: "NUL", hs: []string{"x-delay-ordering-key", "k\x00"}, reason: contract.ReasonInvalidOrderingKey},
		{name: "escape", hs: []string{"x-delay-ordering-key", "k\x1b[2J"}, reason: contract.ReasonInvalidOrderingKey},
		{name: "C1", hs: []string{"x-delay-ordering-key", "k\u0085"}, reason: contract.ReasonInvalidOrderingKey},
		{name: "empty", hs: []string{"x-delay-ordering-key", ""}, reason: contract.ReasonInvalidOrderingKey},
		{name: "repeated", hs: []string{"x-delay-ordering-key", "a", "x-delay-ordering-key", "a"}, reason: contract.ReasonInvalidOrderingKey},
		{name: "recurring", hs: []string{"x-delay-id", "d", "x-delay-every", "1m", "x-delay-ordering-key", "a"}, reason: contract.ReasonInvalidOrderingKey},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := prepareIn("nats", append([]string{"x-target", "a.b"}, tt.hs...)...)
			in.Received = now
			req, err := r.Prepare(in, now)
			if got := Reason(err); got != tt.reason {
				t.Fatalf("reason %q (%v), want %q", got, err, tt.reason)
			}
			if err != nil {
				return
			}
			if req.Envelope.OrderingKey != tt.key {
				t.Fatalf("ordering key %q, want %q", req.Envelope.OrderingKey, tt.key)
			}
			if vs := req.Envelope.Headers.Values(contract.HeaderOrderingKey); len(vs) != 0 {
				t.Fatalf("forwarded %s: %q", contract.HeaderOrderingKey, vs)
			}
		})
	}
}
