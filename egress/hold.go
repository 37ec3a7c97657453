package egress

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// claimLead is the least time before a shard's head is due (by the Redis clock estimate)
// that the scheduler claims the shard when it claims ahead (Config.ClaimAhead), so that
// the round trip is done by the due time; the lead grows with the round trips seen
// (scheduler.lead). The claim script never leases an entry due later than its own Redis
// time + ClaimAhead, and the holder hands nothing over before its due time.
const claimLead = 2 * time.Millisecond

// holder keeps claimed messages that are not due yet (claimed ahead) and hands each batch
// to release once the Redis clock estimate reaches its due time (Claimed.Eligible: the
// due time, or a retry's next attempt), never before: the estimate runs behind Redis
// (redisClock). One goroutine (run) and one timer for all; what it holds counts as handed
// for the scheduler. A held message is in delivery: only the cancel of a recurring one
// takes its firing out (withdraw).
// Safe for concurrent use.
type holder struct {
	clock *redisClock
	now   func() time.Time

	mu   sync.Mutex
	q    heldQueue
	kick chan struct{}
}

// newHolder returns an empty holder on the Redis clock estimate clock.
func newHolder(clock *redisClock, now func() time.Time) *holder {
	return &holder{clock: clock, now: now, kick: make(chan struct{}, 1)}
}

// add holds b until due (Redis unix ms). Never blocks.
func (h *holder) add(b batch, due int64) {
	h.mu.Lock()
	heap.Push(&h.q, held{due: due, b: b})
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// run hands batches to release (from its goroutine) at their due times until ctx ends;
// what it still holds then is dropped (the messages come back after their lease, like any
// claimed message whose replica stopped). The scheduler runs it on its store context,
// which outlives Run's ctx by the drain, so that a shutdown hands held batches over at
// their due times.
func (h *holder) run(ctx context.Context, release func(batch)) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		for _, b := range h.takeDue() {
			release(b)
		}
		var wait <-chan time.Time
		if next, ok := h.next(); ok {
			timer.Reset(max(h.clock.local(next).Sub(h.now()), 0))
			wait = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		case <-wait:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// takeDue removes the batches due by the Redis clock estimate and merges those of one
// shard (the earliest fence: the lease runs from it).
func (h *holder) takeDue() []batch {
	now := h.clock.redisNow(h.now())
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []batch
	at := map[int]int{} // shard -> index into out
	for h.q.Len() > 0 && h.q[0].due <= now {
		b := heap.Pop(&h.q).(held).b
		if i, ok := at[b.shard]; ok {
			out[i].claimed = append(out[i].claimed, b.claimed...)
			if b.fence.Before(out[i].fence) {
				out[i].fence = b.fence
			}
			continue
		}
		at[b.shard] = len(out)
		out = append(out, b)
	}
	return out
}

// withdraw removes the held copy of message id at version of shard (cancelled or
// replaced meanwhile: Wake.ID) and returns it as a batch of its own (no message: it was
// not held, or was handed over already).
func (h *holder) withdraw(shard int, id string, version int64) batch {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.q {
		b := &h.q[i].b
		if b.shard != shard {
			continue
		}
		for j, c := range b.claimed {
			if c.ID != id || c.Version != version {
				continue
			}
			out := batch{shard: shard, fence: b.fence, claimed: []delaystore.Claimed{c}}
			b.claimed = append(b.claimed[:j:j], b.claimed[j+1:]...)
			if len(b.claimed) == 0 {
				heap.Remove(&h.q, i)
			}
			return out
		}
	}
	return batch{}
}

// next is the earliest due time held (Redis ms), if any.
func (h *holder) next() (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.q.Len() == 0 {
		return 0, false
	}
	return h.q[0].due, true
}

// held is a batch of one due millisecond.
type held struct {
	due int64
	b   batch
}

// heldQueue is a min-heap of held batches by due time (container/heap).
type heldQueue []held

func (q heldQueue) Len() int           { return len(q) }
func (q heldQueue) Less(i, j int) bool { return q[i].due < q[j].due }
func (q heldQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *heldQueue) Push(x any)        { *q = append(*q, x.(held)) }
func (q *heldQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// split divides a claimed batch into the messages eligible by now (Redis ms) and, per
// later eligible millisecond, one batch each. A claim returns its entries in score order,
// so the eligible ones come first and the later ones in order; the common cases (all of
// them eligible, or none) copy nothing.
func split(b batch, now int64) (eligible batch, later []held) {
	k := 0
	for k < len(b.claimed) && b.claimed[k].Eligible <= now {
		k++
	}
	if k == len(b.claimed) {
		return b, nil
	}
	eligible = batch{shard: b.shard, fence: b.fence, claimed: b.claimed[:k:k]}
	rest := b.claimed[k:]
	for len(rest) > 0 {
		at, n := rest[0].Eligible, 1
		for n < len(rest) && rest[n].Eligible == at {
			n++
		}
		later = append(later, held{due: at, b: batch{shard: b.shard, fence: b.fence, claimed: rest[:n:n]}})
		rest = rest[n:]
	}
	return eligible, later
}
