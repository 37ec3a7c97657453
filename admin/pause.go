package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/glob"
)

// The resume pass (docs/design.md, "Paused targets").
const (
	// pauseSettle is how long Resume waits after the set changed before it reads the
	// shards: the change's notice reaches every replica within milliseconds and each
	// reads the set at once (egress pauses.watch), so no replica puts a message back after
	// the pass read past it.
	pauseSettle = time.Second
)

// Pause pauses the targets pattern matches for the whole fleet (delaystore.Store.PauseTarget):
// every replica stops publishing them within a second. Changed is false when pattern was
// already paused. It blocks until Redis answered or ctx is done.
func (a *Admin) Pause(ctx context.Context, pattern string) (delaystore.PauseChange, error) {
	return a.store.PauseTarget(ctx, pattern)
}

// Pauses returns the pause set (paused globs, and those resumed within
// delaystore.ResumedKeep). It blocks until Redis answered or ctx is done.
func (a *Admin) Pauses(ctx context.Context) ([]delaystore.Pause, error) {
	return a.store.Pauses(ctx)
}

// ResumeResult is what Resume did.
type ResumeResult struct {
	delaystore.PauseChange
	// Moved is how many put-back messages got their due time back.
	Moved int
}

// Resume takes pattern out of the pause set, waits pauseSettle, then gives every message
// of a target it matches (and no glob still paused matches) that egress put back its due
// time again, shard by shard: they are claimed at once, in due order, under the target's
// rate. It runs the pass whether or not pattern was paused, so a resume cut off (a
// kill, ctx done) is finished by another; what no pass reached is claimed again at its
// put-back time, at most delaystore.PauseHold later. It blocks until done, ctx is done, or
// a Redis call fails.
func (a *Admin) Resume(ctx context.Context, pattern string) (ResumeResult, error) {
	p, err := glob.CompileSelector(pattern)
	if err != nil {
		return ResumeResult{}, fmt.Errorf("resume: %w", err)
	}
	c, err := a.store.ResumeTarget(ctx, pattern)
	if err != nil {
		return ResumeResult{}, err
	}
	res := ResumeResult{PauseChange: c}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(a.pauseSettle):
	}
	set, err := a.store.Pauses(ctx)
	if err != nil {
		return res, fmt.Errorf("resume: %w", err)
	}
	var still []*glob.Pattern
	for _, ps := range set {
		if g, err := glob.Compile(ps.Glob); err == nil && ps.Resumed == 0 {
			still = append(still, g)
		}
	}
	match := func(target string) bool {
		return p.MatchTarget(target) && glob.FirstMatch(still, target) < 0
	}
	to := c.Now + (delaystore.PauseHold + 2*pauseSettle).Milliseconds()
	for shard := range a.store.Shards() {
		n, err := a.store.UnpauseShard(ctx, shard, p.Literals(), match, c.Now, to)
		res.Moved += n
		if err != nil {
			return res, fmt.Errorf("resume: %w", err)
		}
	}
	return res, nil
}
