package egress

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
)

// records is a slog handler that keeps every record at Warn and above (attributes
// resolved), for counting log lines.
type records struct {
	mu    *sync.Mutex
	got   *[]slog.Record
	attrs []slog.Attr
}

func newRecords() records { return records{mu: &sync.Mutex{}, got: &[]slog.Record{}} }

func (h records) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h records) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	*h.got = append(*h.got, r)
	h.mu.Unlock()
	return nil
}
func (h records) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return h
}
func (h records) WithGroup(string) slog.Handler { return h }

func (h records) warns() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range *h.got {
		if r.Level == slog.LevelWarn {
			out = append(out, r)
		}
	}
	return out
}

func attr(r slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
			return false
		}
		return true
	})
	return v, found
}

// TestFailingTargetLogsOneLinePerInterval (issue 24 item 5): 200 messages to a target
// that fails every publish, retried and then dead-lettered, make at most one Warn line
// per target and kind within the log interval (here longer than the test), each naming
// the target and a count; the per-message detail is at Debug and in the metrics.
func TestFailingTargetLogsOneLinePerInterval(t *testing.T) {
	const n = 200
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	dlq := collect(t, gc, "delay.dlq")
	f := &flaky{Publisher: gc, failTopic: map[string]bool{"broken": true}}
	h := newRecords()
	cfg := Config{DLQSubject: "delay.dlq", MaxAttempts: 3, BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		FailureLogInterval: time.Hour}
	e, err := New(cfg, st, map[string]message.Publisher{"nats": f}, slog.New(h), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for i := range n {
		park(t, st, fmt.Sprintf("m%03d", i), time.Duration(i%20)*time.Millisecond, "nats:broken", nil)
	}
	for range n {
		waitFor(t, dlq, 20*time.Second)
	}
	warns := h.warns()
	for _, r := range warns {
		t.Logf("warn: %s", r.Message)
	}
	if len(warns) > 2 {
		t.Fatalf("%d Warn lines for %d messages to one failing target, want at most 2 (one per kind per interval)", len(warns), n)
	}
	for _, r := range warns {
		if v, ok := attr(r, "target"); !ok || v.String() != "nats:broken" {
			t.Errorf("Warn %q does not name the target: %v", r.Message, v)
		}
		if v, ok := attr(r, "count"); !ok || v.Int64() < 1 {
			t.Errorf("Warn %q has no count", r.Message)
		}
	}
}
