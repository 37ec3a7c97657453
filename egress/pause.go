package egress

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/glob"
)

// Paused targets (docs/design.md, "Paused targets"): the set is read when its notice
// arrives (delaystore.WakePauses), after a resubscription, and every pausePoll; a claimed
// message of a paused target is put back for pauseHold, or until its expiry.
const (
	pausePoll = 5 * time.Second
	// pauseSettle is how long after a change every replica has read the set and put back
	// what it claimed with the old view (a notice arrives within milliseconds); as
	// admin.Resume waits before its pass.
	pauseSettle = time.Second
	pauseHold   = delaystore.PauseHold
)

// PauseReader reads the fleet's pause set (delaystore.Store.Pauses) and gives put-back
// messages their due time again (delaystore.Store.UnpauseShard). Safe for concurrent
// use; each blocks until Redis answered or ctx is done.
type PauseReader interface {
	Pauses(ctx context.Context) ([]delaystore.Pause, error)
	UnpauseShard(ctx context.Context, shard int, literals []string, match func(target string) bool, from, to int64) (int, error)
}

// pauses is this replica's view of the pause set: what delivery asks per target group.
// Safe for concurrent use.
type pauses struct {
	view  atomic.Pointer[pauseView]
	nudge chan struct{} // poke: read the set now (capacity 1)
}

func newPauses() *pauses { return &pauses{nudge: make(chan struct{}, 1)} }

// poke makes watch read the set now. Never blocks.
func (p *pauses) poke() {
	select {
	case p.nudge <- struct{}{}:
	default:
	}
}

// pauseView is one read of the pause set, compiled, with a cache of the answers per
// target (a set changes rarely; targets are asked once per group).
type pauseView struct {
	set     []delaystore.Pause
	paused  []*glob.Pattern
	resumed []resumedGlob

	mu    sync.Mutex
	cache map[string]pauseAnswer
}

type resumedGlob struct {
	p  *glob.Pattern
	at int64
}

// pauseAnswer is what a view says of one target.
type pauseAnswer struct {
	paused  bool
	resumed int64 // the latest resume of a glob matching it (Redis ms), 0 none
}

// newPauseView compiles set; a glob that does not compile (never written by the store)
// is left out.
func newPauseView(set []delaystore.Pause) *pauseView {
	v := &pauseView{set: set, cache: map[string]pauseAnswer{}}
	for _, p := range set {
		g, err := glob.Compile(p.Glob)
		if err != nil {
			continue
		}
		if p.Resumed == 0 {
			v.paused = append(v.paused, g)
		} else {
			v.resumed = append(v.resumed, resumedGlob{g, p.Resumed})
		}
	}
	return v
}

