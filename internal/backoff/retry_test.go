package backoff

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeClock is the injected clock of the Retry tests: Sleep advances it and records the
// wait at once; cancel, when set, ends the context at the sleep of that number (from 1).
type fakeClock struct {
	now    time.Time
	waits  []time.Duration
	cancel func()
	at     int
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) bool {
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	if c.cancel != nil && len(c.waits) == c.at {
		c.cancel()
	}
	return ctx.Err() == nil
}

// failing returns an op that fails n times, then succeeds.
func failing(n int, err error) (op func(context.Context) error, calls *int) {
	calls = new(int)
	return func(context.Context) error {
		*calls++
		if *calls <= n {
			return err
		}
		return nil
	}, calls
}

func policy(c *fakeClock, log *slog.Logger) Policy {
	return Policy{Min: 100 * time.Millisecond, Max: 400 * time.Millisecond, Log: log,
		Failed: "op failed; retrying", Recovered: "op recovered", Args: []any{"what", "op"},
		Sleep: c.sleep, Now: func() time.Time { return c.now }}
}

func levelsOf(rs []slog.Record) []slog.Level {
	out := make([]slog.Level, len(rs))
	for i, r := range rs {
		out[i] = r.Level
	}
	return out
}

func attrs(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// TestRetry: the waits double from Min to Max; the first failure is logged at Warn, the
// others at Debug, the success after them at Info; op is called until it succeeds.
func TestRetry(t *testing.T) {
	var got []slog.Record
	c := &fakeClock{now: time.Unix(0, 0)}
	op, calls := failing(4, errors.New("down"))
	p := policy(c, slog.New(recordsOf{&got}))
	p.WaitKey = "in"
	if err := Retry(context.Background(), p, op, nil); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if *calls != 5 {
		t.Errorf("op called %d times, want 5", *calls)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}
	if !slices.Equal(c.waits, want) {
		t.Errorf("waits %v, want %v", c.waits, want)
	}
	wantLevels := []slog.Level{slog.LevelWarn, slog.LevelDebug, slog.LevelDebug, slog.LevelDebug, slog.LevelInfo}
	if !slices.Equal(levelsOf(got), wantLevels) {
		t.Fatalf("levels %v, want %v", levelsOf(got), wantLevels)
	}
	if a := attrs(got[0]); got[0].Message != "op failed; retrying" || a["what"] != "op" || a["err"] != "down" || a["in"] != "100ms" {
		t.Errorf("first line %q %v", got[0].Message, a)
	}
	if a := attrs(got[4]); got[4].Message != "op recovered" || a["what"] != "op" || len(a) != 1 {
		t.Errorf("recovery line %q %v", got[4].Message, a)
	}
}

// TestRetryQuiet: a first try that succeeds logs nothing; without Recovered a recovery
// is not logged; ErrKey names the error.
func TestRetryQuiet(t *testing.T) {
	var got []slog.Record
	c := &fakeClock{}
	p := policy(c, slog.New(recordsOf{&got}))
	op, _ := failing(0, nil)
	if err := Retry(context.Background(), p, op, nil); err != nil || len(got) != 0 || len(c.waits) != 0 {
		t.Fatalf("Retry = %v, %d lines, waits %v", err, len(got), c.waits)
	}
	p.Recovered, p.ErrKey = "", "error"
	op, _ = failing(2, errors.New("down"))
	if err := Retry(context.Background(), p, op, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(levelsOf(got), []slog.Level{slog.LevelWarn, slog.LevelDebug}) {
		t.Fatalf("levels %v", levelsOf(got))
	}
	if a := attrs(got[0]); a["error"] != "down" {
		t.Errorf("error not under ErrKey: %v", a)
	}
}

// TestRetryEvery: with Every, a long run is logged at Warn again once Every has passed.
func TestRetryEvery(t *testing.T) {
	var got []slog.Record
	c := &fakeClock{now: time.Unix(0, 0)}
	p := policy(c, slog.New(recordsOf{&got}))
	p.Min, p.Max, p.Every = time.Second, time.Second, 3*time.Second
	op, _ := failing(7, errors.New("down"))
	if err := Retry(context.Background(), p, op, nil); err != nil {
		t.Fatal(err)
	}
	// failures at 0..6 s: Warn at 0, 3 and 6 s
	want := []slog.Level{slog.LevelWarn, slog.LevelDebug, slog.LevelDebug, slog.LevelWarn,
		slog.LevelDebug, slog.LevelDebug, slog.LevelWarn, slog.LevelInfo}
	if !slices.Equal(levelsOf(got), want) {
		t.Fatalf("levels %v, want %v", levelsOf(got), want)
	}
}

// TestRetryFatal: a fatal error ends Retry at once, returned as it is, not logged.
func TestRetryFatal(t *testing.T) {
	var got []slog.Record
	c := &fakeClock{}
	fatal := errors.New("wrong shard count")
	calls := 0
	op := func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("down")
		}
		return fatal
	}
	err := Retry(context.Background(), policy(c, slog.New(recordsOf{&got})), op, func(err error) bool { return err == fatal })
	if err != fatal || calls != 3 || len(c.waits) != 2 || len(got) != 2 {
		t.Fatalf("Retry = %v after %d calls, %d waits, %d lines", err, calls, len(c.waits), len(got))
	}
}

// TestRetryCancel: ctx ending during a wait returns its error with the last failure;
// ctx ended when op fails returns its error alone, and that failure is not logged.
func TestRetryCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &fakeClock{cancel: cancel, at: 2}
	op, calls := failing(10, errors.New("down"))
	err := Retry(ctx, policy(c, nil), op, nil)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "(last error: down)") || *calls != 2 {
		t.Fatalf("cancelled in the wait: %v after %d calls", err, *calls)
	}

	var got []slog.Record
	ctx, cancel = context.WithCancel(context.Background())
	op = func(context.Context) error { cancel(); return errors.New("down") }
	err = Retry(ctx, policy(&fakeClock{}, slog.New(recordsOf{&got})), op, nil)
	if err != context.Canceled || len(got) != 0 {
		t.Fatalf("cancelled in op: %v, %d lines", err, len(got))
	}
}

// TestRetryProgressed: a failure that Progressed reports as progress starts the waits over
// at Min; the others keep doubling.
func TestRetryProgressed(t *testing.T) {
	partly := errors.New("partly done")
	errs := []error{errors.New("down"), errors.New("down"), partly, errors.New("down"), partly, nil}
	c := &fakeClock{now: time.Unix(0, 0)}
	calls := 0
	op := func(context.Context) error { calls++; return errs[calls-1] }
	p := policy(c, nil)
	p.Progressed = func(err error) bool { return errors.Is(err, partly) }
	if err := Retry(context.Background(), p, op, nil); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 100 * time.Millisecond}
	if !slices.Equal(c.waits, want) {
		t.Fatalf("waits %v, want %v", c.waits, want)
	}
}
