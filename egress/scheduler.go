package egress

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/failpoint"
)

// shardCapacity bounds, per shard, the messages claimed and not yet settled, in units of
// BatchSize (so at most shardCapacity x BatchSize messages). replicaCapacity bounds them
// over all shards (16 default shards' worth), so that owning 1024 shards does not raise
// the memory bound. Which target may use that capacity is the limiter's business.
const (
	shardCapacity   = 4
	replicaCapacity = 16 * shardCapacity
)

// settleDelay is how long completed acks and retries wait for a claim to ride with (one
// round trip for both) before they go alone. Under steady load the next claim comes
// sooner; idle, a settlement goes 2 ms after its group completed. Capacity pressure and
// shutdown send them at once.
const settleDelay = 2 * time.Millisecond

// ackHold is how long completed acks wait before they may go at all (with the next claim,
// or alone settleDelay later), so that each shard's ack group carries several messages
// (Redis' cost follows the commands of the shard groups a script run touches: at a steady 5k msgs/s over 16 shards the acks of one claim hold about one message per
// shard, held 32 ms about ten). Only the ack waits, never a claim or a publish. A hold
// ends early, so that the acks go at once, when: a queued retry or put-back needs its
// round trip; a queued ack releases the next message of an ordering key
// (settlement.release); capacity runs short (settleNow); a queued ack's messages reached
// half their lease (settleBy: a held ack never lets a lease run out into a second
// delivery); and at shutdown. docs/design.md "Egress".
const ackHold = 32 * time.Millisecond

// deliverFunc hands a claimed batch to delivery ([delivery.submit]). It must not block
// on publishing; it hands every message of b back through settle, in settlements whose n
// add up to len(b.claimed) + len(b.corrupt), each from whatever goroutine finished it.
type deliverFunc func(ctx context.Context, b batch, settle func(*settlement))

// scheduler claims the due messages of the shards this replica owns and settles them.
// One goroutine (run) owns all shard states and makes one store round trip at a time
// (Exchange): the acks and retries that completed since the last one, and a claim for
// every owned shard that is due and has room. While a round trip is in flight, what
// becomes due or completes waits for the next one: under load the round trips per message
// fall by themselves, when idle a due message is claimed at once. What it claims it hands
// to deliver, and it takes the settlements back through settle; it never publishes.
type scheduler struct {
	cfg     Config // BatchSize, DrainTimeout, ResyncInterval, BackoffMax
	store   Claimer
	own     *ownership
	wakes   *delaystore.Wakeups
	clock   *redisClock // observed from every Redis reply; delivery reads it
	now     func() time.Time
	log     *slog.Logger
	metrics *Metrics
	deliver deliverFunc
	// notice gets the fleet's notices that are not the scheduler's: WakePauses,
	// WakeTails and WakeResync (after which notices may have been missed). Must not block.
	notice func(delaystore.Wake)

	shards map[int]*shardState
	view   ownedView
	total  int // messages claimed and not yet settled, over all shards
	cursor int // next position of the periodic resync

	kick    chan struct{}
	mu      sync.Mutex
	offers  map[int]int64 // shard -> earliest due offered by wake-ups
	resync  bool          // re-read every owned head (a resubscription)
	settleQ []*settlement
	settleT time.Time // when the oldest queued settlement arrived (s.now)
	// settleR: a queued settlement holds retries or an ack that releases an ordering
	// key's next message (nothing of the queue is held, ackHold)
	settleR bool
	// settleBy: the queue goes by then whatever the hold (process clock): half the lease
	// after the earliest fence of its settlements; zero: no fence known.
	settleBy time.Time
	ackHold  time.Duration // ackHold; a benchmark compares others
	handed   atomic.Int64  // messages handed to deliver (or held) whose settlements have not come back
	ahead    time.Duration // cfg.ahead(): claimed ahead of due; 0: only what is due
	rtt      time.Duration // a high quantile of recent round trips (noteRoundTrip)
	hold     *holder       // claimed messages not yet due
}

// newScheduler returns the scheduler of the shards own assigns, woken by wakes, handing
// what it claims to deliver. cfg has its defaults applied.
func newScheduler(cfg Config, store Claimer, own *ownership, wakes *delaystore.Wakeups, clock *redisClock,
	log *slog.Logger, metrics *Metrics, deliver deliverFunc) *scheduler {
	s := &scheduler{cfg: cfg, store: store, own: own, wakes: wakes, clock: clock, now: cfg.Now, log: log,
		metrics: metrics, deliver: deliver, notice: func(delaystore.Wake) {}, shards: map[int]*shardState{}, kick: make(chan struct{}, 1),
		offers: map[int]int64{}, ackHold: ackHold, ahead: cfg.ahead(), hold: newHolder(clock, cfg.Now)}
	own.notify = s.poke
	return s
}

// poke makes the scheduler look at its inputs again. Never blocks.
func (s *scheduler) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// offer tells the scheduler that shard may have a message due at due (Redis ms).
func (s *scheduler) offer(shard int, due int64) {
	s.mu.Lock()
	if cur, ok := s.offers[shard]; !ok || due < cur {
		s.offers[shard] = due
	}
	s.mu.Unlock()
	s.poke()
}

