package egress

import (
	"context"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// settlement is what one target group (or one put-back) asks of the store.
type settlement struct {
	acks    []delaystore.Receipt
	retries []delaystore.RetryRequest
	n       int // messages it settles: given back to the shard's capacity
}

// maxCoalesce bounds the settlements one settler round takes together.
const maxCoalesce = 64

// settler is a shard's queue of settlements. Groups submit as they complete; the
// settler's goroutine (runSettler) takes whatever is ready and applies it in one Ack and
// one Retry call.
type settler struct {
	in chan *settlement
}

func newSettler() *settler { return &settler{in: make(chan *settlement, maxCoalesce)} }

// submit queues st; it blocks while the queue is full (the settler is behind on Redis).
func (s *settler) submit(st *settlement) { s.in <- st }

// close ends the queue; call it once no more submits can come.
func (s *settler) close() { close(s.in) }

// runSettler settles w's completed groups until the queue is closed and drained. Its Redis
// calls use a context detached from ctx (so settling finishes at shutdown), each bounded
// by DrainTimeout, and all of them ending DrainTimeout after ctx (what is not settled by
// then comes back after the lease).
func (e *Egress) runSettler(ctx context.Context, w *worker) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(e.cfg.DrainTimeout, cancel) })
	defer stop()
	for st := range w.settle.in {
		round := []*settlement{st}
	more:
		for len(round) < maxCoalesce {
			select {
			case next, ok := <-w.settle.in:
				if !ok {
					break more
				}
				round = append(round, next)
			default:
				break more
			}
		}
		e.settle(sctx, w, round)
	}
}

// settle applies one round: one Ack call for all its acks, one Retry call for all its
// retries and put-backs; then it offers the shard's new head to the worker and gives the
// messages' capacity back.
func (e *Egress) settle(ctx context.Context, w *worker, round []*settlement) {
	var acks []delaystore.Receipt
	var retries []delaystore.RetryRequest
	n := 0
	for _, st := range round {
		acks = append(acks, st.acks...)
		retries = append(retries, st.retries...)
		n += st.n
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.DrainTimeout)
	defer cancel()
	head, known := int64(-1), true
	if len(acks) > 0 {
		applied, err := e.store.Ack(ctx, acks)
		if err != nil {
			// The lease expires and the messages are published again (same x-delay-id and
			// Nats-Msg-Id): a duplicate, never a loss.
			e.log.Error("ack after publish; messages will be published again after the lease", "count", len(acks), "err", err)
			known = false
		}
		if stale := len(acks) - applied.N; err == nil && stale > 0 {
			// The lease expired before the target confirmed (a pause, a slow broker): another
			// replica claimed these messages and the store fenced this ack. The copy just
			// published is a duplicate with the same Nats-Msg-Id.
			e.log.Warn("acks fenced: the lease expired before the publish was confirmed; another replica owns these messages",
				"shard", w.shard, "stale", stale, "acks", len(acks))
		}
		head, known = mergeHead(head, applied.Heads, w.shard, known)
	}
	if len(retries) > 0 {
		applied, err := e.store.Retry(ctx, retries)
		if err != nil {
			e.log.Error("schedule retry; messages come back after the lease", "count", len(retries), "err", err)
			known = false
		}
		if stale := len(retries) - applied.N; err == nil && stale > 0 {
			// As with acks: the lease ran out first (a paused replica whose messages'
			// contexts ended meanwhile); another replica owns these messages.
			e.log.Warn("retries fenced: the lease expired before the publish failed; another replica owns these messages",
				"shard", w.shard, "stale", stale, "retries", len(retries))
		}
		head, known = mergeHead(head, applied.Heads, w.shard, known)
	}
	// The shard's head after settling (retries and put-backs may make it earlier than the
	// lease scores the worker knows).
	if known && head >= 0 {
		w.offer(head)
	}
	w.room.release(n)
	e.metrics.settled(n)
}

// mergeHead keeps the latest report of shard's head: the last call's answer wins, since
// it saw the state after every earlier call.
func mergeHead(head int64, heads map[int]int64, shard int, known bool) (int64, bool) {
	h, ok := heads[shard]
	if !ok {
		return head, false
	}
	return h, known
}
