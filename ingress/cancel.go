package ingress

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/intake"
)

// cancel removes the pending message named by msg's x-delay-id and acks msg.
func (in *Ingress) cancel(ctx context.Context, src Source, msg *message.Message) {
	ids := headers.FromMetadata(msg.Metadata).Values(contract.HeaderID)
	if len(ids) != 1 {
		err := errCancelWithoutID
		if len(ids) > 1 {
			err = fmt.Errorf("%w: %s given %d times", intake.ErrInvalidID, contract.HeaderID, len(ids))
		}
		in.reject(ctx, src, msg, err)
		return
	}
	id := ids[0]
	var cancelled bool
	refused := false
	err := in.retry(ctx, "cancel", func(opCtx context.Context) error {
		var err error
		cancelled, err = in.store.Cancel(opCtx, id)
		if errors.Is(err, delaystore.ErrNotReplicated) && msg.Metadata.Get(headers.MetaRequest) == "1" {
			msg.Metadata.Set(headers.MetaReply, notReplicatedReply(err))
			refused = true
			return nil // answered with the error below; the sender retries
		}
		return err
	})
	if err == nil && refused {
		msg.Ack()
		in.metrics.Count(src.Broker, "nacked", 1)
		return
	}
	if err != nil {
		msg.Nack()
		in.metrics.Count(src.Broker, "nacked", 1)
		return
	}
	msg.Metadata.Set(headers.MetaReply, replyJSON(struct {
		ID        string `json:"id"`
		Cancelled bool   `json:"cancelled"`
	}{id, cancelled}))
	msg.Ack()
	in.log.Debug("cancel", "id", id, "cancelled", cancelled)
	in.metrics.Count(src.Broker, "cancelled", 1)
}

// errCancelWithoutID: a message on the cancel subject had no x-delay-id.
var errCancelWithoutID = fmt.Errorf("%w: cancel without %s", intake.ErrInvalidID, contract.HeaderID)
