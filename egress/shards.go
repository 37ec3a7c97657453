package egress

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/delaybridge/delaybridge/internal/backoff"
)

// resyncBatch is how many owned shards a periodic resync reads (rotating): the idle cost
// of the safety net stays O(1) per replica whatever BRIDGE_SHARDS is.
const resyncBatch = 16

// unknownHead marks a shard whose head must be read before it is waited for.
const unknownHead = math.MinInt64

// shardState is the scheduler's knowledge of one owned shard. Only the scheduler's
// goroutine touches it.
type shardState struct {
	shard    int
	startAt  time.Time       // s.now's clock: no claim before (handover pause)
	head     int64           // earliest score (Redis ms); -1 empty; unknownHead: read it
	inflight int             // claimed and not yet settled
	errs     backoff.Backoff // the waits after failed claims
	fails    backoff.Streak  // the log of failed claims
	retryAt  time.Time       // after a failed claim: no claim before
	// offered: the head was lowered by a wake-up (a message parked as the shard's new
	// head) since the shard was last claimed; a claim of it is urgent when that head is due
	// within the lead (scheduler.urgent)
	offered bool
}

// follow applies a new ownership view: shards no longer owned are dropped (their claims
// in flight settle as usual), the wake channels follow the owned set, and the heads of the
// gained shards are read after their channels are subscribed (no park in between is
// missed).
func (s *scheduler) follow(ctx context.Context) {
	if gen, until := s.own.peek(); gen == s.view.gen && s.view.owned != nil {
		s.view.until = until
		return
	}
	v := s.own.snapshot()
	changed := len(v.owned) != len(s.shards)
	var gained []int
	for sh, start := range v.owned {
		st, ok := s.shards[sh]
		if !ok {
			st = &shardState{shard: sh, head: unknownHead, errs: backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
				fails: backoff.Streak{Log: s.log}}
			s.shards[sh] = st
			gained = append(gained, sh)
			changed = true
		}
		// Ownership runs on the process clock; the scheduler's own decisions on s.now
		// (shifted in fault builds, DELAYBRIDGE_TEST_CLOCK_OFFSET).
		st.startAt = s.now().Add(time.Until(start))
	}
	for sh, st := range s.shards {
		if _, ok := v.owned[sh]; !ok && st.inflight == 0 {
			delete(s.shards, sh)
			changed = true
		}
	}
	if changed {
		owned := make([]int, 0, len(v.owned))
		for sh := range v.owned {
			owned = append(owned, sh)
		}
		sort.Ints(owned)
		if err := s.wakes.Follow(ctx, owned); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("follow the owned shards' wake channels; heads are resynced periodically", "err", err)
			}
		}
		s.metrics.owned(len(owned))
	}
	s.view = v
	if len(gained) > 0 {
		sort.Ints(gained)
		s.readHeads(ctx, gained)
	}
}

// owns reports whether shard is owned in the current view.
func (s *scheduler) owns(sh int) bool {
	_, ok := s.view.owned[sh]
	return ok
}

// readHeads reads the heads of shards (one pipeline) into their states.
func (s *scheduler) readHeads(ctx context.Context, shards []int) {
	sent := s.now()
	heads, now, err := s.store.Heads(ctx, shards)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("read heads", "err", err)
		}
		return // unknown heads are claimed at once (an empty claim tells the head)
	}
	s.clock.observe(now, sent, s.now())
	for i, sh := range shards {
		if st := s.shards[sh]; st != nil {
			st.head = heads[i]
		}
	}
}

// resyncSome re-reads the heads of up to resyncBatch owned shards, rotating, or of all of
// them after a resubscription.
func (s *scheduler) resyncSome(ctx context.Context) {
	owned := make([]int, 0, len(s.shards))
	for sh := range s.shards {
		if s.owns(sh) {
			owned = append(owned, sh)
		}
	}
	if len(owned) == 0 {
		return
	}
	sort.Ints(owned)
	if len(owned) > resyncBatch {
		start := s.cursor % len(owned)
		s.cursor = start + resyncBatch
		owned = append(owned[start:], owned[:start]...)[:resyncBatch]
	}
	s.readHeads(ctx, owned)
}

// takeOffers folds the wake-ups' offers into the heads (a head only moves earlier) and
// runs a full resync when one was asked for.
func (s *scheduler) takeOffers(ctx context.Context) {
	s.mu.Lock()
	offers, resync := s.offers, s.resync
	s.offers, s.resync = map[int]int64{}, false
	s.mu.Unlock()
	for sh, due := range offers {
		if st := s.shards[sh]; st != nil && (st.head < 0 || due < st.head) && st.head != unknownHead {
			st.head, st.offered = due, true
		}
	}
	if resync && ctx.Err() == nil {
		var owned []int
		for _, sh := range s.sorted() {
			if s.owns(sh) {
				owned = append(owned, sh)
			}
		}
		if len(owned) > 0 {
			s.readHeads(ctx, owned)
		}
	}
}

// sorted returns the owned shards in order (claims go out in a stable order).
func (s *scheduler) sorted() []int {
	out := make([]int, 0, len(s.shards))
	for sh := range s.shards {
		out = append(out, sh)
	}
	sort.Ints(out)
	return out
}

// heads takes the heads a settle call reported (the state after it).
func (s *scheduler) heads(heads map[int]int64) {
	for sh, h := range heads {
		if st := s.shards[sh]; st != nil {
			st.head = h
		}
	}
}
