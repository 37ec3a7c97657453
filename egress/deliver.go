package egress

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/failpoint"
)

// outgoing is one claimed message on its way to a broker.
type outgoing struct {
	claimed delaystore.Claimed
	broker  string
	topic   string
	msg     *message.Message
	err     error
	span    trace.Span
}

// settlement is what one target group (or one put-back) asks of the store.
type settlement struct {
	shard   int
	acks    []delaystore.Receipt
	retries []delaystore.RetryRequest
	n       int // messages it settles: given back to the shard's capacity
}

// dispatch splits a claimed batch of shard by target. Each target takes what its
// in-flight limit allows and is published in its own goroutine (runGroup), so no target
// waits for another; each group's settlement goes to the scheduler's next round trip as
// soon as its own Publish returned. The rest is put back unpublished, for the limiter's
// delay. fence is a moment before the claim: the lease runs from after it.
func (e *Egress) dispatch(ctx context.Context, s *scheduler, shard int, claimed []delaystore.Claimed, fence time.Time) {
	failpoint.Inject(failpoint.AfterClaim)
	e.metrics.claimed(len(claimed))
	groups := map[string][]delaystore.Claimed{}
	var order []string
	for _, c := range claimed {
		if _, ok := groups[c.Envelope.Target]; !ok {
			order = append(order, c.Envelope.Target)
		}
		groups[c.Envelope.Target] = append(groups[c.Envelope.Target], c)
	}
	var back []delaystore.RetryRequest
	for _, target := range order {
		g := groups[target]
		n, wait := e.limits.acquire(target, len(g))
		for _, c := range g[n:] {
			back = append(back, delaystore.RetryRequest{Receipt: c.Receipt, Backoff: wait, PutBack: true})
		}
		if n < len(g) {
			broker, _, _ := strings.Cut(target, ":")
			e.metrics.count(broker, "put_back", len(g)-n)
		}
		if n > 0 {
			s.active.Add(1)
			go func() {
				st := e.runGroup(ctx, target, g[:n], fence)
				st.shard = shard
				s.submit(st) // before the group stops counting as active: see scheduler.run
				s.active.Add(-1)
				s.poke()
			}()
		}
	}
	if len(back) > 0 {
		e.log.Debug("targets at their in-flight limit; messages put back", "shard", shard, "count", len(back))
		s.submit(&settlement{shard: shard, retries: back, n: len(back)})
	}
}

// runGroup publishes the messages of one target (one Publish call) and returns their
// settlement: acks for the confirmed ones and the dead-lettered ones, retries for the
// rest, put-backs for those over the target's BRIDGE_TARGET_RATE (admit), next
// occurrences for recurring firings that x-delay-misfire skips (misfires). It uses a
// context detached from ctx, bounded by DrainTimeout, so a group claimed before shutdown
// is finished; the messages' own context ends 4/5 of the lease after fence. The target's
// limiter slots are released as soon as Publish returns.
func (e *Egress) runGroup(ctx context.Context, target string, claimed []delaystore.Claimed, fence time.Time) *settlement {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.DrainTimeout)
	defer cancel()
	mctx := dctx
	if e.cfg.Lease > 0 {
		var mcancel context.CancelFunc
		mctx, mcancel = context.WithDeadline(dctx, fence.Add(e.cfg.Lease*4/5))
		defer mcancel()
	}
	claimedAt := e.clock.redisNow(e.now())
	n := len(claimed)
	claimed, skipped := e.misfires(claimed, claimedAt)
	claimed, wait := e.admit(dctx, target, claimed, claimedAt)
	group := make([]*outgoing, len(claimed))
	live := make([]*outgoing, 0, len(claimed))
	for i, c := range claimed {
		o := &outgoing{claimed: c}
		o.broker, o.topic, _ = strings.Cut(target, ":")
		o.msg = outputMessage(c)
		o.msg.SetContext(mctx)
		o.span = e.startSpan(o)
		group[i] = o
		// Past due + x-delay-expires: not published, dead-lettered as expired (outcomes).
		if o.err = expiredAt(c, claimedAt); o.err == nil {
			live = append(live, o)
		}
	}
	if len(live) > 0 {
		e.publish(live)
	}
	confirmedAt := e.clock.redisNow(e.now())
	published := 0
	for _, o := range group {
		if o.err == nil {
			published++
		}
	}
	e.limits.release(target, n, published > 0)
	failpoint.Inject(failpoint.AfterPublish)
	st := e.outcomes(dctx, group, confirmedAt)
	st.retries = append(append(st.retries, wait...), skipped...)
	st.n += len(wait) + len(skipped)
	return st
}

