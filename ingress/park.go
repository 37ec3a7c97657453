package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/failpoint"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// park parks one batch and then acks its messages, or nacks them all when the store
// stays unavailable until ctx ends. A relative delay loses the time its message waited
// in ingress (retries included), so that the due time counts from the moment the bridge
// received it. When only some shards failed (one refused for memory, one master's
// replicas behind), the messages of the others are acked at once and only the rest is
// retried: a message acked late could be delivered meanwhile and then, parked again by
// the retry after its tombstone expired, delivered twice. When Redis replicas do not
// confirm the write (delaystore.ErrNotReplicated), the core requests of the batch are
// answered with an error at once (their senders wait, and their source cannot
// redeliver) and the rest is retried. attempt is called before every store call (retry:
// not the first), returned after each with the messages still to park (none on success).
func (in *Ingress) park(ctx context.Context, src Source, batch []prepared, attempt func(retry bool), returned func(rest []prepared)) {
	first := true
	err := in.retry(ctx, "park", func(opCtx context.Context) error {
		attempt(!first)
		first = false
		// At every attempt: a park retried while Redis was unreachable keeps the due time
		// counted from receipt, rather than from the attempt that succeeded.
		now := in.now()
		reqs := make([]delaystore.ParkRequest, len(batch))
		for i, p := range batch {
			reqs[i] = p.req
			if !p.req.Absolute {
				reqs[i].Delay = contract.Remaining(p.req.Delay, p.at, now)
			}
		}
		parked, err := in.store.Park(opCtx, reqs)
		var over []prepared
		batch, over = in.ackParked(src, batch, reqs, parked)
		in.rejectOverQuota(ctx, src, over)
		if err == nil && len(batch) > 0 {
			err = fmt.Errorf("park: %d of %d messages without a result", len(batch), len(reqs))
		}
		if len(batch) > 0 && errors.Is(err, delaystore.ErrNotReplicated) {
			batch = in.refuseRequests(src, batch, err)
		}
		returned(batch)
		if len(batch) == 0 {
			return nil
		}
		if len(batch) < len(reqs) {
			return fmt.Errorf("%w: %w", errPartlyParked, err) // the next try comes at RetryMin
		}
		return err
	})
	if err != nil {
		for _, p := range batch {
			endSpan(p.span, "not parked")
			p.msg.Nack()
		}
		in.metrics.Count(src.Broker, "nacked", len(batch))
	}
}

// ackParked acks the messages of batch whose park succeeded (parked[i].ID set; reqs[i]
// is batch[i]'s request) and returns the others, in order, and apart those that the
// store refused for their quota (Parked.OverQuota: not acked; the caller dead-letters
// them). A message whose source id had a live tombstone (Parked.Delivered) is acked and
// counted as already delivered; one that a remembered cancel covers (Parked.Cancelled)
// as cancelled_on_arrival.
func (in *Ingress) ackParked(src Source, batch []prepared, reqs []delaystore.ParkRequest, parked []delaystore.Parked) (rest, over []prepared) {
	if len(parked) != len(batch) {
		return batch, nil // nothing was parked (the call was refused before any shard ran)
	}
	rest = batch[:0:0]
	acked, delivered, cancelled := 0, 0, 0
	debug := in.log.Enabled(context.Background(), slog.LevelDebug) // no boxed arguments per message otherwise
	for i, p := range batch {
		r := parked[i]
		if r.ID == "" {
			rest = append(rest, p)
			continue
		}
		if r.OverQuota {
			over = append(over, p)
			continue
		}
		if acked == 0 {
			failpoint.Inject(failpoint.AfterPark)
		}
		acked++
		reply := ""
		if p.msg.Request { // a core request: the ack sends this reply
			reply = replyJSON(struct {
				ID        string `json:"id"`
				Due       int64  `json:"due"`
				Cancelled bool   `json:"cancelled,omitempty"`
			}{r.ID, r.Due, r.Cancelled})
		}
		p.msg.Ack(reply)
		endSpan(p.span, "")
		if r.Delivered {
			// A redelivery of a source message that was delivered already (its source ack
			// was lost): acked, not parked again.
			delivered++
			if !debug {
				continue
			}
			in.log.Debug("already delivered", "id", r.ID, "source_id", reqs[i].Envelope.SourceID)
			continue
		}
		if r.Cancelled {
			// Published before a cancel of its id that was read first: acked, not parked.
			cancelled++
			if !debug {
				continue
			}
			in.log.Debug("cancelled on arrival", "id", r.ID, "published", reqs[i].Published)
			continue
		}
		if debug {
			in.log.Debug("parked", "id", r.ID, "due", r.Due, "target", reqs[i].Envelope.Target, "existed", r.Existed)
		}
	}
	in.metrics.Count(src.Broker, "parked", acked-delivered-cancelled)
	in.metrics.Count(src.Broker, "already_delivered", delivered)
	in.metrics.Count(src.Broker, "cancelled_on_arrival", cancelled)
	return rest, over
}

