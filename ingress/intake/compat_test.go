package intake

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

func TestParseNATSSchedule(t *testing.T) {
	tests := []struct {
		in   string
		want int64 // -1: invalid
	}{
		{"@at 2026-11-21T15:04:05Z", time.Date(2026, 11, 21, 15, 4, 5, 0, time.UTC).UnixMilli()},
		{"@at 2026-11-21T17:04:05.123+02:00", time.Date(2026, 11, 21, 15, 4, 5, 123e6, time.UTC).UnixMilli()},
		{"@at 2026-11-21T15:04:05.0001Z", time.Date(2026, 11, 21, 15, 4, 5, 0, time.UTC).UnixMilli() + 1},
		{"@at 1970-01-01T00:00:00Z", 0},
		{"@at 1795273445123", -1},
		{"@at  2026-11-21T15:04:05Z", -1},
		{"@at 2026-11-21T15:04:05Z ", -1},
		{"@at", -1},
		{"@at ", -1},
		{"@AT 2026-11-21T15:04:05Z", -1},
		{"2026-11-21T15:04:05Z", -1},
		{"@every 5m", -1},
		{"@hourly", -1},
		{"0 30 * * * *", -1},
		{"@at 2026-02-30T15:04:05Z", -1},
		{"", -1},
	}
	for _, tt := range tests {
		got, err := ParseNATSSchedule(tt.in)
		switch {
		case tt.want < 0 && err == nil:
			t.Errorf("ParseNATSSchedule(%q) = %d, want an error", tt.in, got)
		case tt.want < 0 && !errors.Is(err, ErrInvalidDeliverAt):
			t.Errorf("ParseNATSSchedule(%q): error %v does not wrap ErrInvalidDeliverAt", tt.in, err)
		case tt.want >= 0 && (err != nil || got != tt.want):
			t.Errorf("ParseNATSSchedule(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseSchedulerEpoch(t *testing.T) {
	tests := []struct {
		in   string
		want int64 // -1: invalid
	}{
		{"1893456000", 1893456000000},
		{"0", 0},
		{"0001", 1000},
		{strconv.FormatInt(maxEpochSeconds, 10), maxEpochSeconds * 1000},
		{strconv.FormatInt(maxEpochSeconds+1, 10), -1},
		{"99999999999999999999999", -1},
		{"-1", -1},
		{"+1", -1},
		{"1.5", -1},
		{" 1", -1},
		{"1893456000000x", -1},
		{"2026-11-21T15:04:05Z", -1},
		{"", -1},
		{"١٢٣", -1},
	}
	for _, tt := range tests {
		got, err := ParseSchedulerEpoch(tt.in)
		switch {
		case tt.want < 0 && err == nil:
			t.Errorf("ParseSchedulerEpoch(%q) = %d, want an error", tt.in, got)
		case tt.want < 0 && !errors.Is(err, ErrInvalidDeliverAt):
			t.Errorf("ParseSchedulerEpoch(%q): error %v does not wrap ErrInvalidDeliverAt", tt.in, err)
		case tt.want >= 0 && (err != nil || got != tt.want):
			t.Errorf("ParseSchedulerEpoch(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

// TestPrepareCompat: the compatibility headers become the native contract, conflict with
// it like the native headers conflict with each other, and are not forwarded.
func TestPrepareCompat(t *testing.T) {
	r := prepareRules()
	now := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	at := now.Add(time.Hour)
	atRFC := at.Format(time.RFC3339)
	atSec := strconv.FormatInt(at.Unix(), 10)
	withKey := func(in Incoming, key string) Incoming {
		in.Key = []byte(key)
		return in
	}
	tests := []struct {
		name    string
		in      Incoming
		reason  string // "" = accepted
		target  string
		id      string
		replace bool
		key     string // "-" = nil
		want    headers.List
	}{
		{name: "nats schedule", in: prepareIn("nats", "Nats-Schedule", "@at "+atRFC, "Nats-Schedule-Target", "orders.due", "k", "v"),
			target: "nats:orders.due", id: "src-1", key: "-", want: hl("k", "v", contract.HeaderHops, "1")},
		{name: "nats schedule, lower case, TTL and rollup ignored", in: prepareIn("nats", "nats-schedule", "@at "+atRFC,
			"nats-schedule-target", "kafka:orders", "Nats-Schedule-TTL", "5m", "Nats-Schedule-Rollup", "sub"),
			target: "kafka:orders", id: "src-1", key: "-", want: hl(contract.HeaderHops, "1")},
		{name: "kafka-message-scheduler", in: withKey(prepareIn("kafka", "scheduler-epoch", atSec, "scheduler-target-topic", "online-videos",
			"scheduler-target-key", "vid1", "customer-header", "dummy"), "vid1-online"),
			target: "kafka:online-videos", id: "vid1-online", replace: true, key: "vid1", want: hl("customer-header", "dummy", contract.HeaderHops, "1")},
		{name: "kafka-message-scheduler without target key delivers no key", in: withKey(prepareIn("kafka", "Scheduler-Epoch", atSec,
			"Scheduler-Target-Topic", "t"), "sched-1"), target: "kafka:t", id: "sched-1", replace: true, key: "-"},
		{name: "kafka-message-scheduler without a record key keeps the source id", in: prepareIn("kafka", "scheduler-epoch", atSec,
			"scheduler-target-topic", "t"), target: "kafka:t", id: "src-1", key: "-"},
		{name: "x-delay-id wins over the record key", in: withKey(prepareIn("kafka", "scheduler-epoch", atSec,
			"scheduler-target-topic", "t", "x-delay-id", "mine"), "sched-1"), target: "kafka:t", id: "mine", replace: true, key: "-"},
		{name: "record key not a valid id", in: withKey(prepareIn("kafka", "scheduler-epoch", atSec, "scheduler-target-topic", "t"), "a\x00b"),
			reason: contract.ReasonInvalidID},
		{name: "scheduler-target-key from NATS to Kafka", in: prepareIn("nats", "x-delay", "1s", "x-target", "kafka:t", "scheduler-target-key", "k1"),
			target: "kafka:t", id: "src-1", key: "k1"},
		{name: "scheduler-target-key to NATS must be NATS-safe", in: prepareIn("kafka", "x-target", "nats:a.b", "scheduler-target-key", " k"),
			reason: contract.ReasonInvalidHeaders},
		{name: "plain Kafka message keeps its key", in: withKey(prepareIn("kafka", "x-target", "t"), "rk"), target: "kafka:t", id: "src-1", key: "rk"},

		{name: "x-delay and Nats-Schedule", in: prepareIn("nats", "x-delay", "1s", "Nats-Schedule", "@at "+atRFC, "x-target", "a"), reason: contract.ReasonConflictingSchedule},
		{name: "x-deliver-at and scheduler-epoch", in: prepareIn("kafka", "x-deliver-at", "1", "scheduler-epoch", atSec, "x-target", "a"), reason: contract.ReasonConflictingSchedule},
		{name: "Nats-Schedule and scheduler-epoch", in: prepareIn("nats", "Nats-Schedule", "@at "+atRFC, "scheduler-epoch", atSec, "x-target", "a"), reason: contract.ReasonConflictingSchedule},
		{name: "x-target and Nats-Schedule-Target", in: prepareIn("nats", "x-target", "a", "Nats-Schedule-Target", "a"), reason: contract.ReasonInvalidTarget},
		{name: "two compat targets", in: prepareIn("kafka", "Nats-Schedule-Target", "a", "scheduler-target-topic", "a"), reason: contract.ReasonInvalidTarget},
		{name: "x-kafka-key and scheduler-target-key", in: prepareIn("kafka", "x-target", "a", "x-kafka-key", "a", "scheduler-target-key", "a"), reason: contract.ReasonInvalidHeaders},
		{name: "Nats-Schedule repeated", in: prepareIn("nats", "Nats-Schedule", "@at "+atRFC, "nats-schedule", "@at "+atRFC, "x-target", "a"), reason: contract.ReasonInvalidDeliverAt},
		{name: "scheduler-epoch repeated", in: prepareIn("kafka", "scheduler-epoch", atSec, "Scheduler-Epoch", atSec, "x-target", "a"), reason: contract.ReasonInvalidDeliverAt},
		{name: "Nats-Schedule-Target repeated", in: prepareIn("nats", "Nats-Schedule-Target", "a", "Nats-Schedule-Target", "b"), reason: contract.ReasonInvalidTarget},
		{name: "scheduler-target-topic repeated", in: prepareIn("kafka", "scheduler-target-topic", "a", "scheduler-target-topic", "a"), reason: contract.ReasonInvalidTarget},
		{name: "scheduler-target-key repeated", in: prepareIn("kafka", "x-target", "a", "scheduler-target-key", "a", "scheduler-target-key", "b"), reason: contract.ReasonInvalidHeaders},
		{name: "empty scheduler-target-topic", in: prepareIn("kafka", "scheduler-target-topic", ""), reason: contract.ReasonMissingTarget},
		{name: "compat target is checked like x-target", in: prepareIn("nats", "Nats-Schedule-Target", "delay.in"), reason: contract.ReasonTargetLoop},
		{name: "NATS time zone with @every", in: prepareIn("nats", "Nats-Schedule", "@every 1m", "Nats-Schedule-Time-Zone", "Europe/Paris", "Nats-Schedule-Target", "a"), reason: contract.ReasonInvalidEvery},
		{name: "repeating NATS schedule and x-delay-every", in: prepareIn("nats", "Nats-Schedule", "@every 1m", "x-delay-every", "1m", "Nats-Schedule-Target", "a"), reason: contract.ReasonInvalidEvery},
		{name: "bad repeating NATS schedule", in: prepareIn("nats", "Nats-Schedule", "@every 10ms", "Nats-Schedule-Target", "a"), reason: contract.ReasonInvalidEvery},
		{name: "NATS time zone", in: prepareIn("nats", "Nats-Schedule", "@at "+atRFC, "Nats-Schedule-Time-Zone", "Europe/Paris", "Nats-Schedule-Target", "a"), reason: contract.ReasonInvalidDeliverAt},
		{name: "NATS schedule source", in: prepareIn("nats", "x-target", "a", "Nats-Schedule-Source", "b"), reason: contract.ReasonInvalidHeaders},
		{name: "scheduler-epoch beyond the maximum delay", in: prepareIn("kafka", "scheduler-epoch", strconv.FormatInt(now.Add(25*time.Hour).Unix(), 10), "x-target", "a"), reason: contract.ReasonDelayTooLong},
		{name: "bad scheduler-epoch", in: prepareIn("kafka", "scheduler-epoch", "soon", "x-target", "a"), reason: contract.ReasonInvalidDeliverAt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := r.Prepare(tt.in, now)
			if got := Reason(err); got != tt.reason {
				t.Fatalf("reason %q (%v), want %q", got, err, tt.reason)
			}
			if err != nil {
				return
			}
			if req.Envelope.Target != tt.target {
				t.Errorf("target %q, want %q", req.Envelope.Target, tt.target)
			}
			if req.ID != tt.id || req.Replace != tt.replace {
				t.Errorf("id %q replace %v, want %q %v", req.ID, req.Replace, tt.id, tt.replace)
			}
			switch {
			case tt.key == "-" && req.Envelope.Key != nil:
				t.Errorf("key %q, want none", req.Envelope.Key)
			case tt.key != "-" && string(req.Envelope.Key) != tt.key:
				t.Errorf("key %q, want %q", req.Envelope.Key, tt.key)
			}
			if tt.want != nil && !equalList(req.Envelope.Headers, tt.want) {
				t.Errorf("forwarded %q, want %q", req.Envelope.Headers, tt.want)
			}
			if hasScheduleHeader(tt.in) && (!req.Absolute || req.At != at.UnixMilli()) {
				t.Errorf("due absolute=%v at=%d, want %d", req.Absolute, req.At, at.UnixMilli())
			}
		})
	}
}

// hasScheduleHeader reports whether in has a compatibility due-time header (a one-shot
// Nats-Schedule or scheduler-epoch).
func hasScheduleHeader(in Incoming) bool {
	v, _ := in.Headers.Get(HeaderNATSSchedule)
	return strings.HasPrefix(v, natsAtPrefix) || len(in.Headers.Values(HeaderSchedulerEpoch)) > 0
}

func FuzzParseNATSSchedule(f *testing.F) {
	for _, s := range []string{"@at 2026-11-21T15:04:05Z", "@at 2026-11-21T17:04:05.123456+02:00", "@at 1795273445123",
		"@at  2026-11-21T15:04:05Z", "@every 1m", "0 0 * * * *", "@hourly", "@at ", "@at 9999-12-31T23:59:59.9999Z",
		"@at 0000-01-01T00:00:00-23:59"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := ParseNATSSchedule(s)
		if err != nil {
			if Reason(err) != contract.ReasonInvalidDeliverAt || ms != 0 {
				t.Fatalf("ParseNATSSchedule(%q) = %d, %v (reason %q)", s, ms, err, Reason(err))
			}
			return
		}
		// What NATS reads the same way must agree to the millisecond (rounded up).
		want, perr := time.Parse(time.RFC3339Nano, s[len(natsAtPrefix):])
		if perr != nil {
			return // stricter or laxer spelling than Go's; our grammar is ParseDeliverAt's
		}
		if w := want.Add(time.Millisecond - 1).Truncate(time.Millisecond).UnixMilli(); want.Year() >= 1 && ms != w {
			t.Fatalf("ParseNATSSchedule(%q) = %d, time.Parse says %d", s, ms, w)
		}
	})
}

func FuzzParseSchedulerEpoch(f *testing.F) {
	for _, s := range []string{"1893456000", "0", "-1", "9223372036854775", "9223372036854776", "1.5", " 1", "+1", "1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := ParseSchedulerEpoch(s)
		n, perr := strconv.ParseInt(s, 10, 64)
		if err != nil {
			if Reason(err) != contract.ReasonInvalidDeliverAt || ms != 0 {
				t.Fatalf("ParseSchedulerEpoch(%q) = %d, %v (reason %q)", s, ms, err, Reason(err))
			}
			if perr == nil && n >= 0 && n <= maxEpochSeconds && s[0] != '+' {
				t.Fatalf("ParseSchedulerEpoch(%q) refused %d seconds: %v", s, n, err)
			}
			return
		}
		if perr != nil || ms != n*1000 {
			t.Fatalf("ParseSchedulerEpoch(%q) = %d, strconv says %d, %v", s, ms, n, perr)
		}
	})
}
