package kafka

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// MetaKafkaTimestamp is the reserved metadata key that carries a received record's
// timestamp, as decimal unix milliseconds: the source time of the message,
// [headers.MetaSourceTime], which a cancel compares (contract.Published). Like every key
// with [headers.ReservedPrefix] it never goes on the wire; the [Publisher] does not use
// it (a published record gets the time of its publication).
const MetaKafkaTimestamp = headers.MetaSourceTime

// toKafka builds the record for msg: the non-reserved metadata as headers (repeated keys
// in order, names as given), the key from metadata [headers.MetaKafkaKey] when present
// (an empty value is an empty, non-null key; absent means a null key), and, when
// uuidHeader is set, that header = msg.UUID (replacing any such header in the metadata).
// The value is the payload, never null, except for a message with metadata
// [headers.MetaKafkaTombstone]: a tombstone, written with a null value.
func toKafka(topic string, msg *message.Message, uuidHeader string) kafkago.Message {
	list := headers.FromMetadata(msg.Metadata)
	hs := make([]kafkago.Header, 0, len(list)+1)
	for _, h := range list {
		if uuidHeader != "" && strings.EqualFold(h.Key, uuidHeader) {
			continue
		}
		hs = append(hs, kafkago.Header{Key: h.Key, Value: []byte(h.Value)})
	}
	if uuidHeader != "" {
		hs = append(hs, kafkago.Header{Key: uuidHeader, Value: []byte(msg.UUID)})
	}
	km := kafkago.Message{Topic: topic, Headers: hs, Value: msg.Payload}
	if _, ok := msg.Metadata[headers.MetaKafkaTombstone]; ok {
		km.Value = nil // a tombstone: a null value
	} else if km.Value == nil {
		km.Value = []byte{} // an empty payload is an empty value, not a null one
	}
	if k, ok := msg.Metadata[headers.MetaKafkaKey]; ok {
		km.Key = []byte(k)
	}
	return km
}

// fromKafka builds the watermill message for a received record. Headers keep their
// order and repeats ([headers.ToMetadata]); headers with the reserved prefix are dropped
// (a producer cannot set the bridge's internal metadata). The UUID is the first
// uuidHeader header when uuidHeader is set and the record has one (that header is then
// not metadata), else a new ULID. Reserved metadata added: [headers.MetaSourceID]
// ("kafka:<topic>:<partition>:<offset>"), [headers.MetaKafkaKey] when the key is not
// null (kafka-go reads an empty key as null: it is absent too),
// [MetaKafkaTimestamp] when the record has a timestamp, and [headers.MetaKafkaTombstone]
// when km.Value is nil: the fetcher sets an empty, non-null value to []byte{} first.
func fromKafka(km *kafkago.Message, uuidHeader string) *message.Message {
	var uuid string
	var list headers.List
	for _, h := range km.Headers {
		switch {
		case headers.IsReserved(h.Key):
			continue
		case uuidHeader != "" && strings.EqualFold(h.Key, uuidHeader):
			if uuid == "" {
				uuid = string(h.Value)
			}
			continue
		}
		list.Add(h.Key, string(h.Value))
	}
	if uuid == "" {
		uuid = watermill.NewULID()
	}
	extra := map[string]string{headers.MetaSourceID: sourceID(km.Topic, km.Partition, km.Offset)}
	if km.Key != nil {
		extra[headers.MetaKafkaKey] = string(km.Key)
	}
	if !km.Time.IsZero() {
		extra[MetaKafkaTimestamp] = strconv.FormatInt(km.Time.UnixMilli(), 10)
	}
	if km.Value == nil {
		extra[headers.MetaKafkaTombstone] = "1"
	}
	msg := message.NewMessage(uuid, km.Value)
	msg.Metadata = headers.ToMetadata(list, extra)
	return msg
}

// sourceID is the stable identity of a Kafka record.
func sourceID(topic string, partition int, offset int64) string {
	return fmt.Sprintf("kafka:%s:%d:%d", topic, partition, offset)
}
