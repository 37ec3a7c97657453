package intake

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

func prepareRules() Rules {
	return Rules{
		MaxDelay:   24 * time.Hour,
		MaxPayload: 1 << 20,
		Targets: TargetPolicy{
			Brokers: map[string]bool{BrokerNATS: true, BrokerKafka: true},
			Allow:   []string{"*"},
			Own:     map[string][]string{BrokerNATS: {"delay.in"}, BrokerKafka: {"delay.in"}},
		},
		MaxHeaders:     10,
		MaxHeaderBytes: 256,
		MaxHops:        3,
	}
}

func prepareIn(broker string, hs ...string) Incoming {
	var l headers.List
	for i := 0; i+1 < len(hs); i += 2 {
		l.Add(hs[i], hs[i+1])
	}
	return Incoming{Headers: l, Broker: broker, Source: broker + ":delay.in", SourceID: "src-1", NewID: func() string { return "new" }}
}

// TestPrepareHeaders covers rows G8-G10 of docs/faults.md and the hop counter of G5.
func TestPrepareHeaders(t *testing.T) {
	r := prepareRules()
	now := time.Now()
	long := strings.Repeat("v", 250)
	tests := []struct {
		name   string
		in     Incoming
		reason string       // "" = accepted
		want   headers.List // forwarded headers when accepted (nil: not checked)
	}{
		{name: "plain", in: prepareIn("nats", "x-target", "a.b", "k", "v"), want: hl("k", "v", contract.HeaderHops, "1")},
		{name: "at the header count limit", in: prepareIn("nats", "x-target", "a.b", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f", "6", "g", "7", "h", "8", "i", "9")},
		{name: "one header too many", in: prepareIn("nats", "x-target", "a.b", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f", "6", "g", "7", "h", "8", "i", "9", "j", "10"), reason: contract.ReasonInvalidHeaders},
		{name: "header bytes over the limit", in: prepareIn("nats", "x-target", "a.b", "k", long), reason: contract.ReasonInvalidHeaders},
		{name: "header bytes at the limit", in: prepareIn("nats", "x-target", "a.b", "k", long[:256-len("x-target")-len("a.b")-1])},
		{name: "strips Nats-* and the bridge's own headers", in: prepareIn("nats", "x-target", "a.b",
			"Nats-Rollup", "all", "Nats-Expected-Last-Sequence", "1", "nats-msg-id", "evil", "Nats-TTL", "1s",
			"x-delay-due", "1", "X-Delay-Source", "forged", "x-delay-error", "forged", "t", "1"),
			want: hl("t", "1", contract.HeaderHops, "1")},
		{name: "refuses internal metadata keys", in: prepareIn("kafka", "x-target", "kafka:a.b",
			headers.MetaHeaders, "\x01\x0bNats-Rollup\x03all", "t", "1"), reason: contract.ReasonInvalidHeaders},
		{name: "refuses internal metadata keys in any case", in: prepareIn("kafka", "x-target", "kafka:a.b",
			"_DelayBridge_kafka_key", "k", "t", "1"), reason: contract.ReasonInvalidHeaders},
		{name: "hops counted up", in: prepareIn("nats", "x-target", "a.b", "X-Delay-Hops", "2"), want: hl(contract.HeaderHops, "3")},
		{name: "hops at the limit", in: prepareIn("nats", "x-target", "a.b", "x-delay-hops", "3"), reason: contract.ReasonTargetLoop},
		{name: "hops huge", in: prepareIn("nats", "x-target", "a.b", "x-delay-hops", "99999999999999999999999"), reason: contract.ReasonTargetLoop},
		{name: "hops not a number", in: prepareIn("nats", "x-target", "a.b", "x-delay-hops", "-1"), reason: contract.ReasonInvalidHeaders},
		{name: "hops repeated", in: prepareIn("nats", "x-target", "a.b", "x-delay-hops", "1", "x-delay-hops", "1"), reason: contract.ReasonInvalidHeaders},
		{name: "x-kafka-key repeated", in: prepareIn("kafka", "x-target", "a.b", "x-kafka-key", "1", "X-Kafka-Key", "2"), reason: contract.ReasonInvalidHeaders},
		{name: "x-delay repeated", in: prepareIn("kafka", "x-target", "a.b", "x-delay", "1s", "x-delay", "1s"), reason: contract.ReasonInvalidDelay},
		{name: "x-deliver-at repeated", in: prepareIn("kafka", "x-target", "a.b", "x-deliver-at", "1", "x-deliver-at", "1"), reason: contract.ReasonInvalidDeliverAt},
		{name: "x-target repeated", in: prepareIn("kafka", "x-target", "a.b", "X-Target", "a.b"), reason: contract.ReasonInvalidTarget},
		{name: "x-delay-id repeated", in: prepareIn("kafka", "x-target", "a.b", "x-delay-id", "a", "x-delay-id", "a"), reason: contract.ReasonInvalidID},
		{name: "CR LF in a value to NATS", in: prepareIn("kafka", "x-target", "nats:a.b", "x", "a\r\nNats-Msg-Id: evil"), reason: contract.ReasonInvalidHeaders},
		{name: "CR LF in a value Kafka to Kafka", in: prepareIn("kafka", "x-target", "a.b", "x", "a\r\nNats-Msg-Id: evil"),
			want: hl("x", "a\r\nNats-Msg-Id: evil", contract.HeaderHops, "1")},
		{name: "leading blank to NATS", in: prepareIn("kafka", "x-target", "nats:a.b", "x", " a"), reason: contract.ReasonInvalidHeaders},
		{name: "trailing tab to NATS", in: prepareIn("kafka", "x-target", "nats:a.b", "x", "a\t"), reason: contract.ReasonInvalidHeaders},
		{name: "inner blank to NATS", in: prepareIn("kafka", "x-target", "nats:a.b", "x", "a b")},
		{name: "non-UTF-8 value to NATS", in: prepareIn("kafka", "x-target", "nats:a.b", "x", "\xff\xfe"), reason: contract.ReasonInvalidHeaders},
		{name: "non-UTF-8 value to Kafka", in: prepareIn("kafka", "x-target", "a.b", "x", "\xff\xfe")},
		{name: "name with a colon to NATS", in: prepareIn("kafka", "x-target", "nats:a.b", "a:b", "1"), reason: contract.ReasonInvalidHeaders},
		{name: "name with a space to NATS", in: prepareIn("kafka", "x-target", "nats:a.b", "a b", "1"), reason: contract.ReasonInvalidHeaders},
		{name: "empty name to NATS", in: prepareIn("kafka", "x-target", "nats:a.b", "", "1"), reason: contract.ReasonInvalidHeaders},
		{name: "empty name to Kafka", in: prepareIn("kafka", "x-target", "a.b", "", "1")},
		{name: "bad value in a stripped header is fine", in: prepareIn("kafka", "x-target", "nats:a.b", "Nats-Rollup", "a\r\n")},
		{name: "Kafka key NATS would alter", in: func() Incoming {
			in := prepareIn("kafka", "x-target", "nats:a.b")
			in.Key = []byte("k\n")
			return in
		}(), reason: contract.ReasonInvalidHeaders},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := r.Prepare(tt.in, now)
			if got := Reason(err); got != tt.reason {
				t.Fatalf("reason %q (%v), want %q", got, err, tt.reason)
			}
			if err == nil && tt.want != nil && !equalList(req.Envelope.Headers, tt.want) {
				t.Fatalf("forwarded %q, want %q", req.Envelope.Headers, tt.want)
			}
		})
	}
}

// hl builds a header list from key, value pairs.
func hl(kv ...string) headers.List {
	var l headers.List
	for i := 0; i+1 < len(kv); i += 2 {
		l.Add(kv[i], kv[i+1])
	}
	return l
}

func equalList(a, b headers.List) bool {
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

// TestPrepareDefaultLimits: zero limits in Rules mean the documented defaults.
func TestPrepareDefaultLimits(t *testing.T) {
	r := prepareRules()
	r.MaxHeaders, r.MaxHeaderBytes, r.MaxHops = 0, 0, 0
	hs := []string{"x-target", "a.b"}
	for i := range DefaultMaxHeaders - 1 {
		hs = append(hs, "h"+strconv.Itoa(i), "v")
	}
	if _, err := r.Prepare(prepareIn("nats", hs...), time.Now()); err != nil {
		t.Fatalf("%d headers: %v", DefaultMaxHeaders, err)
	}
	if _, err := r.Prepare(prepareIn("nats", append(hs, "one", "more")...), time.Now()); Reason(err) != contract.ReasonInvalidHeaders {
		t.Fatalf("%d headers: %v", DefaultMaxHeaders+1, err)
	}
	big := strings.Repeat("v", DefaultMaxHeaderBytes)
	if _, err := r.Prepare(prepareIn("nats", "x-target", "a.b", "k", big), time.Now()); Reason(err) != contract.ReasonInvalidHeaders {
		t.Fatalf("%d bytes: %v", DefaultMaxHeaderBytes, err)
	}
	if _, err := r.Prepare(prepareIn("nats", "x-target", "a.b", contract.HeaderHops, strconv.Itoa(DefaultMaxHops-1)), time.Now()); err != nil {
		t.Fatalf("hops %d: %v", DefaultMaxHops-1, err)
	}
	if _, err := r.Prepare(prepareIn("nats", "x-target", "a.b", contract.HeaderHops, strconv.Itoa(DefaultMaxHops)), time.Now()); Reason(err) != contract.ReasonTargetLoop {
		t.Fatalf("hops %d: %v", DefaultMaxHops, err)
	}
}

// splitFuzzHeaders turns fuzz input into a header list: fields separated by NUL,
// alternately name and value.
func splitFuzzHeaders(data []byte) headers.List {
	var l headers.List
	parts := bytes.Split(data, []byte{0})
	for i := 0; i+1 < len(parts); i += 2 {
		l.Add(string(parts[i]), string(parts[i+1]))
	}
	return l
}

// FuzzPrepareHeaders: whatever the headers, Prepare never panics, rejects with a known
// reason, and an accepted message forwards no header the bridge owns, stays within the
// limits, carries exactly one x-delay-hops, and (to NATS) only headers NATS keeps intact.
func FuzzPrepareHeaders(f *testing.F) {
	for _, s := range []struct {
		data   string
		target string
	}{
		{"x-target\x00a.b\x00k\x00v", "nats:a.b"},
		{"Nats-Rollup\x00all\x00x\x00a\r\nNats-Msg-Id: evil", "nats:a.b"},
		{"x\x00a\r\nNats-Msg-Id: evil", "kafka:a.b"},
		{"_delaybridge_headers\x00\x01\x0bNats-Rollup\x03all", "kafka:a.b"},
		{"x-delay-hops\x007\x00x-delay-hops\x001", "nats:a.b"},
		{"x-delay\x001s\x00X-Delay\x002s", "kafka:a.b"},
		{"a:b\x001\x00 \x00 x ", "nats:a.b"},
		{"k\x00\xff\xfe", "nats:a.b"},
		{"x-delay-error\x00x\x00X-Delay-Due\x001\x00x-kafka-key\x00k", "nats:a.b"},
		{"Nats-Schedule\x00@at 2026-11-21T15:04:05Z\x00Nats-Schedule-Target\x00a.b", "nats:a.b"},
		{"scheduler-epoch\x001893456000\x00scheduler-target-key\x00 k\x00Scheduler-Target-Topic\x00t", "kafka:a.b"},
	} {
		f.Add([]byte(s.data), s.target)
	}
	r := prepareRules()
	f.Fuzz(func(t *testing.T, data []byte, target string) {
		in := prepareIn("kafka")
		in.Headers = splitFuzzHeaders(data)
		in.Headers.Add(contract.HeaderTarget, target)
		req, err := r.Prepare(in, time.Now())
		if err != nil {
			if Reason(err) == contract.ReasonUnknown {
				t.Fatalf("unknown reason: %v", err)
			}
			return
		}
		hs := req.Envelope.Headers
		if len(hs) > r.MaxHeaders+1 {
			t.Fatalf("%d headers forwarded", len(hs))
		}
		hops := 0
		for _, h := range hs {
			lk := strings.ToLower(h.Key)
			switch {
			case lk == contract.HeaderHops:
				hops++
				if n, err := strconv.Atoi(h.Value); err != nil || n < 1 || n > r.MaxHops {
					t.Fatalf("x-delay-hops %q", h.Value)
				}
			case isDropped(h.Key), strings.HasPrefix(lk, "nats-"), strings.HasPrefix(lk, strings.ToLower(headers.ReservedPrefix)):
				t.Fatalf("forwarded %q", h.Key)
			}
			if strings.HasPrefix(req.Envelope.Target, "nats:") {
				if !validNATSName(h.Key) || natsValueProblem(h.Value) != "" {
					t.Fatalf("forwarded %q: %q to NATS", h.Key, h.Value)
				}
			}
		}
		if hops != 1 {
			t.Fatalf("%d x-delay-hops headers", hops)
		}
	})
}

// TestPrepareErrorTexts: the dead-letter text of a header refusal names the header: a
// forged x-delay-hops its value and the limit (not "invalid target"), a header with the
// reserved prefix its name.
func TestPrepareErrorTexts(t *testing.T) {
	r := prepareRules()
	for _, tt := range []struct {
		name string
		in   Incoming
		want string
	}{
		{"forged hops", prepareIn("kafka", "x-target", "a.b", "x-delay-hops", "99"),
			`target_loop: x-delay-hops "99" reached the limit of 3 hops (BRIDGE_MAX_HOPS)`},
		{"reserved prefix", prepareIn("kafka", "x-target", "a.b", "_delaybridge_trace", "1"),
			`invalid_headers: invalid headers: header "_delaybridge_trace": names starting "_delaybridge_" (any case) are reserved`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Prepare(tt.in, time.Now())
			if got := ErrorText(err); !strings.HasPrefix(got, tt.want) {
				t.Fatalf("error text %q, want it to start %q", got, tt.want)
			}
		})
	}
}
