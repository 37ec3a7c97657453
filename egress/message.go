package egress

import (
	"context"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/tracing"
)

// startSpan starts the publish span of o: a child of the message's traceparent, linked
// to the ingress span stored with it (tracing.IngressSpanKey); nil without a tracer.
func (d *delivery) startSpan(o *outgoing) trace.Span {
	if d.cfg.Tracer == nil {
		return nil
	}
	env := o.claimed.Envelope
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.system", o.broker),
		attribute.String("messaging.destination.name", o.topic),
		attribute.String("messaging.message.id", o.claimed.ID),
		attribute.Int64("delaybridge.due_ms", o.claimed.Due),
		attribute.Int("delaybridge.attempt", o.claimed.Attempts+1))}
	if v, ok := env.Headers.Get(tracing.IngressSpanKey); ok {
		if sc := tracing.ParseSpanContext(v); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	_, span := d.cfg.Tracer.Start(tracing.Extract(context.Background(), env.Headers), "delaybridge publish", opts...)
	return span
}

// outputHeaders is the message for the target, c's stored headers plus x-delay-id,
// x-delay-due and x-delay-source, as a header list with its ID "<id>:<version>" (unique per
// scheduled firing: the NATS adapter sends it as Nats-Msg-Id), and for a Kafka target the
// record key and the tombstone mark (headers.Message Key and Tombstone).
func outputHeaders(c delaystore.Claimed) headers.Message {
	env := c.Envelope
	hs := make(headers.List, 0, len(env.Headers)+4)
	for _, f := range env.Headers {
		if !headers.IsReserved(f.Key) { // the ingress span (tracing.IngressSpanKey)
			hs = append(hs, f)
		}
	}
	hs.Add(contract.HeaderID, c.ID)
	hs.Add(contract.HeaderDue, strconv.FormatInt(c.Due, 10))
	hs.Add(contract.HeaderSource, env.Source)
	out := headers.Message{ID: c.ID + ":" + strconv.FormatInt(c.Version, 10), Payload: env.Payload}
	// docs/contract.md section 1: a Kafka key is kept Kafka to Kafka, travels to NATS as x-kafka-key,
	// and a message from NATS gets its x-kafka-key header as the record key.
	key := env.Key
	toKafka := strings.HasPrefix(env.Target, "kafka:")
	if key == nil && toKafka {
		if v, ok := env.Headers.Get(contract.HeaderKafkaKey); ok {
			key = []byte(v)
		}
	}
	if key != nil {
		if toKafka {
			out.Key = key
		} else if _, ok := env.Headers.Get(contract.HeaderKafkaKey); !ok {
			hs.Add(contract.HeaderKafkaKey, string(key))
		}
	}
	// A tombstone (null value) stays one Kafka to Kafka, travels to NATS as an empty
	// payload with x-kafka-tombstone: true, and that header makes one on a Kafka target.
	tombstone := env.Tombstone || contract.Tombstone(env.Headers.Values(contract.HeaderKafkaTombstone))
	switch {
	case tombstone && toKafka:
		out.Tombstone = true
	case env.Tombstone && !contract.Tombstone(env.Headers.Values(contract.HeaderKafkaTombstone)):
		hs.Add(contract.HeaderKafkaTombstone, "true")
	}
	out.Headers = hs
	return out
}

// outputMessage is the watermill message of [outputHeaders].
func outputMessage(c delaystore.Claimed) *message.Message {
	return toMessage(outputHeaders(c))
}

// toMessage is the watermill message of out: the header list as Metadata
// (headers.ToMetadata), with the Kafka key and tombstone mark as reserved metadata.
func toMessage(out headers.Message) *message.Message {
	msg := message.NewMessage(out.ID, out.Payload)
	msg.Metadata = headers.ToMetadata(out.Headers, kafkaMeta(out))
	return msg
}

// kafkaMeta is the reserved metadata of out's Kafka key and tombstone mark, nil when it
// has neither.
func kafkaMeta(out headers.Message) map[string]string {
	if out.Key == nil && !out.Tombstone {
		return nil
	}
	extra := map[string]string{}
	if out.Key != nil {
		extra[headers.MetaKafkaKey] = string(out.Key)
	}
	if out.Tombstone {
		extra[headers.MetaKafkaTombstone] = "1"
	}
	return extra
}
