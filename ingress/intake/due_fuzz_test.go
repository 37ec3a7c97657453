package intake

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/contract"
)

// dueHeaders are the headers a due time is computed from at ingress (fuzzed one at a
// time, by index).
var dueHeaders = []string{contract.HeaderDelay, contract.HeaderDeliverAt, HeaderNATSSchedule, HeaderSchedulerEpoch,
	contract.HeaderEvery, contract.HeaderExpires}

// FuzzPrepareDue: whatever the time headers say, Prepare refuses the message or gives a
// park request that is never early and within the bound: a relative delay in
// [0, BRIDGE_MAX_DELAY], an absolute due in [0, now + BRIDGE_MAX_DELAY] (a due in the
// past is due at once), the first occurrence of a schedule strictly after now (schedules
// are bounded by their own grammar, not by BRIDGE_MAX_DELAY: docs/guarantees.md "Where the contract
// is silent"), and an expiry > 0. Seeds: int64 limits, RFC 3339 years 0001 and 9999,
// negative and huge values in every grammar.
func FuzzPrepareDue(f *testing.F) {
	for _, s := range []struct {
		header int
		value  string
	}{
		{0, "9223372036854775807"}, {0, "9223372036854775"}, {0, "2562047h47m16.854775807s"}, {0, "-1s"},
		{0, "P106751DT23H47M16.854775807S"}, {0, "PT0.0000000001S"}, {0, "24h"}, {0, "86400001"},
		{1, "9223372036854775807"}, {1, "0001-01-01T00:00:00Z"}, {1, "9999-12-31T23:59:59.999999999Z"},
		{1, "0000-01-01T00:00:00+23:59"}, {1, "1969-12-31T23:59:59.999Z"}, {1, "2026-11-22T15:04:05.0001Z"}, {1, "0"},
		{2, "@at 9999-12-31T23:59:59Z"}, {2, "@at 0001-01-01T00:00:00Z"}, {2, "@every 2562047h"}, {2, "@yearly"},
		{3, "9223372036854775"}, {3, "9223372036854775807"}, {3, "0"}, {3, "1795359845"},
		{4, "2562047h47m16s"}, {4, "1s"}, {4, "0 0 29 2 *"}, {4, "@every 9223372036s"},
		{5, "2562047h47m16.854775807s"}, {5, "9223372036854775807"}, {5, "0.5ms"},
	} {
		f.Add(s.header, s.value, int64(1795273445000))
	}
	f.Add(1, "9223372036854775807", int64(math.MaxInt64-1))
	f.Add(1, "0001-01-01T00:00:00Z", int64(0))
	r := prepareRules()
	f.Fuzz(func(t *testing.T, header int, value string, nowMs int64) {
		if header < 0 || header >= len(dueHeaders) || nowMs < 0 || nowMs > 1<<50 {
			return // a clock between 1970 and the year 37648
		}
		now := time.UnixMilli(nowMs)
		in := prepareIn("nats", "x-target", "a.b", dueHeaders[header], value)
		in.Received = now
		req, err := r.Prepare(in, now)
		if err != nil {
			return
		}
		bound := contract.Horizon{Now: nowMs, MaxDelay: r.MaxDelay}
		switch {
		case req.Envelope.Every != "" && req.Absolute && !(header == 1 || header == 2 && value[:min(4, len(value))] == "@at "):
			if req.At <= nowMs {
				t.Fatalf("%s %q: first occurrence %d not after now %d", dueHeaders[header], value, req.At, nowMs)
			}
		case req.Absolute && (req.At < 0 || req.At > bound.Latest()):
			t.Fatalf("%s %q: due %d outside [0, %d]", dueHeaders[header], value, req.At, bound.Latest())
		case !req.Absolute && (req.Delay < 0 || req.Delay > r.MaxDelay):
			t.Fatalf("%s %q: delay %s outside [0, %s]", dueHeaders[header], value, req.Delay, r.MaxDelay)
		case req.Envelope.Expires < 0 || header == 5 && req.Envelope.Expires == 0:
			t.Fatalf("%s %q: expires %s", dueHeaders[header], value, req.Envelope.Expires)
		}
		if req.Absolute && header == 1 {
			if at, _ := ParseDeliverAt(value); at >= 0 && at != req.At {
				t.Fatalf("x-deliver-at %q: due %d, want %s", value, req.At, strconv.FormatInt(at, 10))
			}
		}
	})
}
