package ops

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Readiness debouncing: once a check has passed, it counts as failing only after
// readyFailures consecutive failed probes spanning at least readyWindow, so a single slow
// or lost answer does not take the pod out of its Service (and, for a native sidecar, the
// whole pod). A check that has never passed fails at once: the bridge is not ready before
// its dependencies were seen.
const (
	readyFailures = 2
	readyWindow   = 3 * time.Second
)

// steadyCheck is a Check with debounced failures. Safe for concurrent use.
type steadyCheck struct {
	check    Check
	failures int
	window   time.Duration
	now      func() time.Time

	mu     sync.Mutex
	passed bool      // the check has passed at least once
	streak int       // consecutive failed probes
	since  time.Time // the first failure of the streak
}

func newSteadyCheck(c Check, failures int, window time.Duration, now func() time.Time) *steadyCheck {
	return &steadyCheck{check: c, failures: failures, window: window, now: now}
}

// probe runs the check. It returns the error to report (nil while a failure streak is
// still tolerated) and, during a tolerated streak, the probe's own error as pending.
func (s *steadyCheck) probe(ctx context.Context) (failed, pending error) {
	err := s.check.Probe(ctx)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.passed, s.streak = true, 0
		return nil, nil
	}
	if s.streak == 0 {
		s.since = now
	}
	s.streak++
	if !s.passed || (s.streak >= s.failures && now.Sub(s.since) >= s.window) {
		return err, nil
	}
	return nil, fmt.Errorf("%w (failing %d times over %s, tolerated up to %d times and %s)",
		err, s.streak, now.Sub(s.since).Round(time.Millisecond), s.failures, s.window)
}