// settle queues a settlement for the next round trip.
func (s *scheduler) settle(st *settlement) {
	s.mu.Lock()
	if len(s.settleQ) == 0 {
		s.settleT = s.now()
	}
	s.settleQ = append(s.settleQ, st)
	s.settleR = s.settleR || len(st.retries) > 0 || st.release
	if by := st.fence.Add(s.cfg.Lease / 2); s.cfg.Lease > 0 && !st.fence.IsZero() && (s.settleBy.IsZero() || by.Before(s.settleBy)) {
		s.settleBy = by
	}
	s.mu.Unlock()
	s.poke()
}

// handOff hands a claimed batch to deliver, its messages that are not due yet (claimed
// ahead) to the holder until they are; they all count as handed until their settlements
// come back (returned).
func (s *scheduler) handOff(ctx context.Context, b batch) {
	failpoint.Inject(failpoint.AfterClaim)
	s.metrics.claimed(len(b.claimed))
	s.handed.Add(int64(len(b.claimed)))
	now, later := split(b, s.clock.redisNow(s.now()))
	for _, h := range later {
		s.hold.add(h.b, h.due)
	}
	if len(now.claimed) > 0 {
		s.deliver(ctx, now, s.returned)
	}
}

// returned takes back a settlement of messages handed to deliver. It queues it before
// they stop counting as handed: run ends only when nothing is handed and the queue is
// empty.
func (s *scheduler) returned(st *settlement) {
	s.settle(st)
	s.handed.Add(-int64(st.n))
	s.poke()
}

// withdraw drops the held firing of a recurring message that was cancelled after this
// replica claimed it ahead of its due time (w.ID at w.Version): it is not published, and
// settles with nothing to ack (the store has no such entry any more).
func (s *scheduler) withdraw(w delaystore.Wake) {
	if b := s.hold.withdraw(w.Shard, w.ID, w.Version); len(b.claimed) > 0 {
		s.log.Debug("claimed ahead, withdrawn before its due time (a recurring message cancelled)", "id", w.ID, "shard", w.Shard)
		s.returned(&settlement{shard: b.shard, n: len(b.claimed), fence: b.fence})
	}
}

// listen turns wake-ups into offers, resyncs, withdrawals and heartbeats until the
// channel closes.
func (s *scheduler) listen() {
	for w := range s.wakes.C {
		switch {
		case w.Shard == delaystore.WakeFleet:
			s.own.wake()
		case w.Shard == delaystore.WakeResync:
			s.mu.Lock()
			s.resync = true
			s.mu.Unlock()
			s.poke()
			s.notice(w)
		case w.Shard == delaystore.WakePauses, w.Shard == delaystore.WakeTails:
			s.notice(w)
		case w.Shard >= 0 && w.ID != "":
			s.withdraw(w)
		case w.Shard >= 0:
			s.offer(w.Shard, w.Due)
		}
	}
}

// run claims and settles until ctx ends; then it stops claiming, waits for the messages
// handed to delivery (each bounded by the lease fence and DrainTimeout) and settles them.
// Its store calls use a context detached from ctx that ends DrainTimeout after ctx (what
// is not settled by then comes back after the lease).
func (s *scheduler) run(ctx context.Context) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		s.poke()
		time.AfterFunc(s.cfg.DrainTimeout, cancel)
	})
	defer stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	resync := time.NewTicker(s.cfg.ResyncInterval)
	defer resync.Stop()
	go s.hold.run(sctx, func(b batch) { s.deliver(ctx, b, s.returned) }) // ends with sctx: when run returns, or DrainTimeout after ctx
	for {
		claiming := ctx.Err() == nil
		if claiming {
			s.follow(ctx)
			select {
			case <-resync.C: // here too: under steady load the loop may never wait below
				s.resyncSome(ctx)
			default:
			}
		}
		s.takeOffers(ctx)
		var claims []delaystore.ClaimRequest
		if claiming {
			claims = s.due()
		}
		var acks []delaystore.Receipt
		var retries []delaystore.RetryRequest
		var n map[int]int
		if !claiming || s.settleNow(len(claims) > 0, s.urgent(claims)) {
			acks, retries, n = s.takeSettlements()
		}
		if len(acks)+len(retries)+len(claims) > 0 {
			s.exchange(sctx, acks, retries, claims, n)
			continue
		}
		if len(n) > 0 { // settlements with nothing for the store (withdrawn copies)
			s.settled(nil, nil, delaystore.Exchanged{}, n)
		}
		if !claiming && s.handed.Load() == 0 && s.settleEmpty() {
			return // a settlement is queued before its messages stop counting as handed
		}
		select {
		case <-sctx.Done():
			return
		case <-s.kick:
		case <-s.wait(timer, claiming):
		case <-resync.C:
			s.resyncSome(ctx)
		}
	}
}

