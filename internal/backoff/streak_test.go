package backoff

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// levels is a slog handler that records the level of every record.
type levels struct{ got *[]slog.Level }

func (h levels) Enabled(context.Context, slog.Level) bool { return true }
func (h levels) Handle(_ context.Context, r slog.Record) error {
	*h.got = append(*h.got, r.Level)
	return nil
}
func (h levels) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h levels) WithGroup(string) slog.Handler      { return h }

func TestStreak(t *testing.T) {
	var got []slog.Level
	s := Streak{Log: slog.New(levels{&got})}
	ctx := context.Background()
	s.Recovered(ctx, "nothing failed: not logged")
	s.Failed(ctx, "first")
	s.Failed(ctx, "second")
	s.Failed(ctx, "third")
	if s.Failures() != 3 {
		t.Errorf("Failures() = %d, want 3", s.Failures())
	}
	s.Recovered(ctx, "recovered")
	s.Failed(ctx, "a new run")
	s.Reset()
	s.Failed(ctx, "after a silent reset")
	want := []slog.Level{slog.LevelWarn, slog.LevelDebug, slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelWarn}
	if !slices.Equal(got, want) {
		t.Fatalf("levels %v, want %v", got, want)
	}
	var quiet Streak // no logger: counts, logs nothing, does not panic
	quiet.Failed(ctx, "x")
	quiet.Recovered(ctx, "y")
}

// TestStreakEvery: with Every, a long run is reported at Warn once per Every, each line
// counting the failures since the last one; Debug in between.
func TestStreakEvery(t *testing.T) {
	var got []slog.Record
	now := time.Unix(0, 0)
	s := Streak{Log: slog.New(recordsOf{&got}), Every: time.Minute, Now: func() time.Time { return now }}
	ctx := context.Background()
	s.FailedN(ctx, 3, "failing") // Warn, count 3
	for range 10 {
		now = now.Add(5 * time.Second)
		s.FailedN(ctx, 2, "failing") // 50 s: Debug
	}
	now = now.Add(10 * time.Second)
	s.FailedN(ctx, 1, "failing") // 60 s after the Warn: Warn, count 21
	var warns []int64
	for _, r := range got {
		if r.Level == slog.LevelWarn {
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "count" {
					warns = append(warns, a.Value.Int64())
				}
				return true
			})
		}
	}
	if !slices.Equal(warns, []int64{3, 21}) {
		t.Fatalf("Warn counts %v, want [3 21]", warns)
	}
	if s.Failures() != 24 || s.Unreported() != 0 {
		t.Fatalf("Failures %d, Unreported %d", s.Failures(), s.Unreported())
	}
}

type recordsOf struct{ got *[]slog.Record }

func (h recordsOf) Enabled(context.Context, slog.Level) bool { return true }
func (h recordsOf) Handle(_ context.Context, r slog.Record) error {
	*h.got = append(*h.got, r)
	return nil
}
func (h recordsOf) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordsOf) WithGroup(string) slog.Handler      { return h }
