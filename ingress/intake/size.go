package intake

import (
	"fmt"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// SizeLimits tells ingress the largest message each target broker takes, so that a
// message that could never be published is rejected at the edge instead of being retried
// by egress forever. Implementations must be safe for concurrent use and cheap:
// MaxMessageBytes is asked once per message, at check time (a NATS limit can change on
// reconnect).
type SizeLimits interface {
	// MaxMessageBytes is the largest message broker ("nats" or "kafka") takes now, in
	// bytes, counted as that broker counts it (NATS: header block and payload together;
	// Kafka: the record with key and headers). A value <= 0 means unknown: not checked.
	MaxMessageBytes(broker string) int64
}

// SizeLimitsFunc adapts a function to [SizeLimits].
type SizeLimitsFunc func(broker string) int64

// MaxMessageBytes calls f.
func (f SizeLimitsFunc) MaxMessageBytes(broker string) int64 { return f(broker) }

// Counting the outgoing message: egress adds to the forwarded headers x-delay-id,
// x-delay-due and x-delay-source (and x-kafka-key for a keyed message bound for NATS), and
// the NATS adapter adds Nats-Msg-Id "<id>:<version>". The due time and the version are not
// known at ingress: each is counted at the longest decimal int64 (sizeDigits), and
// x-kafka-key is counted whenever there is a key, even when egress would not add it. On
// top, sizeMargin bytes are added. The estimate is therefore never below what the adapters
// send (tested against a real NATS server's max_payload in e2e/fault), at the price of
// refusing a message a few dozen bytes under the exact limit.
const (
	sizeDigits = 20 // len("-9223372036854775808")
	sizeMargin = 64
	// natsMsgIDHeader is the header the NATS adapter adds (JetStream deduplication).
	natsMsgIDHeader = "Nats-Msg-Id"
)

// outgoingSize is the size of the message egress will publish to broker, counted as that
// broker counts it; see the comment on sizeMargin for why it errs upwards.
func outgoingSize(broker string, forward headers.List, id, source string, key, payload []byte) int64 {
	if broker == BrokerKafka {
		return kafkaRecordSize(forward, id, source, key, payload)
	}
	return natsMessageSize(forward, id, source, key, payload)
}

// natsMessageSize counts a NATS message as nats-server checks it against max_payload:
// the header block ("NATS/1.0\r\n", then "Key: Value\r\n" per value, then "\r\n") plus the
// payload.
func natsMessageSize(forward headers.List, id, source string, key, payload []byte) int64 {
	n := len("NATS/1.0\r\n") + len("\r\n")
	field := func(name string, valueLen int) { n += len(name) + len(": ") + valueLen + len("\r\n") }
	for _, f := range forward {
		field(f.Key, len(f.Value))
	}
	field(contract.HeaderID, len(id))
	field(contract.HeaderDue, sizeDigits)
	field(contract.HeaderSource, len(source))
	if key != nil {
		field(contract.HeaderKafkaKey, len(key))
	}
	field(natsMsgIDHeader, len(id)+1+sizeDigits)
	return int64(n+len(payload)) + sizeMargin
}

// kafkaRecordSize counts a Kafka record as the Kafka adapter checks it against its batch
// limit (the record with its key and headers, length varints at their largest). A message
// from NATS without a record key gets its x-kafka-key header as the key (egress), so that
// value is counted as the key too.
func kafkaRecordSize(forward headers.List, id, source string, key, payload []byte) int64 {
	keyLen := len(key)
	if key == nil {
		if v, ok := forward.Get(contract.HeaderKafkaKey); ok {
			keyLen = len(v)
		}
	}
	n := 4 + 1 + 1 + 4 + keyLen + 4 + len(payload) + 8 + 5
	field := func(name string, valueLen int) { n += 5 + len(name) + 5 + valueLen }
	for _, f := range forward {
		field(f.Key, len(f.Value))
	}
	field(contract.HeaderID, len(id))
	field(contract.HeaderDue, sizeDigits)
	field(contract.HeaderSource, len(source))
	return int64(n) + sizeMargin
}

// checkOutgoingSize rejects, with an error wrapping [ErrPayloadTooLarge], a message whose
// outgoing form exceeds what limits says the target broker takes now.
func checkOutgoingSize(limits SizeLimits, broker string, forward headers.List, id, source string, key, payload []byte) error {
	if limits == nil {
		return nil
	}
	limit := limits.MaxMessageBytes(broker)
	if limit <= 0 {
		return nil
	}
	if n := outgoingSize(broker, forward, id, source, key, payload); n > limit {
		return fmt.Errorf("%w: the message to %s would be about %d bytes with the headers the bridge adds (payload %d), over the broker's limit of %d",
			ErrPayloadTooLarge, broker, n, len(payload), limit)
	}
	return nil
}