// settleNow reports whether the queued settlements go in this round trip: with a claim
// (withClaims) once the oldest was held (settleHold), alone settleDelay after that, and at
// once when capacity is short (settling frees it) or a queued settlement's messages
// reached half their lease (settleBy). An urgent claim does not take them along once held
// (a round trip that carries a large ack group takes several times as long): they go
// alone or with the next claim.
func (s *scheduler) settleNow(withClaims, urgent bool) bool {
	s.mu.Lock()
	queued, since, hold, by := len(s.settleQ), s.settleT, s.settleHold(), s.settleBy
	s.mu.Unlock()
	if queued == 0 {
		return false
	}
	if (!by.IsZero() && !time.Now().Before(by)) || s.capacityShort() {
		return true
	}
	age := s.now().Sub(since)
	return age >= hold+settleDelay || (withClaims && !urgent && age >= hold)
}

// capacityShort reports whether half the replica's or a shard's claim capacity is taken.
func (s *scheduler) capacityShort() bool {
	batch := s.cfg.BatchSize
	if s.total >= replicaCapacity*batch/2 {
		return true
	}
	for _, st := range s.shards {
		if st.inflight >= shardCapacity*batch/2 {
			return true
		}
	}
	return false
}

// urgent reports whether one of claims is of a shard whose head a wake-up lowered to a
// due time within the lead: a message parked that close to (or past) its due time, which
// waits for this round trip alone.
func (s *scheduler) urgent(claims []delaystore.ClaimRequest) bool {
	soon := s.clock.redisNow(s.now().Add(s.lead()))
	for _, c := range claims {
		if st := s.shards[c.Shard]; st != nil && st.offered && st.head <= soon {
			return true
		}
	}
	return false
}

// settleHold is how long the queued settlements are held before they may go: ackHold
// for acks only, none when a retry or an ack that releases a key's next message is
// queued. Called with s.mu held.
func (s *scheduler) settleHold() time.Duration {
	if s.settleR {
		return 0
	}
	return s.ackHold
}

// settleEmpty reports whether no settlement is queued.
func (s *scheduler) settleEmpty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.settleQ) == 0
}

// takeSettlements empties the settlement queue into one list of acks and one of retries;
// n is the messages they settle.
func (s *scheduler) takeSettlements() (acks []delaystore.Receipt, retries []delaystore.RetryRequest, n map[int]int) {
	s.mu.Lock()
	q := s.settleQ
	s.settleQ, s.settleR, s.settleBy = nil, false, time.Time{}
	s.mu.Unlock()
	n = map[int]int{}
	for _, st := range q {
		acks = append(acks, st.acks...)
		retries = append(retries, st.retries...)
		n[st.shard] += st.n
	}
	return acks, retries, n
}

// wait returns a channel that fires when the earliest owned shard is due (or may start),
// or nil when nothing is known to be due.
func (s *scheduler) wait(timer *time.Timer, claiming bool) <-chan time.Time {
	if !claiming {
		return nil
	}
	now := s.now()
	var next time.Time
	consider := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	s.mu.Lock()
	if len(s.settleQ) > 0 {
		consider(s.settleT.Add(s.settleHold() + settleDelay)) // alone; with a claim once held
		if !s.settleBy.IsZero() {
			consider(now.Add(time.Until(s.settleBy))) // settleBy is on the process clock
		}
	}
	s.mu.Unlock()
	if !time.Now().Before(s.view.until) {
		// the membership lapsed: no claims (a heartbeat pokes), settlements still go
		return s.arm(timer, now, next)
	}
	batch := s.cfg.BatchSize
	full := s.total >= replicaCapacity*batch
	for sh, st := range s.shards {
		if !s.owns(sh) || full || st.inflight >= shardCapacity*batch || st.head == -1 {
			continue
		}
		at := now
		if st.head != unknownHead {
			at = s.clock.local(st.head).Add(-s.lead())
		}
		if at.Before(st.startAt) {
			at = st.startAt
		}
		if at.Before(st.retryAt) {
			at = st.retryAt
		}
		consider(at)
	}
	return s.arm(timer, now, next)
}

// lead is how long before its head is due a shard is claimed when claiming ahead, so that
// the claim's round trip is done by the due time: a recent high round trip plus a
// millisecond, at least claimLead, at most half of ClaimAhead (the other half is what a
// claim takes beyond its head). None when not claiming ahead.
func (s *scheduler) lead() time.Duration {
	if s.ahead <= 0 {
		return 0
	}
	return min(max(s.rtt+time.Millisecond, claimLead), s.ahead/2)
}

// noteRoundTrip folds the duration of one exchange into s.rtt: it rises a quarter of the
// way to a longer one and sinks a thirty-second of the way to a shorter one, so that it
// follows about the 90th percentile of recent round trips.
func (s *scheduler) noteRoundTrip(d time.Duration) {
	if d > s.rtt {
		s.rtt += (d - s.rtt) / 4
	} else {
		s.rtt -= (s.rtt - d) / 32
	}
}

// arm sets timer to fire at next (nil channel when next is zero: nothing to wait for).
func (s *scheduler) arm(timer *time.Timer, now, next time.Time) <-chan time.Time {
	if next.IsZero() {
		return nil
	}
	timer.Stop()
	select {
	case <-timer.C:
	default:
	}
	timer.Reset(max(next.Sub(now), 0))
	return timer.C
}
