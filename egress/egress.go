package egress

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/backoff"
)

// Claimer is the part of the delay store egress needs (delaystore.Store implements it).
// Implementations must be safe for concurrent use. Acks and retries are fenced by the
// receipt: a stale receipt changes nothing.
type Claimer interface {
	Fleet
	Shards() int
	// Exchange settles (acks, retries) and claims in one round trip.
	Exchange(ctx context.Context, acks []delaystore.Receipt, retries []delaystore.RetryRequest,
		claims []delaystore.ClaimRequest) delaystore.Exchanged
	Heads(ctx context.Context, shards []int) (heads []int64, now time.Time, err error)
	Wakeups(ctx context.Context) (*delaystore.Wakeups, error)
}

// PartialFailure is implemented by a publish error that knows which messages of the call
// failed (keyed by message UUID); messages not in the map were confirmed. Any other
// publish error fails every message of the call.
type PartialFailure interface {
	error
	FailedMessages() map[string]error
}

// Rejection is implemented by a publish error that is a permanent refusal of the message
// by the target broker (no permission, too large): retrying cannot help, so the message
// is dead-lettered after this one attempt with the reason as its x-delay-error.
type Rejection interface {
	error
	RejectReason() string
}

// rejected returns the reason of a permanent rejection in err, if any.
func rejected(err error) (string, bool) {
	var r Rejection
	if err != nil && errors.As(err, &r) {
		return r.RejectReason(), true
	}
	return "", false
}

// Egress publishes due messages. Create with New, then Run once. It assembles three
// parts: the fleet membership (ownership: which shards this replica claims), the
// scheduler (when to claim and settle, one store round trip at a time) and the delivery
// (publish, decide each message's settlement), which the scheduler reaches only through
// its deliver func.
type Egress struct {
	cfg      Config
	store    Claimer
	log      *slog.Logger
	metrics  *Metrics
	clock    *redisClock
	own      *ownership
	delivery *delivery
	tails    func(relay string) // HearTails
}

// New returns an Egress publishing through publishers, keyed by broker name ("nats",
// "kafka"). metrics may be nil. With cfg.TargetRate, store must also be a [Reserver].
func New(cfg Config, store Claimer, publishers map[string]message.Publisher, logger *slog.Logger, metrics *Metrics) (*Egress, error) {
	cfg.defaults()
	if store == nil {
		return nil, errors.New("egress: nil store")
	}
	if len(publishers) == 0 {
		return nil, errors.New("egress: no publishers")
	}
	if cfg.DLQSubject == "" {
		return nil, errors.New("egress: empty dead-letter subject")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Egress{cfg: cfg, store: store, log: logger.With("component", "egress"), metrics: metrics, clock: &redisClock{}}
	reserver, _ := store.(Reserver)
	var err error
	if e.delivery, err = newDelivery(cfg, publishers, reserver, e.clock, e.log, metrics); err != nil {
		return nil, err
	}
	e.own = newOwnership(cfg.MemberID, store.Shards(), cfg.OwnershipTTL, store, e.log, cfg.ClaimAll)
	return e, nil
}

// errNotJoined is Joined's answer before the first confirmed heartbeat.
var errNotJoined = errors.New("not a fleet member yet (no heartbeat confirmed)")

// Joined reports nil once this replica's membership of the fleet was confirmed by Redis
// (its shards are assigned from then on; /readyz waits for it), else an error. It does
// not go back: a lapse later is reported by the Redis checks and the owned-shards gauge.
func (e *Egress) Joined() error {
	if !e.own.joined.Load() {
		return errNotJoined
	}
	return nil
}

// Owned returns the shards this replica claims now, in order (for gauges).
func (e *Egress) Owned() []int {
	v := e.own.snapshot()
	out := make([]int, 0, len(v.owned))
	for s := range v.owned {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Run delivers due messages until ctx is cancelled, then leaves the fleet (its shards
// move at once), finishes the batches in flight (bounded by DrainTimeout) and returns nil.
// While Redis is unreachable or slow it waits and retries (the wake-up subscription
// included); it does not fail.
func (e *Egress) Run(ctx context.Context) error {
	wakes, ok := e.wakeups(ctx)
	if !ok {
		return nil
	}
	pr, pausable := e.store.(PauseReader)
	if pausable && !e.readPauses(ctx, pr) {
		_ = wakes.Close()
		return nil
	}
	s := newScheduler(e.cfg, e.store, e.own, wakes, e.clock, e.log, e.metrics, e.delivery.submit)
	s.notice = e.notice
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.listen()
	}()
	go func() {
		defer wg.Done()
		e.own.run(ctx)
	}()
	if pausable {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.delivery.pauses.watch(ctx, pr, e.log, e.metrics, func(globs []string) {
				wg.Go(func() { e.unpauseVanished(ctx, pr, globs) })
			})
		}()
	}
	s.run(ctx)
	_ = wakes.Close() // ends listen
	wg.Wait()
	return nil
}

// HearTails makes f hear every relay's announcement of live-event tails that reaches this
// replica (delaystore.WakeTails, with the relay's id). Call it before Run; f must not
// block.
func (e *Egress) HearTails(f func(relay string)) { e.tails = f }

// notice handles the fleet's notices the scheduler passes on: a changed pause set (or a
// resubscription, after which one may have been missed) is read again at once; a relay's
// tails go to HearTails' f.
func (e *Egress) notice(w delaystore.Wake) {
	switch w.Shard {
	case delaystore.WakePauses, delaystore.WakeResync:
		e.delivery.pauses.poke()
	case delaystore.WakeTails:
		if e.tails != nil {
			e.tails(w.ID)
		}
	}
}

// readPauses reads the pause set before anything is claimed (a replica started while a
// target is paused never publishes it), retrying with backoff while Redis is unreachable.
// It returns false when ctx ends first.
func (e *Egress) readPauses(ctx context.Context, r PauseReader) bool {
	err := backoff.Retry(ctx, backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second, Log: e.log,
		Failed: "reading the paused targets failed; retrying with backoff", Recovered: "paused targets read"},
		func(ctx context.Context) error {
			set, err := r.Pauses(ctx)
			if err != nil {
				return err
			}
			if changed, _ := e.delivery.pauses.set(set); changed {
				e.metrics.setPaused(set)
			}
			return err
		}, nil)
	return err == nil
}

// wakeups subscribes to the store's wake-ups, retrying with backoff while Redis is
// unreachable or slow (a bridge started into a Redis outage waits rather than exits). It
// returns false when ctx ends first.
func (e *Egress) wakeups(ctx context.Context) (*delaystore.Wakeups, bool) {
	var wakes *delaystore.Wakeups
	err := backoff.Retry(ctx, backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second, Log: e.log,
		Failed: "wake-up subscription failed; retrying with backoff", Recovered: "wake-up subscription recovered"},
		func(ctx context.Context) (err error) {
			wakes, err = e.store.Wakeups(ctx)
			return err
		}, nil)
	return wakes, err == nil
}
