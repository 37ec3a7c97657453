package backoff

import (
	"context"
	"log/slog"
	"time"
)

// Streak logs a run of failures of one retry loop without flooding the log: the first
// failure of a run at Warn, the others at Debug, and, through Recovered, the recovery at
// Info. With Every set, a long run is reported again at Warn once per Every, with the
// failures counted since the last Warn line. The zero value logs nothing until Log is
// set. Not safe for concurrent use: one Streak per loop (or per key, under a lock).
type Streak struct {
	Log *slog.Logger
	// Every, when > 0, repeats the Warn line while a run lasts: the first failure after
	// Every has passed since the last Warn line is logged at Warn again. Zero: once per run.
	Every time.Duration
	// Now is the clock of Every (nil: time.Now).
	Now func() time.Time

	n       int
	pending int       // failures since the last Warn line, that one included
	warned  time.Time // when the last Warn line was logged
}

// Failed counts one more failure and logs msg with args: at Warn for the first of a run,
// at Debug after that. It does not block.
func (s *Streak) Failed(ctx context.Context, msg string, args ...any) {
	s.log(ctx, 1, false, msg, args)
}

// FailedN counts n more failures (n >= 1: a batch) and logs msg with args and "count":
// at Warn for the first of a run (and, with Every, the first after Every since the last
// Warn line), with count the failures since the last Warn line; at Debug otherwise, with
// count n. It does not block.
func (s *Streak) FailedN(ctx context.Context, n int, msg string, args ...any) {
	s.log(ctx, n, true, msg, args)
}

func (s *Streak) log(ctx context.Context, n int, withCount bool, msg string, args []any) {
	now := time.Time{}
	if s.Every > 0 {
		now = s.now()
	}
	warn := s.n == 0 || (s.Every > 0 && now.Sub(s.warned) >= s.Every)
	s.n += n
	s.pending += n
	level, count := slog.LevelDebug, n
	if warn {
		level, count = slog.LevelWarn, s.pending
		s.pending, s.warned = 0, now
	}
	if s.Log == nil || !s.Log.Enabled(ctx, level) {
		return
	}
	if withCount {
		args = append(args[:len(args):len(args)], "count", count)
	}
	s.Log.Log(ctx, level, msg, args...)
}

func (s *Streak) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// Recovered ends a run: when failures were counted since the last Recovered or Reset, it
// logs msg with args at Info; then it starts over.
func (s *Streak) Recovered(ctx context.Context, msg string, args ...any) {
	if s.n > 0 && s.Log != nil {
		s.Log.Log(ctx, slog.LevelInfo, msg, args...)
	}
	s.Reset()
}

// Reset starts over without logging (a loop that does not announce its recoveries).
func (s *Streak) Reset() { s.n, s.pending = 0, 0 }

// Failures returns the failures counted since the last Recovered or Reset.
func (s *Streak) Failures() int { return s.n }

// Unreported returns the failures counted since the last Warn line (none after Recovered
// or Reset).
func (s *Streak) Unreported() int { return s.pending }
