package egress

import (
	"context"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/backoff"
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

// resyncBatch is how many owned shards a periodic resync reads (rotating): the idle cost
// of the safety net stays O(1) per replica whatever BRIDGE_SHARDS is.
const resyncBatch = 16

// unknownHead marks a shard whose head must be read before it is waited for.
const unknownHead = math.MinInt64

// settleDelay is how long completed acks and retries wait for a claim to ride with (one
// round trip for both) before they go alone. Under steady load the next claim comes
// sooner; idle, a settlement goes 2 ms after its group completed. Capacity pressure and
// shutdown send them at once.
const settleDelay = 2 * time.Millisecond

// shardState is the scheduler's knowledge of one owned shard. Only the scheduler's
// goroutine touches it.
type shardState struct {
	shard    int
	startAt  time.Time // e.now's clock: no claim before (handover pause)
	head     int64     // earliest score (Redis ms); -1 empty; unknownHead: read it
	inflight int       // claimed and not yet settled
	errs     backoff.Backoff
	retryAt  time.Time // after a failed claim: no claim before
}

// deliverFunc hands a claimed batch to delivery ([delivery.submit]). It must not block
// on publishing; it hands every message of b back through settle, in settlements whose n
// add up to len(b.claimed), each from whatever goroutine finished it.
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

	shards map[int]*shardState
	view   ownedView
	total  int // messages claimed and not yet settled, over all shards
	cursor int // next position of the periodic resync

	kick    chan struct{}
	mu      sync.Mutex
	offers  map[int]int64 // shard -> earliest due offered by wake-ups
	resync  bool          // re-read every owned head (a resubscription)
	settleQ []*settlement
	settleT time.Time    // when the oldest queued settlement arrived (s.now)
	handed  atomic.Int64 // messages handed to deliver whose settlements have not come back
}

// newScheduler returns the scheduler of the shards own assigns, woken by wakes, handing
// what it claims to deliver. cfg has its defaults applied.
func newScheduler(cfg Config, store Claimer, own *ownership, wakes *delaystore.Wakeups, clock *redisClock,
	log *slog.Logger, metrics *Metrics, deliver deliverFunc) *scheduler {
	s := &scheduler{cfg: cfg, store: store, own: own, wakes: wakes, clock: clock, now: cfg.Now, log: log,
		metrics: metrics, deliver: deliver, shards: map[int]*shardState{}, kick: make(chan struct{}, 1),
		offers: map[int]int64{}}
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
	s.mu.Unlock()
	s.poke()
}

// handOff hands a claimed batch to deliver; its messages count as handed until their
// settlements come back (returned).
func (s *scheduler) handOff(ctx context.Context, b batch) {
	failpoint.Inject(failpoint.AfterClaim)
	s.metrics.claimed(len(b.claimed))
	s.handed.Add(int64(len(b.claimed)))
	s.deliver(ctx, b, s.returned)
}

// returned takes back a settlement of messages handed to deliver. It queues it before
// they stop counting as handed: run ends only when nothing is handed and the queue is
// empty.
func (s *scheduler) returned(st *settlement) {
	s.settle(st)
	s.handed.Add(-int64(st.n))
	s.poke()
}

// listen turns wake-ups into offers, resyncs and heartbeats until the channel closes.
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
		if len(claims) > 0 || !claiming || s.settleNow() {
			acks, retries, n = s.takeSettlements()
		}
		if len(acks)+len(retries)+len(claims) > 0 {
			s.exchange(sctx, acks, retries, claims, n)
			continue
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

// settleNow reports whether queued settlements should go without a claim: the oldest
// waited settleDelay, or capacity is short (settling frees it).
func (s *scheduler) settleNow() bool {
	s.mu.Lock()
	queued, since := len(s.settleQ), s.settleT
	s.mu.Unlock()
	if queued == 0 {
		return false
	}
	batch := s.cfg.BatchSize
	if s.total >= replicaCapacity*batch/2 || s.now().Sub(since) >= settleDelay {
		return true
	}
	for _, st := range s.shards {
		if st.inflight >= shardCapacity*batch/2 {
			return true
		}
	}
	return false
}

func (s *scheduler) settleEmpty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.settleQ) == 0
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
			st = &shardState{shard: sh, head: unknownHead, errs: backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}}
			s.shards[sh] = st
			gained = append(gained, sh)
			changed = true
		}
		// Ownership runs on the process clock; the scheduler's own decisions on e.now
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
	heads, now, err := s.store.Heads(ctx, shards)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("read heads", "err", err)
		}
		return // unknown heads are claimed at once (an empty claim tells the head)
	}
	s.clock.observe(now, s.now())
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
			st.head = due
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

// takeSettlements empties the settlement queue into one list of acks and one of retries;
// n is the messages they settle.
func (s *scheduler) takeSettlements() (acks []delaystore.Receipt, retries []delaystore.RetryRequest, n map[int]int) {
	s.mu.Lock()
	q := s.settleQ
	s.settleQ = nil
	s.mu.Unlock()
	n = map[int]int{}
	for _, st := range q {
		acks = append(acks, st.acks...)
		retries = append(retries, st.retries...)
		n[st.shard] += st.n
	}
	return acks, retries, n
}

