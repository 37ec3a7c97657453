package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/failpoint"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// delivery publishes claimed messages to their targets and decides what becomes of each
// (ack, retry, dead letter, next occurrence, put-back). It owns what publishing needs:
// the publishers, the per-target in-flight limits and rates, the failure log, the
// metrics of outcomes, and the clocks (the local one, and the estimate of the Redis one
// that the scheduler keeps up to date). Its one entry is submit; it knows nothing of
// shards, their scheduling, or the store's claim calls. Safe for concurrent use.
type delivery struct {
	cfg        Config
	publishers map[string]message.Publisher
	log        *slog.Logger
	metrics    *Metrics
	clock      *redisClock
	now        func() time.Time
	limits     *limiter
	rates      *rates
	failures   *failureLog
	pauses     *pauses // the paused targets (pause.go)
}

// newDelivery returns the delivery of cfg (defaults applied) through publishers.
// reserver hands out the slots of the target rates; it may be nil when no rate is set.
func newDelivery(cfg Config, publishers map[string]message.Publisher, reserver Reserver, clock *redisClock,
	log *slog.Logger, metrics *Metrics) (*delivery, error) {
	rules, err := ParseRateRules(cfg.TargetRate)
	if err != nil {
		return nil, fmt.Errorf("egress: target rates (Config.TargetRate): %w", err)
	}
	if len(rules) > 0 && reserver == nil {
		return nil, errors.New("egress: target rates (Config.TargetRate) need a store that hands out slots (Reserver)")
	}
	return &delivery{cfg: cfg, publishers: publishers, log: log, metrics: metrics, clock: clock, now: cfg.Now,
		limits:   newLimiter(cfg.TargetInflight, cfg.Now),
		rates:    &rates{rules: rules, store: reserver, held: map[heldKey]heldSlot{}},
		pauses:   newPauses(),
		failures: newFailureLog(log, cfg.Now, cfg.FailureLogInterval)}, nil
}

// batch is the messages of one shard's claim, handed by the scheduler to delivery.
type batch struct {
	shard   int
	claimed []delaystore.Claimed
	// corrupt are the claim's entries that do not decode: dead-lettered, never published
	// (deadLetterCorrupt). The scheduler hands them at once, never to the holder.
	corrupt []delaystore.Corrupt
	fence   time.Time // a moment before the claim: the lease runs from after it
}

// outgoing is one claimed message on its way to a broker.
type outgoing struct {
	claimed delaystore.Claimed
	broker  string
	topic   string
	out     headers.Message // outputHeaders: what is published
	err     error
	span    trace.Span
}

// message is o's watermill message (for a publisher without the fast path, and the
// dead letter), with context ctx.
func (o *outgoing) message(ctx context.Context) *message.Message {
	msg := toMessage(o.out)
	msg.SetContext(ctx)
	return msg
}

// envelopePublisher is the fast path of a publisher (the NATS and Kafka adapters implement it): it
// publishes messages given as header lists, without building watermill messages and their
// Metadata maps only for the publisher to turn them back into header lists. It must put
// the same messages on the wire as Publish does with the watermill message of each (see
// outgoing.message), and report failures the same way (a PartialFailure keyed by
// headers.Message.ID). ctx is the context of every message; the call bounds itself as
// Publish does. Safe for concurrent use. A Kafka target's messages carry the record key and
// tombstone mark in headers.Message Key and Tombstone (a watermill message: reserved metadata).
type envelopePublisher interface {
	PublishList(ctx context.Context, topic string, msgs []headers.Message) error
}

// settlement is what one target group (or one put-back) asks of the store.
type settlement struct {
	shard   int
	acks    []delaystore.Receipt
	retries []delaystore.RetryRequest
	n       int // messages it settles: given back to the shard's capacity
	// release: an ack of a message with an ordering key, whose ack releases the key's
	// next message: the scheduler does not hold it (ackHold).
	release bool
	// fence is the fence of the claim its messages came from (batch.fence): their lease
	// runs out Lease after it at the earliest. The scheduler holds no ack past half of it.
	fence time.Time
}

// submit splits a claimed batch by target and returns at once. Each target takes what
// its in-flight limit allows and is published in its own goroutine (runGroup), so no
// target waits for another; each group's settlement goes to settle as soon as its own
// Publish returned. The rest is put back unpublished, for the limiter's delay, through
// settle before submit returns. The settlements of a batch together settle each of its
// messages once (their n add up to len(b.claimed) + len(b.corrupt)); the corrupt entries
// are dead-lettered in a goroutine of their own (deadLetterCorrupt). Safe for concurrent
// use.
func (d *delivery) submit(ctx context.Context, b batch, settle func(*settlement)) {
	if len(b.corrupt) > 0 {
		go func() { settle(d.deadLetterCorrupt(ctx, b)) }()
	}
	groups := map[string][]delaystore.Claimed{}
	var order []string
	for _, c := range b.claimed {
		if _, ok := groups[c.Envelope.Target]; !ok {
			order = append(order, c.Envelope.Target)
		}
		groups[c.Envelope.Target] = append(groups[c.Envelope.Target], c)
	}
	var back []delaystore.RetryRequest
	for _, target := range order {
		g := groups[target]
		if d.pauses.of(target).paused {
			var held []delaystore.RetryRequest
			g, held = pauseSplit(g, d.clock.redisNow(d.now()))
			back = append(back, held...)
			broker, _, _ := strings.Cut(target, ":")
			d.metrics.count(broker, "paused", len(held))
			if len(g) == 0 {
				continue
			}
		}
		n, wait := d.limits.acquire(target, len(g))
		back = append(back, d.overLimit(target, g[n:], wait)...)
		if n > 0 {
			go func() {
				st := d.runGroup(ctx, target, g[:n], b.fence)
				st.shard, st.fence = b.shard, b.fence
				settle(st)
			}()
		}
	}
	if len(back) > 0 {
		d.log.Debug("targets paused or at their in-flight limit; messages put back", "shard", b.shard, "count", len(back))
		settle(&settlement{shard: b.shard, retries: back, n: len(back), fence: b.fence})
	}
}

