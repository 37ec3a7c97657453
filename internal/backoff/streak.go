package backoff

import (
	"context"
	"log/slog"
)

// Streak logs a run of failures of one retry loop without flooding the log: the first
// failure of a run at Warn, the others at Debug, and, through Recovered, the recovery at
// Info. The zero value logs nothing until Log is set. Not safe for concurrent use: one
// Streak per loop.
type Streak struct {
	Log *slog.Logger
	n   int
}

// Failed counts one more failure and logs msg with args: at Warn for the first of a run,
// at Debug after that. It does not block.
func (s *Streak) Failed(ctx context.Context, msg string, args ...any) {
	level := slog.LevelDebug
	if s.n == 0 {
		level = slog.LevelWarn
	}
	s.n++
	if s.Log != nil {
		s.Log.Log(ctx, level, msg, args...)
	}
}

// Recovered ends a run: when failures were counted since the last Recovered or Reset, it
// logs msg with args at Info; then it starts over.
func (s *Streak) Recovered(ctx context.Context, msg string, args ...any) {
	if s.n > 0 && s.Log != nil {
		s.Log.Log(ctx, slog.LevelInfo, msg, args...)
	}
	s.n = 0
}

// Reset starts over without logging (a loop that does not announce its recoveries).
func (s *Streak) Reset() { s.n = 0 }

// Failures returns the failures counted since the last Recovered or Reset.
func (s *Streak) Failures() int { return s.n }
