package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/intake"
)

// reject sends msg to the dead-letter subject of its broker, with all its headers and
// x-delay-error, then acks it (with an error reply for a request). If the dead-letter
// publish cannot be done before ctx ends, msg is nacked instead.
func (in *Ingress) reject(ctx context.Context, src Source, msg *headers.Received, cause error) {
	text := intake.ErrorText(cause)
	dead := deadLetter(msg)
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
	msg.Ack(replyJSON(struct {
		Error string `json:"error"`
	}{text}))
	in.log.Debug("rejected", "id", logID(msg), "broker", src.Broker, "topic", src.Topic, "reason", intake.Reason(cause))
	in.metrics.Invalid(src.Broker, intake.Reason(cause))
}

// deadLetter is the watermill message of msg's dead letter, before x-delay-error: its id
// (a new one when it has none), payload, headers, and the reserved metadata that
// publishers read (the Kafka key and tombstone) with its source time.
func deadLetter(msg *headers.Received) *message.Message {
	id := msg.ID
	if id == "" {
		id = watermill.NewULID()
	}
	extra := map[string]string{}
	if msg.SourceTime != "" {
		extra[headers.MetaSourceTime] = msg.SourceTime
	}
	if msg.Key != nil {
		extra[headers.MetaKafkaKey] = string(msg.Key)
	}
	if msg.Tombstone {
		extra[headers.MetaKafkaTombstone] = "1"
	}
	if msg.Request {
		extra[headers.MetaRequest] = "1"
	}
	dead := message.NewMessage(id, msg.Payload)
	dead.Metadata = headers.ToMetadata(msg.Headers, extra)
	return dead
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
