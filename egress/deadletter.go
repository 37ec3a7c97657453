package egress

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/events"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// deadLetter publishes a message that was rejected by its target or ran out of attempts
// to the dead-letter subject of its source broker (for the HTTP source: of its target
// broker). x-delay-error is "<reason>: <error>" for a rejection, else "publish_failed: ...".
// A dead letter the subject refuses as too large is sent again without its payload, with
// x-delay-original-size. ctx bounds the dead-letter publish (the message's own context
// may have ended). When it fails, the message is retried (the caller), and this is logged
// at Error and counted as dead_letter_failed: it is never silently stuck.
func (d *delivery) deadLetter(ctx context.Context, o *outgoing) error {
	broker, _, _ := strings.Cut(o.claimed.Envelope.Source, ":")
	pub := d.publishers[broker]
	if pub == nil {
		broker = o.broker
		pub = d.publishers[broker]
	}
	if pub == nil {
		d.metrics.out(o.broker, "dead_letter_failed")
		d.log.Error("no publisher for the dead letter; the message stays in the store", "id", o.claimed.ID, "broker", broker)
		return fmt.Errorf("no publisher for dead letters of %s", o.claimed.ID)
	}
	reason, _ := rejected(o.err)
	if reason == "" {
		reason = contract.ReasonPublishFailed
	}
	dead := d.deadMessage(ctx, o, true)
	err := pub.Publish(d.cfg.DLQSubject, dead)
	if r, ok := rejected(err); ok && r == contract.ReasonTooLarge && len(o.out.Payload) > 0 {
		d.log.Warn("dead letter too large; dead-lettering it without its payload", "id", o.claimed.ID, "size", len(o.out.Payload))
		err = pub.Publish(d.cfg.DLQSubject, d.deadMessage(ctx, o, false))
	}
	if err != nil {
		d.metrics.out(o.broker, "dead_letter_failed")
		d.log.Error("dead-letter publish failed; the message stays in the store and is retried", "id", o.claimed.ID,
			"target", o.claimed.Envelope.Target, "reason", reason, "attempts", o.claimed.Attempts+1, "err", err)
		return fmt.Errorf("dead-letter %s: %w", o.claimed.ID, err)
	}
	d.metrics.deadLettered(o.broker, reason)
	if reason == contract.ReasonExpired {
		d.emit(events.Expired, o, 0, reason)
		d.log.Debug("dead-lettered: expired before it could be published", "id", o.claimed.ID, "target", o.claimed.Envelope.Target,
			"attempts", o.claimed.Attempts, "err", o.err)
		d.failures.failed(ctx, o.claimed.Envelope.Target, failExpired, 1, reason, o.err)
		return nil
	}
	d.log.Debug("dead-lettered: the target did not take it", "id", o.claimed.ID, "target", o.claimed.Envelope.Target,
		"reason", reason, "attempts", o.claimed.Attempts+1, "err", o.err)
	d.emit(events.DeadLettered, o, 0, reason)
	d.failures.failed(ctx, o.claimed.Envelope.Target, failDead, 1, reason, o.err)
	return nil
}

// deadMessage is the dead letter of o: its output headers, x-target and x-delay-error, and
// the payload (withPayload) or instead x-delay-original-size.
func (d *delivery) deadMessage(ctx context.Context, o *outgoing, withPayload bool) *message.Message {
	payload := o.out.Payload
	if !withPayload {
		payload = nil
	}
	dead := message.NewMessage(o.out.ID+":dlq", payload)
	dead.Metadata = headers.ToMetadata(o.out.Headers, kafkaMeta(o.out))
	dead.Metadata.Set(contract.HeaderTarget, o.claimed.Envelope.Target)
	if reason, ok := rejected(o.err); ok {
		dead.Metadata.Set(contract.HeaderError, fmt.Sprintf("%s: %v", reason, o.err))
	} else {
		dead.Metadata.Set(contract.HeaderError, fmt.Sprintf("%s: %d attempts, last: %v", contract.ReasonPublishFailed, o.claimed.Attempts+1, o.err))
	}
	if !withPayload {
		dead.Metadata.Set(contract.HeaderOriginalSize, strconv.Itoa(len(o.out.Payload)))
	}
	dead.SetContext(ctx)
	return dead
}
