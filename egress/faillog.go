package egress

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/delaybridge/delaybridge/internal/backoff"
)

// Kinds of failure reported per target by [failureLog].
const (
	failRetried = "retried"       // a publish failed; the message is retried with backoff
	failDead    = "dead_lettered" // the target did not take the message: dead-lettered
	failExpired = "expired"       // dead-lettered as expired before it could be published
)

// maxFailureStreaks bounds the runs tracked at once (targets are user input).
const maxFailureStreaks = 1024

var failMessages = map[string]string{
	failRetried: "publishes to target failing; retrying with backoff",
	failDead:    "messages dead-lettered: the target did not take them",
	failExpired: "messages dead-lettered: expired before they could be published",
}

// failureLog reports a failing target without flooding the log: per
// target and kind of failure, one Warn line when failures start and then at most one per
// interval, counting the messages since the last line; Info when a publish to the target
// succeeds again. Safe for concurrent use (groups of several shards settle at once).
type failureLog struct {
	log      *slog.Logger
	now      func() time.Time
	interval time.Duration

	mu      sync.Mutex
	streaks map[[2]string]*backoff.Streak // {target, kind}
}

func newFailureLog(log *slog.Logger, now func() time.Time, interval time.Duration) *failureLog {
	return &failureLog{log: log, now: now, interval: interval, streaks: map[[2]string]*backoff.Streak{}}
}

// failed counts n messages of target that failed in the way kind says, err the last
// error (reason: a dead letter's reason, else "").
func (f *failureLog) failed(ctx context.Context, target, kind string, n int, reason string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.streaks[[2]string{target, kind}]
	if s == nil {
		if len(f.streaks) >= maxFailureStreaks {
			clear(f.streaks) // bounded memory under many distinct failing targets: runs start over
		}
		s = &backoff.Streak{Log: f.log, Every: f.interval, Now: f.now}
		f.streaks[[2]string{target, kind}] = s
	}
	args := []any{"target", target}
	if reason != "" {
		args = append(args, "reason", reason)
	}
	s.FailedN(ctx, n, failMessages[kind], append(args, "last_err", err)...)
}

// published notes that a publish to target succeeded: a run of failed publishes ends
// (logged at Info, with the failures not yet reported); the dead-letter runs start over.
func (f *failureLog) published(ctx context.Context, target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, kind := range []string{failRetried, failDead, failExpired} {
		s := f.streaks[[2]string{target, kind}]
		if s == nil {
			continue
		}
		if kind == failRetried {
			s.Recovered(ctx, "publishes to target recovered", "target", target, "failed_since_last_warn", s.Unreported())
		}
		delete(f.streaks, [2]string{target, kind})
	}
}
