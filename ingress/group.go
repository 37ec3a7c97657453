package ingress

import (
	"context"
	"slices"
	"time"
)

// maxCallBytes bounds the payload bytes of a merged park call: lanes are added to a call
// while it holds less, and fewer than BatchSize messages (its first lane always goes, as
// a lane's batch did alone).
const maxCallBytes = 4 << 20

// laneQueue is one lane: the messages of its shards not yet handed to a park call, in
// the order they came, and whether a call holds some of its messages (then the lane
// sends nothing else, so the messages of one id are parked in order).
type laneQueue struct {
	pending []prepared
	busy    bool
}

// callEvent is what a park call tells the group loop: an attempt started (a retry) or
// returned; free lists the lanes of the call that have nothing left to park (on the
// last event, every lane of the call).
type callEvent struct {
	started, returned, finished bool
	free                        []int
}

// group parks the prepared messages of one source (group commit). A message goes to
// lane shard mod Lanes. A lane's messages are ready at BatchSize of them or Linger after
// the first was received (a sparse lane later: readyAt). When a lane is ready and no park
// call is in flight, one call starts at once with the waiting messages of every lane that
// has no call under way (lanes that are not ready yet go early, never later; a sparse
// lane waits to fill instead: sparseWait); while a call is in flight, ready
// lanes wait for it to return and then go together in the next call, unless they hold a
// full batch (BatchSize) or one of them has been ready for Linger already (a slow call
// delays the others by at most one more Linger): then a call starts at once. A call takes
// at most BatchSize messages per lane and stops adding lanes at BatchSize messages or
// maxCallBytes of payload, so that under heavy load several calls run in parallel.
// A lane takes part in one call at a time (retries of its failed shards included), so
// the messages of one id are parked in the order they came. group reads input until it
// is closed, then parks what is left and returns when every call has finished.
func (in *Ingress) group(ctx context.Context, src Source, input <-chan prepared) {
	lanes := make([]laneQueue, in.cfg.Lanes)
	events := make(chan callEvent)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var armed time.Time // when timer fires; zero: stopped
	inflight := 0       // park attempts under way
	calls := 0          // calls not finished (in flight or waiting to retry)
	closed := false
	for {
		now := in.now()
		// Start calls while the rule allows it.
		for {
			ready, overdue, next := in.ready(lanes, now, closed, inflight > 0)
			if ready == 0 || (inflight > 0 && ready < in.cfg.BatchSize && !overdue) {
				in.arm(timer, &armed, next)
				break
			}
			batch, held := in.takeCall(lanes, now, closed)
			inflight++
			calls++
			go in.parkCall(ctx, src, batch, held, events)
		}
		if closed && calls == 0 {
			return // nothing pending: ready is > 0 whenever a free lane holds messages
		}
		var recv <-chan prepared
		if !closed && !in.lanesFull(lanes) {
			recv = input
		}
		var fire <-chan time.Time
		if !armed.IsZero() {
			fire = timer.C
		}
		select {
		case p, ok := <-recv:
			if !ok {
				closed = true
				continue
			}
			lanes[p.lane].pending = append(lanes[p.lane].pending, p)
		case <-fire:
			armed = time.Time{}
		case ev := <-events:
			if ev.started {
				inflight++
			}
			if ev.returned {
				inflight--
			}
			if ev.finished {
				calls--
			}
			for _, l := range ev.free {
				lanes[l].busy = false
			}
		}
	}
}

