package ingress

import (
	"context"
	"errors"
	"fmt"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// cancel removes the pending message named by msg's x-delay-id and acks msg. Found or not,
// the store remembers the cancel with msg's source time (contract.Published), so that a
// message of the id published before it but read after it (another partition or subject,
// a redelivery) is not parked. A message in delivery is not stopped (delaystore.ErrInDelivery):
// the reply says "cancelled": false, "in_delivery": true (and "stopped": true for a recurring
// message, whose later firings are cancelled). Counted as cancelled (found), cancel_not_found
// or cancel_in_delivery.
func (in *Ingress) cancel(ctx context.Context, src Source, msg *headers.Received) {
	ids := msg.Headers.Values(contract.HeaderID)
	if len(ids) != 1 {
		err := errCancelWithoutID
		if len(ids) > 1 {
			err = fmt.Errorf("%w: %s given %d times", intake.ErrInvalidID, contract.HeaderID, len(ids))
		}
		in.reject(ctx, src, msg, err)
		return
	}
	id := ids[0]
	key, err := intake.ParseOrderingKey(msg.Headers, false)
	if err != nil {
		in.reject(ctx, src, msg, err)
		return
	}
	at := contract.Published(msg.SourceTime, in.now())
	var cancelled bool
	var busy *delaystore.InDeliveryError
	refused := ""
	err = in.retry(ctx, "cancel", func(opCtx context.Context) error {
		var err error
		cancelled, err = in.store.CancelKeyAt(opCtx, id, key, at)
		if errors.As(err, &busy) {
			return nil // answered below: too late to stop it
		}
		if errors.Is(err, delaystore.ErrNotReplicated) && msg.Request {
			refused = notReplicatedReply(err)
			return nil // answered with the error below; the sender retries
		}
		return err
	})
	if err == nil && refused != "" {
		msg.Ack(refused)
		in.metrics.Count(src.Broker, "nacked", 1)
		return
	}
	if err != nil {
		msg.Nack()
		in.metrics.Count(src.Broker, "nacked", 1)
		return
	}
	msg.Ack(replyJSON(struct {
		ID         string `json:"id"`
		Cancelled  bool   `json:"cancelled"`
		InDelivery bool   `json:"in_delivery,omitempty"`
		Stopped    bool   `json:"stopped,omitempty"`
	}{id, cancelled, busy != nil, busy != nil && busy.Stopped}))
	in.log.Debug("cancel", "id", id, "cancelled", cancelled, "in_delivery", busy != nil, "published", at)
	if busy != nil {
		in.metrics.Count(src.Broker, "cancel_in_delivery", 1)
		return
	}
	if !cancelled {
		in.metrics.Count(src.Broker, "cancel_not_found", 1)
		return
	}
	in.metrics.Count(src.Broker, "cancelled", 1)
}

// errCancelWithoutID: a message on the cancel subject had no x-delay-id.
var errCancelWithoutID = fmt.Errorf("%w: cancel without %s", intake.ErrInvalidID, contract.HeaderID)