// overLimit is the put-backs, for wait, of the messages of target over its in-flight
// limit (counted as put_back).
func (d *delivery) overLimit(target string, over []delaystore.Claimed, wait time.Duration) []delaystore.RetryRequest {
	if len(over) == 0 {
		return nil
	}
	back := make([]delaystore.RetryRequest, len(over))
	for i, c := range over {
		back[i] = delaystore.RetryRequest{Receipt: c.Receipt, Backoff: wait, PutBack: true}
	}
	broker, _, _ := strings.Cut(target, ":")
	d.metrics.count(broker, "put_back", len(over))
	return back
}

// runGroup publishes the messages of one target (one Publish call) and returns their
// settlement: acks for the confirmed ones and the dead-lettered ones, retries for the
// rest, put-backs for those over the target's BRIDGE_TARGET_RATE (admit), next
// occurrences for recurring firings that x-delay-misfire skips (misfires). It uses a
// context detached from ctx, bounded by DrainTimeout, so a group claimed before shutdown
// is finished; the messages' own context ends 4/5 of the lease after fence. The target's
// limiter slots are released as soon as Publish returns.
func (d *delivery) runGroup(ctx context.Context, target string, claimed []delaystore.Claimed, fence time.Time) *settlement {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.DrainTimeout)
	defer cancel()
	mctx := dctx
	if d.cfg.Lease > 0 {
		var mcancel context.CancelFunc
		mctx, mcancel = context.WithDeadline(dctx, fence.Add(d.cfg.Lease*4/5))
		defer mcancel()
	}
	claimedAt := d.clock.redisNow(d.now())
	n := len(claimed)
	claimed, skipped := d.misfires(claimed, claimedAt)
	claimed, wait := d.admit(dctx, target, claimed, claimedAt)
	group := make([]*outgoing, len(claimed))
	live := make([]*outgoing, 0, len(claimed))
	slab := make([]outgoing, len(claimed)) // one allocation for the group's entries
	for i, c := range claimed {
		o := &slab[i]
		o.claimed = c
		o.broker, o.topic, _ = strings.Cut(target, ":")
		o.out = outputHeaders(c)
		o.span = d.startSpan(o)
		group[i] = o
		// Past due + x-delay-expires: not published, dead-lettered as expired (outcomes).
		if o.err = expiredAt(c, claimedAt); o.err == nil {
			live = append(live, o)
		}
	}
	if len(live) > 0 {
		d.publish(mctx, live)
	}
	confirmedAt := d.clock.redisNow(d.now())
	published := 0
	for _, o := range group {
		if o.err == nil {
			published++
		}
	}
	d.limits.release(target, n, published > 0)
	failpoint.Inject(failpoint.AfterPublish)
	st := d.outcomes(dctx, group, confirmedAt)
	st.retries = append(append(st.retries, wait...), skipped...)
	st.n += len(wait) + len(skipped)
	return st
}

// admit is the BRIDGE_TARGET_RATE check of one target's group (rates.admit): the
// messages to publish now, and put-backs of those that wait for their slot (counted as
// rate_limited).
func (d *delivery) admit(ctx context.Context, target string, claimed []delaystore.Claimed, now int64) ([]delaystore.Claimed, []delaystore.RetryRequest) {
	ready, wait, err := d.rates.admit(ctx, target, claimed, now)
	if err != nil {
		d.log.Warn("could not ask Redis for publish slots; the messages wait and ask again", "target", target,
			"count", len(claimed), "err", err)
	}
	if len(wait) > 0 {
		broker, _, _ := strings.Cut(target, ":")
		d.metrics.count(broker, "rate_limited", len(wait))
	}
	return ready, wait
}

// publish sends one group (same target), whose messages have the context ctx, in one
// Publish (or PublishList: envelopePublisher) call and records per-message outcomes in the
// group's entries.
func (d *delivery) publish(ctx context.Context, group []*outgoing) {
	first := group[0]
	pub := d.publishers[first.broker]
	if pub == nil {
		err := fmt.Errorf("broker %q of target %q is not configured", first.broker, first.claimed.Envelope.Target)
		for _, o := range group {
			o.err = err
		}
		return
	}
	if err := ctx.Err(); err != nil {
		// Past the claim's fence (4/5 of the lease): the entry may be claimed again or
		// cancelled by now (cancel.lua deletes an entry whose lease ran out), so it is
		// never published from here.
		for _, o := range group {
			o.err = fmt.Errorf("publish after the claim's fence: %w", err)
		}
		return
	}
	var err error
	if ep, ok := pub.(envelopePublisher); ok {
		msgs := make([]headers.Message, len(group))
		for i, o := range group {
			msgs[i] = o.out
		}
		err = ep.PublishList(ctx, first.topic, msgs)
	} else {
		msgs := make([]*message.Message, len(group))
		for i, o := range group {
			msgs[i] = o.message(ctx)
		}
		err = pub.Publish(first.topic, msgs...)
	}
	if err == nil {
		return
	}
	var partial PartialFailure
	if errors.As(err, &partial) {
		failed := partial.FailedMessages()
		for _, o := range group {
			o.err = failed[o.out.ID]
		}
		return
	}
	for _, o := range group {
		o.err = err
	}
}