// due returns a claim for every owned shard that may be claimed now: started, due by the
// Redis clock estimate (or head unknown), not backing off after an error, with room.
func (s *scheduler) due() []delaystore.ClaimRequest {
	now := s.now()
	if !time.Now().Before(s.view.until) {
		return nil // the membership may have expired: another replica may own these shards
	}
	redisNow := s.clock.redisNow(now)
	batch := s.cfg.BatchSize
	room := replicaCapacity*batch - s.total
	var claims []delaystore.ClaimRequest
	for _, sh := range s.sorted() {
		st := s.shards[sh]
		free := min(shardCapacity*batch-st.inflight, batch, room)
		if free <= 0 || !s.owns(sh) || now.Before(st.startAt) || now.Before(st.retryAt) {
			continue
		}
		if st.head != unknownHead && (st.head < 0 || st.head > redisNow) {
			continue
		}
		claims = append(claims, delaystore.ClaimRequest{Shard: sh, Max: free})
		st.inflight += free // reserved; what is not claimed is given back
		s.total += free
		room -= free
	}
	return claims
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
		consider(s.settleT.Add(settleDelay))
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
			at = s.clock.local(st.head)
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

// exchange makes one round trip: settlements and claims. fence is taken before the call:
// the lease runs from a moment after it. It becomes a context deadline, so it is read
// from the process clock, never from e.now (a test clock shifted by
// DELAYBRIDGE_TEST_CLOCK_OFFSET would put it in the past or future).
func (s *scheduler) exchange(ctx context.Context, acks []delaystore.Receipt, retries []delaystore.RetryRequest,
	claims []delaystore.ClaimRequest, settled map[int]int) {
	fence := time.Now()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
	x := s.store.Exchange(cctx, acks, retries, claims)
	cancel()
	s.settled(acks, retries, x, settled)
	for i, req := range claims {
		st := s.shards[req.Shard]
		cl, err := x.Claims[i], x.ClaimErrs[i]
		st.inflight -= req.Max - len(cl.Messages) - len(cl.Corrupt)
		s.total -= req.Max - len(cl.Messages) - len(cl.Corrupt)
		if err != nil {
			s.claimFailed(ctx, st, err)
			continue
		}
		if st.errs.Failing() {
			s.log.Info("claim recovered", "shard", st.shard)
			st.errs.Reset()
		}
		s.clock.observe(cl.Now, s.now())
		st.head = cl.Next
		if len(cl.Messages)+len(cl.Corrupt) == req.Max {
			st.head = cl.Now // more may be due: claim again at once (capacity permitting)
		}
		if len(cl.Corrupt) > 0 {
			s.quarantine(st.shard, cl.Corrupt)
		}
		if len(cl.Messages) > 0 {
			s.handOff(ctx, batch{shard: st.shard, claimed: cl.Messages, fence: fence})
		}
	}
}

// claimFailed backs the shard off after a failed claim; a streak is logged once at Warn.
func (s *scheduler) claimFailed(ctx context.Context, st *shardState, err error) {
	if ctx.Err() != nil {
		return
	}
	if !st.errs.Failing() {
		s.log.Warn("claim failed; retrying with backoff", "shard", st.shard, "err", err)
	} else {
		s.log.Debug("claim failed", "shard", st.shard, "err", err)
	}
	st.retryAt = s.now().Add(st.errs.Next())
}

// settled applies the settlement part of an exchange: logs, heads, capacity.
func (s *scheduler) settled(acks []delaystore.Receipt, retries []delaystore.RetryRequest, x delaystore.Exchanged, n map[int]int) {
	if len(acks) > 0 {
		if x.AckErr != nil {
			// The lease expires and the messages are published again (same x-delay-id and
			// Nats-Msg-Id): a duplicate, never a loss.
			s.log.Error("ack after publish; messages will be published again after the lease", "count", len(acks), "err", x.AckErr)
		} else if stale := len(acks) - x.Acked.N; stale > 0 {
			// The lease expired before the target confirmed (a pause, a slow broker): another
			// replica claimed these messages and the store fenced this ack. The copy just
			// published is a duplicate with the same Nats-Msg-Id.
			s.log.Warn("acks fenced: the lease expired before the publish was confirmed; another replica owns these messages",
				"stale", stale, "acks", len(acks))
		}
		s.heads(x.Acked.Heads)
	}
	if len(retries) > 0 {
		if x.RetryErr != nil {
			s.log.Error("schedule retry; messages come back after the lease", "count", len(retries), "err", x.RetryErr)
		} else if stale := len(retries) - x.Retried.N; stale > 0 {
			// As with acks: the lease ran out first (a paused replica whose messages'
			// contexts ended meanwhile); another replica owns these messages.
			s.log.Warn("retries fenced: the lease expired before the publish failed; another replica owns these messages",
				"stale", stale, "retries", len(retries))
		}
		s.heads(x.Retried.Heads) // retries and put-backs may make a head earlier
	}
	for sh, k := range n {
		if st := s.shards[sh]; st != nil {
			st.inflight -= k
			if st.inflight == 0 && !s.owns(sh) {
				delete(s.shards, sh) // lost while its claims were in flight
			}
		}
		s.total -= k
		s.metrics.settled(k)
	}
}

// heads takes the heads a settle call reported (the state after it).
func (s *scheduler) heads(heads map[int]int64) {
	for sh, h := range heads {
		if st := s.shards[sh]; st != nil {
			st.head = h
		}
	}
}

// quarantine handles entries whose envelope could not be decoded: they cannot be
// published or dead-lettered, so they stay in Redis for an operator, tried again only
// every BackoffMax, and are logged at Error.
func (s *scheduler) quarantine(shard int, corrupt []delaystore.Receipt) {
	reqs := make([]delaystore.RetryRequest, len(corrupt))
	for i, r := range corrupt {
		reqs[i] = delaystore.RetryRequest{Receipt: r, Backoff: s.cfg.BackoffMax}
		s.log.Error("corrupt envelope in the delay store; left in place", "id", r.ID, "shard", r.Shard)
	}
	s.settle(&settlement{shard: shard, retries: reqs, n: len(reqs)})
}
