package ingress

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// ReceivedSubscriber is the fast path of a Source's Subscriber (the NATS adapter implements
// it for JetStream topics, the Kafka adapter for every topic): its messages come as headers.Received, without a watermill
// message, a Metadata map, a context or a settling goroutine per message. Ingress uses it
// for Delayed sources whose Subscriber has it; every other source, and a topic for which
// it answers ok false, is read through Subscribe (each watermill message made into a
// Received by [fromWatermill]).
type ReceivedSubscriber interface {
	// SubscribeReceived is Subscribe handing out headers.Received: it blocks until the
	// subscription is in place and returns the channel of its messages, closed when ctx
	// ends. The receiver settles each message once (Received.Ack or Nack), also after ctx
	// ended. ok false (and nil error): this topic has no fast path and nothing was
	// subscribed; use Subscribe.
	SubscribeReceived(ctx context.Context, topic string) (ch <-chan *headers.Received, ok bool, err error)
}

// subscribe subscribes to src, through its ReceivedSubscriber for a Delayed source when it
// has one, and returns the function that reads its next message (false once the channel
// is closed).
func subscribe(ctx context.Context, src Source) (func() (*headers.Received, bool), error) {
	if fs, ok := src.Subscriber.(ReceivedSubscriber); ok && src.Kind == Delayed {
		ch, ok, err := fs.SubscribeReceived(ctx, src.Topic)
		if err != nil {
			return nil, err
		}
		if ok {
			return func() (*headers.Received, bool) { r, ok := <-ch; return r, ok }, nil
		}
	}
	ch, err := src.Subscriber.Subscribe(ctx, src.Topic)
	if err != nil {
		return nil, err
	}
	return func() (*headers.Received, bool) {
		wm, ok := <-ch
		if !ok {
			return nil, false
		}
		return fromWatermill(wm), true
	}, nil
}

// wmReceived is a watermill message as a headers.Received, settled through it.
type wmReceived struct {
	headers.Received
	wm *message.Message
}

// fromWatermill makes wm into a headers.Received: its header list (headers.FromMetadata:
// a producer's header with the reserved prefix included, which intake refuses), the
// reserved metadata keys as fields. Its Ack sets the reply as
// headers.MetaReply (when not "") and acks wm; Nack nacks wm.
func fromWatermill(wm *message.Message) *headers.Received {
	md := wm.Metadata
	r := &wmReceived{wm: wm}
	r.Received = headers.Received{
		Message: headers.Message{ID: wm.UUID, Headers: headers.FromMetadata(md), Payload: wm.Payload,
			Tombstone: md[headers.MetaKafkaTombstone] != ""},
		SourceID:   md[headers.MetaSourceID],
		SourceTime: md[headers.MetaSourceTime],
		Request:    md[headers.MetaRequest] == "1",
		Settle:     r,
	}
	if k, ok := md[headers.MetaKafkaKey]; ok {
		r.Key = []byte(k)
	}
	return &r.Received
}

func (r *wmReceived) Ack(reply string) {
	if reply != "" {
		r.wm.Metadata.Set(headers.MetaReply, reply)
	}
	r.wm.Ack()
}

func (r *wmReceived) Nack() { r.wm.Nack() }
