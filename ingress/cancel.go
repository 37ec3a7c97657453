package ingress

import (
	"context"
	"errors"
	"fmt"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/intake"
)

// cancel removes the pending message named by msg's x-delay-id and acks msg. Found or not,
// the store remembers the cancel with msg's source time (contract.Published), so that a
// message of the id published before it but read after it (another partition or subject,
// a redelivery) is not parked. Counted as cancelled (found) or cancel_not_found.
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
	at := contract.Published(msg.SourceTime, in.now())
	var cancelled bool
	refused := ""
	err := in.retry(ctx, "cancel", func(opCtx context.Context) error {
		var err error
		cancelled, err = in.store.CancelAt(opCtx, id, at)
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
		ID        string `json:"id"`
		Cancelled bool   `json:"cancelled"`
	}{id, cancelled}))
	in.log.Debug("cancel", "id", id, "cancelled", cancelled, "published", at)
	if !cancelled {
		in.metrics.Count(src.Broker, "cancel_not_found", 1)
		return
	}
	in.metrics.Count(src.Broker, "cancelled", 1)
}

// errCancelWithoutID: a message on the cancel subject had no x-delay-id.
var errCancelWithoutID = fmt.Errorf("%w: cancel without %s", intake.ErrInvalidID, contract.HeaderID)