// ready returns how many messages the lanes without a call could send now (0 when none
// of them is ready: BatchSize messages, its readyAt passed, or input closed; a lane that
// waits to fill is not counted), whether one of them has been ready for Linger already
// (it waits no longer for a call in flight), and the next moment one of these changes by
// the clock (zero: none; waiting is whether a call is in flight).
func (in *Ingress) ready(lanes []laneQueue, now time.Time, closed, waiting bool) (n int, overdue bool, next time.Time) {
	anyReady := false
	soonest := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, l := range lanes {
		if l.busy || len(l.pending) == 0 {
			continue
		}
		due, waits := in.sparseWait(l, now, closed)
		soonest(due)
		if waits {
			continue // not counted: a call leaves it to fill (takeCall)
		}
		n += min(len(l.pending), in.cfg.BatchSize)
		late := due.Add(in.cfg.Linger)
		if closed || len(l.pending) >= in.cfg.BatchSize || !due.After(now) {
			anyReady = true
		}
		if !late.After(now) {
			overdue = true
		}
		if waiting {
			soonest(late)
		}
	}
	if !anyReady {
		return 0, false, next
	}
	return n, overdue, next
}

// sparseFill is how many messages make a lane worth a park call of its own at Linger:
// a script run costs Redis about ten commands per shard group whatever its size, so a
// lane with fewer may wait for more (Config.SparseLinger). At a steady 5k msgs/s one
// replica's lane fills in ~3 ms (a JetStream run of positions shares a shard); 4
// instead of 16 cost Redis ~12 % more CPU per message there; one replica of 32 at 1k msgs/s waits SparseLinger as before.
const sparseFill = 16

// readyAt is when the messages of a lane (pending, in arrival order, not empty) are
// ready to park, short of BatchSize: Linger after the first. A sparse lane, fewer than
// sparseFill messages that all have a source id (their source redelivers them until
// acked: JetStream, Kafka; a core NATS message, or a request waiting for its reply, has
// none), waits longer for more: until SparseLinger after the first, but never past half
// the time left to any one's due time (counted from its receipt), so a message due soon
// goes at Linger as before and none is parked later than halfway to its due time.
func (in *Ingress) readyAt(pending []prepared) time.Time {
	at := pending[0].at.Add(in.cfg.Linger)
	if len(pending) >= sparseFill || in.cfg.SparseLinger <= in.cfg.Linger {
		return at
	}
	limit := pending[0].at.Add(in.cfg.SparseLinger)
	for _, p := range pending {
		if p.req.Envelope.SourceID == "" {
			return at
		}
		left := p.req.Delay
		if p.req.Absolute {
			left = time.UnixMilli(p.req.At).Sub(p.at)
		}
		if by := p.at.Add(left / 2); by.Before(limit) {
			limit = by
		}
	}
	if limit.Before(at) {
		return at
	}
	return limit
}

// sparseWait returns when lane l (not busy, not empty) is ready (readyAt) and whether it
// waits to fill: it is sparse (ready later than Linger after its first message) and not
// ready yet, and input is open. A call does not take such a lane early with the others
// (group commit), since one more shard group of a message or two costs Redis almost as
// much as a call of its own: it goes when it is ready.
func (in *Ingress) sparseWait(l laneQueue, now time.Time, closed bool) (time.Time, bool) {
	due := in.readyAt(l.pending)
	if closed || len(l.pending) >= in.cfg.BatchSize {
		return due, false
	}
	return due, due.After(now) && due.After(l.pending[0].at.Add(in.cfg.Linger))
}

// arm sets timer to fire at next (zero: stops it), unless it is set for that moment.
func (in *Ingress) arm(timer *time.Timer, armed *time.Time, next time.Time) {
	if next.Equal(*armed) {
		return
	}
	*armed = next
	if next.IsZero() {
		timer.Stop()
		return
	}
	timer.Reset(next.Sub(in.now()))
}

// lanesFull reports whether a lane holds BatchSize messages or more: then no more are
// read (back-pressure) until a call takes them.
func (in *Ingress) lanesFull(lanes []laneQueue) bool {
	for _, l := range lanes {
		if len(l.pending) >= in.cfg.BatchSize {
			return true
		}
	}
	return false
}

