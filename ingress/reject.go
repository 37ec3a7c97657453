package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/intake"
)

// reject sends msg to the dead-letter subject of its broker, with all its headers and
// x-delay-error, then acks it (with an error reply for a request). If the dead-letter
// publish cannot be done before ctx ends, msg is nacked instead.
func (in *Ingress) reject(ctx context.Context, src Source, msg *message.Message, cause error) {
	text := intake.ErrorText(cause)
	dead := message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		if k != headers.MetaReply && k != headers.MetaSourceID {
			dead.Metadata.Set(k, v)
		}
	}
	if src.Broker == intake.BrokerNATS {
		dead.Metadata = disarmNATSHeaders(dead.Metadata)
	}
	dead.Metadata.Set(contract.HeaderError, text)
	err := in.retry(ctx, "dead-letter", func(opCtx context.Context) error {
		dead.SetContext(opCtx)
		err := in.dlq[src.Broker].Publish(in.cfg.DLQSubject, dead)
		if tooLarge(err) && len(dead.Payload) > 0 {
			// The dead letter (the message plus x-delay-error) is more than the broker
			// takes: send it without its payload rather than retry it forever.
			in.log.Warn("dead letter too large; dead-lettering it without its payload", "id", logID(msg), "size", len(dead.Payload))
			dead = withoutPayload(dead)
			dead.SetContext(opCtx)
			err = in.dlq[src.Broker].Publish(in.cfg.DLQSubject, dead)
		}
		return err
	})
	if err != nil {
		msg.Nack()
		in.metrics.Count(src.Broker, "nacked", 1)
		return
	}
	msg.Metadata.Set(headers.MetaReply, replyJSON(struct {
		Error string `json:"error"`
	}{text}))
	msg.Ack()
	in.log.Debug("rejected", "id", logID(msg), "broker", src.Broker, "topic", src.Topic, "reason", intake.Reason(cause))
	in.metrics.Invalid(src.Broker, intake.Reason(cause))
}

// tooLarge reports whether err is (or wraps) a broker's permanent refusal of a message
// as too large (an error with RejectReason() "too_large", as the adapters make).
func tooLarge(err error) bool {
	var r interface{ RejectReason() string }
	return errors.As(err, &r) && r.RejectReason() == "too_large"
}

// withoutPayload is a copy of dead with an empty payload and contract.HeaderOriginalSize.
func withoutPayload(dead *message.Message) *message.Message {
	out := message.NewMessage(dead.UUID, nil)
	for k, v := range dead.Metadata {
		out.Metadata.Set(k, v)
	}
	list := headers.FromMetadata(out.Metadata)
	list.Add(contract.HeaderOriginalSize, strconv.Itoa(len(dead.Payload)))
	extra := map[string]string{}
	for k, v := range out.Metadata {
		if headers.IsReserved(k) && k != headers.MetaHeaders {
			extra[k] = v
		}
	}
	out.Metadata = headers.ToMetadata(list, extra)
	return out
}

// replyJSON encodes a reply body without HTML escaping (error texts quote subjects such
// as orders.> verbatim). The reply structs always encode.
func replyJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}
