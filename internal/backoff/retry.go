package backoff

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Policy is how Retry waits between tries of one operation and how it logs a run of
// failures (a Streak: Warn for the first failure, Debug after, Info on recovery).
type Policy struct {
	// Min and Max bound the waits: Min after the first failure of a run, doubling up to Max.
	Min, Max time.Duration
	// Log receives the failure and recovery lines; nil logs nothing.
	Log *slog.Logger
	// Failed is the message of a failed try, logged with Args, the error under ErrKey and,
	// when WaitKey is set, the wait before the next try (its String form) under WaitKey:
	// at Warn for the first failure of a run, at Debug after (see Every).
	Failed string
	// Recovered, when not "", is logged at Info with Args when a try succeeds after
	// failures.
	Recovered string
	// Args are added to every line.
	Args []any
	// ErrKey is the key of the error in the failure line (default "err").
	ErrKey string
	// WaitKey, when not "", is the key of the wait in the failure line.
	WaitKey string
	// Every, when > 0, logs a failure at Warn again once Every has passed since the last
	// Warn line (Streak.Every); zero: Warn once per run.
	Every time.Duration
	// Sleep waits d between tries and reports whether the whole wait passed (nil: the
	// package's Sleep). A loop that must try again early on a signal of its own gives a
	// Sleep that also returns true on it; tests give one that does not wait.
	Sleep func(ctx context.Context, d time.Duration) bool
	// Now is the clock of Every (nil: time.Now).
	Now func() time.Time
	// Progressed, when set, tells a failure that did part of the work (a batch of which
	// some was done): the wait before the next try then starts over at Min, since what
	// refused the rest may take it soon too (a full Redis that deliveries are freeing).
	Progressed func(err error) bool
}

// Retry calls op until it returns nil, op's error is fatal (isFatal reports true; a nil
// isFatal makes no error fatal) or ctx ends. op gets ctx; it derives from it what it
// needs. Retry blocks; it is safe for concurrent use as long as p's Log, Sleep and Now
// are. It returns nil on success and a fatal error as it is. When ctx ends it returns an
// error wrapping ctx.Err(): alone when ctx had ended when op failed (the failure is not
// logged), with the last failure when ctx ended during the wait after it.
func Retry(ctx context.Context, p Policy, op func(context.Context) error, isFatal func(error) bool) error {
	wait := Backoff{Min: p.Min, Max: p.Max}
	streak := Streak{Log: p.Log, Every: p.Every, Now: p.Now}
	sleep := p.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	for {
		err := op(ctx)
		if err == nil {
			p.recovered(ctx, &streak)
			return nil
		}
		if isFatal != nil && isFatal(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if p.Progressed != nil && p.Progressed(err) {
			wait.Reset()
		}
		d := wait.Next()
		streak.Failed(ctx, p.Failed, p.failArgs(err, d)...)
		if !sleep(ctx, d) {
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
	}
}

func (p Policy) recovered(ctx context.Context, s *Streak) {
	if p.Recovered == "" {
		s.Reset()
		return
	}
	s.Recovered(ctx, p.Recovered, p.Args...)
}

func (p Policy) failArgs(err error, wait time.Duration) []any {
	key := p.ErrKey
	if key == "" {
		key = "err"
	}
	args := append(p.Args[:len(p.Args):len(p.Args)], key, err)
	if p.WaitKey != "" {
		args = append(args, p.WaitKey, wait.String())
	}
	return args
}