// of is what v says of target.
func (v *pauseView) of(target string) pauseAnswer {
	if len(v.paused) == 0 && len(v.resumed) == 0 {
		return pauseAnswer{} // the usual case: no lock, nothing per message
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if a, ok := v.cache[target]; ok {
		return a
	}
	var a pauseAnswer
	for _, g := range v.paused {
		if g.MatchTarget(target) {
			a.paused = true
			break
		}
	}
	for _, r := range v.resumed {
		if r.at > a.resumed && r.p.MatchTarget(target) {
			a.resumed = r.at
		}
	}
	if len(v.cache) < 10_000 {
		v.cache[target] = a
	}
	return a
}

// of is what the current view says of target (nothing paused before the first read).
func (p *pauses) of(target string) pauseAnswer {
	v := p.view.Load()
	if v == nil {
		return pauseAnswer{}
	}
	return v.of(target)
}

// set makes set the view when it differs from the current one, and reports whether it
// did and which globs vanished: paused in the old view, absent from set (neither paused
// nor resumed: a Redis that lost its data, or a failover to a replica without the pause).
func (p *pauses) set(set []delaystore.Pause) (changed bool, vanished []string) {
	old := p.view.Load()
	if old != nil && slices.Equal(old.set, set) {
		return false, nil
	}
	p.view.Store(newPauseView(set))
	if old == nil {
		return true, nil
	}
	for _, o := range old.set {
		if o.Resumed == 0 && !slices.ContainsFunc(set, func(n delaystore.Pause) bool { return n.Glob == o.Glob }) {
			vanished = append(vanished, o.Glob)
		}
	}
	return true, vanished
}

// watch reads the pause set when poked and every pausePoll until ctx is done (one
// HGETALL a read). A failed read keeps the last view (logged once until a read works
// again); each change sets delaybridge_target_paused. Globs that vanished from the set go
// to vanished, which must not block.
func (p *pauses) watch(ctx context.Context, r PauseReader, log *slog.Logger, m *Metrics, vanished func([]string)) {
	t := time.NewTicker(pausePoll)
	defer t.Stop()
	failing := false
	for {
		set, err := r.Pauses(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			log.Warn("cannot read the paused targets; keeping the last known", "err", err)
		case err == nil:
			if failing {
				log.Info("paused targets read again")
			}
			failing = false
			if changed, gone := p.set(set); changed {
				m.setPaused(set)
				if len(gone) > 0 {
					vanished(gone)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.nudge:
		}
	}
}

// pauseSplit takes the messages of a paused target out of claimed: each is put back
// unpublished (no attempt counted) for pauseHold, or until just after its expiry
// deadline when earlier (it is then claimed and dead-lettered as expired). Expired ones
// stay in claimed: they are dead-lettered now, as for any target. nowMs is the Redis clock.
func pauseSplit(claimed []delaystore.Claimed, nowMs int64) (rest []delaystore.Claimed, back []delaystore.RetryRequest) {
	for _, c := range claimed {
		if expiredAt(c, nowMs) != nil {
			rest = append(rest, c)
			continue
		}
		wait := pauseHold.Microseconds()
		if dl, ok := deadline(c); ok && dl-nowMs < pauseHold.Milliseconds() {
			wait = (dl - nowMs + 1) * 1000
		}
		back = append(back, putBack(c, wait))
	}
	return rest, back
}

// sinceResume is c as its lateness is counted: a message due before the latest resume
// of a glob matching its target (within delaystore.ResumedKeep) is late from the resume,
// not from its due time: the pause was the operator's.
func (d *delivery) sinceResume(c delaystore.Claimed) delaystore.Claimed {
	if r := d.pauses.of(c.Envelope.Target).resumed; r > c.Due {
		c.Due = r
	}
	return c
}

// unpauseVanished is the resume pass for globs that vanished from the pause set without a
// resume (pauses.set): no operator's resume runs it then, so the put-back messages of
// their targets would wait up to pauseHold. After pauseSettle (a claim that split with
// the old view has put its messages back by then), each shard this replica owns (the
// only replica that puts back its messages) gets them back at their due time, unless a
// glob still paused matches. It logs what it did; it blocks until done or ctx is done.
func (e *Egress) unpauseVanished(ctx context.Context, r PauseReader, globs []string) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(pauseSettle):
	}
	view := e.delivery.pauses.view.Load()
	from := e.clock.redisNow(e.delivery.now()) - (pausePoll + pauseSettle).Milliseconds()
	to := from + (pauseHold + 2*(pausePoll+pauseSettle)).Milliseconds()
	moved := 0
	for _, g := range globs {
		p, err := glob.Compile(g)
		if err != nil {
			continue
		}
		match := func(target string) bool { return p.MatchTarget(target) && !view.of(target).paused }
		for _, shard := range e.Owned() {
			n, err := r.UnpauseShard(ctx, shard, p.Literals(), match, from, to)
			moved += n
			if err != nil {
				e.log.Warn("a paused target vanished from Redis; its put-back messages go out at their put-back time",
					"globs", globs, "shard", shard, "err", err)
				return
			}
		}
	}
	e.log.Warn("paused targets vanished from Redis without a resume (Redis lost data?): their put-back messages were given their due time",
		"globs", globs, "moved", moved)
}