// rejectOverQuota dead-letters the messages the store refused for their target's
// BRIDGE_TARGET_QUOTA (reason quota_exceeded) and acks each source only after its dead
// letter was published (reject: nacked when that cannot be done before ctx ends, so the
// source redelivers it and the quota is asked again). Blocks while it publishes.
func (in *Ingress) rejectOverQuota(ctx context.Context, src Source, over []prepared) {
	for _, p := range over {
		endSpan(p.span, "quota exceeded")
		in.reject(ctx, src, p.msg, fmt.Errorf("%w: target %s is at its BRIDGE_TARGET_QUOTA limit", intake.ErrQuotaExceeded, p.req.Envelope.Target))
	}
}

// refuseRequests answers the core requests of batch (headers.Received.Request) with
// {"error": "not_replicated: ..."} and returns the other messages. A refused request may
// still stand on the Redis master: its sender retries (with x-delay-id, idempotently).
func (in *Ingress) refuseRequests(src Source, batch []prepared, cause error) []prepared {
	keep := batch[:0:0]
	for _, p := range batch {
		if !p.msg.Request {
			keep = append(keep, p)
			continue
		}
		p.msg.Ack(notReplicatedReply(cause)) // a core request: the ack sends the reply
		endSpan(p.span, "not replicated")
		in.metrics.Count(src.Broker, "nacked", 1)
	}
	return keep
}

// notReplicatedReply is the error reply to a core request whose write Redis replicas did
// not confirm.
func notReplicatedReply(cause error) string {
	return replyJSON(struct {
		Error string `json:"error"`
	}{contract.ReasonNotReplicated + ": " + cause.Error() + "; retry the request"})
}

// errPartlyParked wraps the error of a park attempt that parked part of its batch: the
// retry of the rest waits RetryMin again rather than longer each time (a full Redis takes
// pieces as deliveries free memory; docs/design.md "Redis data layout").
var errPartlyParked = errors.New("part of the batch parked")

// opTimeout bounds one store call or dead-letter publish.
const opTimeout = 10 * time.Second

// retry calls op until it succeeds or ctx ends, with capped exponential backoff; the
// first failure of a streak is logged at Warn, recovery at Info. op gets a context that
// is not cancelled with ctx (bounded by opTimeout), so a batch read before shutdown is
// still parked and acked during the drain.
func (in *Ingress) retry(ctx context.Context, what string, op func(context.Context) error) error {
	err := backoff.Retry(ctx, backoff.Policy{Min: in.cfg.RetryMin, Max: in.cfg.RetryMax, Log: in.log,
		Failed: what + " failed; retrying, sources are not acked meanwhile", Recovered: what + " recovered",
		Progressed: func(err error) bool { return errors.Is(err, errPartlyParked) }},
		func(ctx context.Context) error {
			opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
			defer cancel()
			return op(opCtx)
		}, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// endSpan ends span (nil: none) with an error status of msg, when msg is not empty.
func endSpan(span trace.Span, msg string) {
	if span == nil {
		return
	}
	if msg != "" {
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}