// admit is the BRIDGE_TARGET_RATE check of one target's group (rates.admit): the
// messages to publish now, and put-backs of those that wait for their slot (counted as
// rate_limited).
func (e *Egress) admit(ctx context.Context, target string, claimed []delaystore.Claimed, now int64) ([]delaystore.Claimed, []delaystore.RetryRequest) {
	ready, wait, err := e.rates.admit(ctx, target, claimed, now)
	if err != nil {
		e.log.Warn("could not ask Redis for publish slots; the messages wait and ask again", "target", target,
			"count", len(claimed), "err", err)
	}
	if len(wait) > 0 {
		broker, _, _ := strings.Cut(target, ":")
		e.metrics.count(broker, "rate_limited", len(wait))
	}
	return ready, wait
}

// outcomes ends the spans of a published group and decides each message's fate:
// confirmed -> ack (lateness observed at confirmedAt, the group's return); rejected, out
// of attempts, or expired (at the claim, or its retry would come after due + expires) ->
// dead letter, then ack; otherwise (or when the dead letter fails) retry. For a recurring
// message the ack is its next occurrence ([Egress.fired]).
func (e *Egress) outcomes(ctx context.Context, group []*outgoing, confirmedAt int64) *settlement {
	st := &settlement{n: len(group)}
	var firstErr error
	failed, published := 0, false
	for _, o := range group {
		if o.err != nil && !e.permanent(o) {
			// A retry that would come after due + x-delay-expires is not made.
			o.err = e.expiredBeforeRetry(o, confirmedAt)
		}
		if o.err != nil {
			o.span.SetStatus(codes.Error, o.err.Error())
		}
		o.span.End()
		switch {
		case o.err == nil:
			published = true
			e.fired(st, o)
			e.metrics.published(o.broker, confirmedAt-o.claimed.Due)
			e.log.Debug("published", "id", o.claimed.ID, "target", o.claimed.Envelope.Target, "lateness_ms", confirmedAt-o.claimed.Due)
		case e.permanent(o) && e.deadLetter(ctx, o) == nil:
			e.fired(st, o)
		default:
			backoff := e.backoff(o.claimed.Attempts + 1)
			st.retries = append(st.retries, delaystore.RetryRequest{Receipt: o.claimed.Receipt, Backoff: backoff})
			e.metrics.out(o.broker, "retried")
			e.log.Debug("publish failed; will retry", "id", o.claimed.ID, "target", o.claimed.Envelope.Target,
				"attempt", o.claimed.Attempts+1, "backoff", backoff, "err", o.err)
			failed++
			if firstErr == nil {
				firstErr = o.err
			}
		}
	}
	switch {
	case failed > 0:
		e.failures.failed(ctx, group[0].claimed.Envelope.Target, failRetried, failed, "", firstErr)
	case published:
		e.failures.published(ctx, group[0].claimed.Envelope.Target)
	}
	return st
}

// publish sends one group (same target) in one Publish call and records per-message
// outcomes in the group's entries.
func (e *Egress) publish(group []*outgoing) {
	first := group[0]
	pub := e.publishers[first.broker]
	if pub == nil {
		err := fmt.Errorf("broker %q of target %q is not configured", first.broker, first.claimed.Envelope.Target)
		for _, o := range group {
			o.err = err
		}
		return
	}
	msgs := make([]*message.Message, len(group))
	for i, o := range group {
		msgs[i] = o.msg
	}
	err := pub.Publish(first.topic, msgs...)
	if err == nil {
		return
	}
	var partial PartialFailure
	if errors.As(err, &partial) {
		failed := partial.FailedMessages()
		for _, o := range group {
			o.err = failed[o.msg.UUID]
		}
		return
	}
	for _, o := range group {
		o.err = err
	}
}

// permanent reports whether o's failure ends its attempts: the target rejected it for
// good, or it has had MaxAttempts.
func (e *Egress) permanent(o *outgoing) bool {
	if _, ok := rejected(o.err); ok {
		return true
	}
	return o.claimed.Attempts+1 >= e.cfg.MaxAttempts
}

