package egress

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/events"
)

// outcomes ends the spans of a published group and decides each message's fate:
// confirmed -> ack (lateness observed at confirmedAt, the group's return); rejected, out
// of attempts, or expired (at the claim, or its retry would come after due + expires) ->
// dead letter, then ack; otherwise (or when the dead letter fails) retry. For a recurring
// message the ack is its next occurrence ([delivery.fired]).
func (d *delivery) outcomes(ctx context.Context, group []*outgoing, confirmedAt int64) *settlement {
	st := &settlement{n: len(group), acks: make([]delaystore.Receipt, 0, len(group))}
	var firstErr error
	failed, published := 0, 0
	debug := d.log.Enabled(ctx, slog.LevelDebug) // no boxed arguments per message otherwise
	for _, o := range group {
		if o.err != nil && !d.permanent(o) {
			// A retry that would come after due + x-delay-expires is not made.
			o.err = d.expiredBeforeRetry(o, confirmedAt)
		}
		if o.span != nil {
			if o.err != nil {
				o.span.SetStatus(codes.Error, o.err.Error())
			}
			o.span.End()
		}
		switch {
		case o.err == nil:
			published++
			d.fired(st, o, confirmedAt)
			d.metrics.observeLateness(d.sinceResume(o.claimed), confirmedAt)
			d.emit(events.Delivered, o, confirmedAt, "")
			if debug {
				d.log.Debug("published", "id", o.claimed.ID, "target", o.claimed.Envelope.Target, "lateness_ms", lateness(o.claimed, confirmedAt))
			}
		case d.permanent(o) && d.deadLetter(ctx, o) == nil:
			d.fired(st, o, confirmedAt)
		default:
			backoff := d.backoff(o.claimed.Attempts + 1)
			st.retries = append(st.retries, delaystore.RetryRequest{Receipt: o.claimed.Receipt, Backoff: backoff})
			d.metrics.out(o.broker, "retried")
			d.log.Debug("publish failed; will retry", "id", o.claimed.ID, "target", o.claimed.Envelope.Target,
				"attempt", o.claimed.Attempts+1, "backoff", backoff, "err", o.err)
			failed++
			if firstErr == nil {
				firstErr = o.err
			}
		}
	}
	if published > 0 {
		d.metrics.count(group[0].broker, "published", published) // one group: one target, one broker
	}
	switch {
	case failed > 0:
		d.failures.failed(ctx, group[0].claimed.Envelope.Target, failRetried, failed, "", firstErr)
	case published > 0:
		d.failures.published(ctx, group[0].claimed.Envelope.Target)
	}
	return st
}

// permanent reports whether o's failure ends its attempts: the target rejected it for
// good, or it has had MaxAttempts.
func (d *delivery) permanent(o *outgoing) bool {
	if _, ok := rejected(o.err); ok {
		return true
	}
	return o.claimed.Attempts+1 >= d.cfg.MaxAttempts
}

// expiredBeforeRetry is o's error, or the expiry that replaces it when o's retry would
// come after its due time + x-delay-expires.
func (d *delivery) expiredBeforeRetry(o *outgoing, now int64) error {
	if exp := expiredBeforeRetry(o.claimed, now, d.backoff(o.claimed.Attempts+1), o.err); exp != nil {
		return exp
	}
	return o.err
}

func (d *delivery) backoff(attempt int) time.Duration {
	return backoff.Exp(d.cfg.BackoffMin, d.cfg.BackoffMax, attempt)
}

// emit tells cfg.Events (when set) that o ended as kind at (unix ms; 0: now), without
// waiting.
func (d *delivery) emit(kind string, o *outgoing, at int64, reason string) {
	if d.cfg.Events == nil {
		return
	}
	c := o.claimed
	d.cfg.Events.Emit(events.Event{Type: kind, At: at, ID: c.ID, Target: c.Envelope.Target, Due: c.Due,
		Attempts: c.Attempts + 1, Reason: reason})
}
