package kafka

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// MetaKafkaTimestamp is the reserved metadata key that carries a received record's
// timestamp, as decimal unix milliseconds: the source time of the message,
// [headers.MetaSourceTime], which a cancel compares (contract.Published). Like every key
// with [headers.ReservedPrefix] it never goes on the wire; the [Publisher] does not use
// it (a published record gets the time of its publication).
const MetaKafkaTimestamp = headers.MetaSourceTime

// toKafka builds the record for msg: [listToKafka] of its non-reserved metadata
// (headers.FromMetadata) with ID msg.UUID, the key from metadata [headers.MetaKafkaKey]
// when present (an empty value is an empty, non-null key; absent means a null key) and a
// tombstone when metadata [headers.MetaKafkaTombstone] is there.
func toKafka(topic string, msg *message.Message, uuidHeader string) *kgo.Record {
	m := headers.Message{ID: msg.UUID, Headers: headers.FromMetadata(msg.Metadata), Payload: msg.Payload}
	if k, ok := msg.Metadata[headers.MetaKafkaKey]; ok {
		m.Key = []byte(k)
	}
	_, m.Tombstone = msg.Metadata[headers.MetaKafkaTombstone]
	return listToKafka(topic, &m, uuidHeader)
}

// listToKafka builds the record for m: its non-reserved headers (repeated keys in order,
// names as given; a Header.Null one with a null value, every other with a non-null one,
// empty or not), key m.Key (nil: a null key), and, when uuidHeader is set, that header =
// m.ID (replacing any such header in the list). The value is the payload, never null,
// except for a tombstone (m.Tombstone): a null value.
func listToKafka(topic string, m *headers.Message, uuidHeader string) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(m.Headers)+1)
	for _, h := range m.Headers {
		if headers.IsReserved(h.Key) || (uuidHeader != "" && strings.EqualFold(h.Key, uuidHeader)) {
			continue
		}
		v := []byte(h.Value) // never nil: an empty value stays empty
		if h.Null {
			v = nil
		}
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: v})
	}
	if uuidHeader != "" {
		hs = append(hs, kgo.RecordHeader{Key: uuidHeader, Value: []byte(m.ID)})
	}
	km := &kgo.Record{Topic: topic, Headers: hs, Value: m.Payload, Key: m.Key}
	if m.Tombstone {
		km.Value = nil // a tombstone: a null value
	} else if km.Value == nil {
		km.Value = []byte{} // an empty payload is an empty value, not a null one
	}
	return km
}

// fromKafka builds the watermill message for a received record. Headers keep their
// order and repeats ([headers.ToMetadata]); a null header value becomes "" (Metadata
// holds strings); a header with the reserved prefix is kept inside
// [headers.MetaHeaders], never as a plain key (a producer cannot set the bridge's
// internal metadata; intake refuses it). The UUID is the first
// uuidHeader header when uuidHeader is set and the record has one (that header is then
// not metadata), else a new ULID. Reserved metadata added: [headers.MetaSourceID]
// ("kafka:<topic>:<partition>:<offset>"), [headers.MetaKafkaKey] when the key is not
// null (an empty key is an empty value), [MetaKafkaTimestamp] when the record has a
// timestamp, and [headers.MetaKafkaTombstone] when the value is null (franz-go keeps a
// null value nil and an empty one a non-nil empty slice).
func fromKafka(km *kgo.Record, uuidHeader string) *message.Message {
	var uuid string
	var list headers.List
	for _, h := range km.Headers {
		if uuidHeader != "" && strings.EqualFold(h.Key, uuidHeader) {
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
	extra := map[string]string{headers.MetaSourceID: sourceID(km.Topic, int(km.Partition), km.Offset)}
	if km.Key != nil {
		extra[headers.MetaKafkaKey] = string(km.Key)
	}
	if !km.Timestamp.IsZero() {
		extra[MetaKafkaTimestamp] = strconv.FormatInt(km.Timestamp.UnixMilli(), 10)
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