// deadLetter publishes a message that was rejected by its target or ran out of attempts
// to the dead-letter subject of its source broker (for the HTTP source: of its target
// broker). x-delay-error is "<reason>: <error>" for a rejection, else "publish_failed: ...".
// A dead letter the subject refuses as too large is sent again without its payload, with
// x-delay-original-size. ctx bounds the dead-letter publish (the message's own context
// may have ended). When it fails, the message is retried (the caller), and this is logged
// at Error and counted as dead_letter_failed: it is never silently stuck.
func (e *Egress) deadLetter(ctx context.Context, o *outgoing) error {
	broker, _, _ := strings.Cut(o.claimed.Envelope.Source, ":")
	pub := e.publishers[broker]
	if pub == nil {
		broker = o.broker
		pub = e.publishers[broker]
	}
	if pub == nil {
		e.metrics.out(o.broker, "dead_letter_failed")
		e.log.Error("no publisher for the dead letter; the message stays in the store", "id", o.claimed.ID, "broker", broker)
		return fmt.Errorf("no publisher for dead letters of %s", o.claimed.ID)
	}
	reason, _ := rejected(o.err)
	if reason == "" {
		reason = contract.ReasonPublishFailed
	}
	dead := e.deadMessage(ctx, o, true)
	err := pub.Publish(e.cfg.DLQSubject, dead)
	if r, ok := rejected(err); ok && r == contract.ReasonTooLarge && len(o.msg.Payload) > 0 {
		e.log.Warn("dead letter too large; dead-lettering it without its payload", "id", o.claimed.ID, "size", len(o.msg.Payload))
		err = pub.Publish(e.cfg.DLQSubject, e.deadMessage(ctx, o, false))
	}
	if err != nil {
		e.metrics.out(o.broker, "dead_letter_failed")
		e.log.Error("dead-letter publish failed; the message stays in the store and is retried", "id", o.claimed.ID,
			"target", o.claimed.Envelope.Target, "reason", reason, "attempts", o.claimed.Attempts+1, "err", err)
		return fmt.Errorf("dead-letter %s: %w", o.claimed.ID, err)
	}
	if reason == contract.ReasonExpired {
		e.metrics.out(o.broker, "expired")
		e.log.Debug("dead-lettered: expired before it could be published", "id", o.claimed.ID, "target", o.claimed.Envelope.Target,
			"attempts", o.claimed.Attempts, "err", o.err)
		e.failures.failed(ctx, o.claimed.Envelope.Target, failExpired, 1, reason, o.err)
		return nil
	}
	e.metrics.out(o.broker, "dead_lettered")
	e.log.Debug("dead-lettered: the target did not take it", "id", o.claimed.ID, "target", o.claimed.Envelope.Target,
		"reason", reason, "attempts", o.claimed.Attempts+1, "err", o.err)
	e.failures.failed(ctx, o.claimed.Envelope.Target, failDead, 1, reason, o.err)
	return nil
}

// deadMessage is the dead letter of o: its output headers, x-target and x-delay-error, and
// the payload (withPayload) or instead x-delay-original-size.
func (e *Egress) deadMessage(ctx context.Context, o *outgoing, withPayload bool) *message.Message {
	payload := o.msg.Payload
	if !withPayload {
		payload = nil
	}
	dead := message.NewMessage(o.msg.UUID+":dlq", payload)
	for k, v := range o.msg.Metadata {
		dead.Metadata.Set(k, v)
	}
	dead.Metadata.Set(contract.HeaderTarget, o.claimed.Envelope.Target)
	if reason, ok := rejected(o.err); ok {
		dead.Metadata.Set(contract.HeaderError, fmt.Sprintf("%s: %v", reason, o.err))
	} else {
		dead.Metadata.Set(contract.HeaderError, fmt.Sprintf("%s: %d attempts, last: %v", contract.ReasonPublishFailed, o.claimed.Attempts+1, o.err))
	}
	if !withPayload {
		dead.Metadata.Set(contract.HeaderOriginalSize, strconv.Itoa(len(o.msg.Payload)))
	}
	dead.SetContext(ctx)
	return dead
}

// expiredBeforeRetry is o's error, or the expiry that replaces it when o's retry would
// come after its due time + x-delay-expires.
func (e *Egress) expiredBeforeRetry(o *outgoing, now int64) error {
	if exp := expiredBeforeRetry(o.claimed, now, e.backoff(o.claimed.Attempts+1), o.err); exp != nil {
		return exp
	}
	return o.err
}

func (e *Egress) backoff(attempt int) time.Duration {
	return backoff.Exp(e.cfg.BackoffMin, e.cfg.BackoffMax, attempt)
}