// takeCall takes the next call's batch: up to BatchSize messages of every lane without a
// call that does not wait to fill (sparseWait), the full lanes first, until the call
// holds BatchSize messages or maxCallBytes of payload (under heavy load the lanes left
// out start their own calls, in parallel, as lanes did before group commit); the lanes
// taken are marked busy and returned.
func (in *Ingress) takeCall(lanes []laneQueue, now time.Time, closed bool) ([]prepared, []int) {
	var batch []prepared
	var held []int
	bytes := 0
	take := func(i int) {
		l := &lanes[i]
		if l.busy || len(l.pending) == 0 || (len(held) > 0 && (len(batch) >= in.cfg.BatchSize || bytes >= maxCallBytes)) {
			return
		}
		if _, waits := in.sparseWait(*l, now, closed); waits {
			return
		}
		k := min(len(l.pending), in.cfg.BatchSize)
		for _, p := range l.pending[:k] {
			bytes += len(p.req.Envelope.Payload)
		}
		batch = append(batch, l.pending[:k]...)
		l.pending = append(l.pending[:0:0], l.pending[k:]...)
		l.busy = true
		held = append(held, i)
	}
	for i := range lanes {
		if len(lanes[i].pending) >= in.cfg.BatchSize {
			take(i)
		}
	}
	for i := range lanes {
		take(i)
	}
	in.joinSparse(lanes, &batch, &held)
	return batch, held
}

// joinSparse adds to a call (batch, of the lanes held) every lane that waits to fill
// (sparseWait) and holds only messages of shards the call parks already: they make no
// shard group of their own, so they go early at no cost. With runs of positions longer
// than 64 a stream's consecutive arrivals take the lanes in turn but share a shard
// (delaystore.Store.LaneOf), so one call then parks what every lane gathered instead of
// one call per lane. Limits as takeCall's.
func (in *Ingress) joinSparse(lanes []laneQueue, batch *[]prepared, held *[]int) {
	candidate := func(l *laneQueue) bool {
		return !l.busy && len(l.pending) > 0 && len(*batch)+len(l.pending) <= in.cfg.BatchSize
	}
	if len(*held) == 0 || !slices.ContainsFunc(lanes, func(l laneQueue) bool { return candidate(&l) }) {
		return // a burst: every lane full or taken, nothing to look at
	}
	var shards []int // the call's shards; few: a call's messages come from few runs
	bytes := 0
	for _, p := range *batch {
		if !slices.Contains(shards, p.shard) {
			shards = append(shards, p.shard)
		}
		bytes += len(p.req.Envelope.Payload)
	}
	for i := range lanes {
		l := &lanes[i]
		if !candidate(l) || bytes >= maxCallBytes ||
			slices.ContainsFunc(l.pending, func(p prepared) bool { return !slices.Contains(shards, p.shard) }) {
			continue
		}
		for _, p := range l.pending {
			bytes += len(p.req.Envelope.Payload)
		}
		*batch = append(*batch, l.pending...)
		l.pending = l.pending[:0:0]
		l.busy = true
		*held = append(*held, i)
	}
}

// parkCall parks batch (the messages of lanes held) and reports to the group loop on
// events: each retry attempt as it starts, each attempt's return with the lanes that
// have nothing left to park, and the end of the call.
func (in *Ingress) parkCall(ctx context.Context, src Source, batch []prepared, held []int, events chan<- callEvent) {
	in.park(ctx, src, batch, func(retry bool) {
		if retry {
			events <- callEvent{started: true}
		}
	}, func(rest []prepared) {
		var free, still []int
		for _, l := range held {
			if laneIn(rest, l) {
				still = append(still, l)
			} else {
				free = append(free, l)
			}
		}
		held = still
		events <- callEvent{returned: true, free: free}
	})
	events <- callEvent{finished: true, free: held}
}

// laneIn reports whether a message of lane l is in batch.
func laneIn(batch []prepared, l int) bool {
	for _, p := range batch {
		if p.lane == l {
			return true
		}
	}
	return false
}
