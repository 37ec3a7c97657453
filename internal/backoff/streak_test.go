package backoff

import (
	"context"
	"log/slog"
	"slices"
	"testing"
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
