package headers

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ReservedPrefix starts every metadata key that is internal to the bridge.
const ReservedPrefix = "_delaybridge_"

// Reserved metadata keys. They travel only inside the process, between an adapter and
// ingress or egress; adapters never send them to a broker.
const (
	// MetaHeaders holds the whole header list when a key repeats or a header's name has
	// the reserved prefix (a binary-safe length-prefixed encoding); it is then
	// authoritative over the plain map entries.
	MetaHeaders = ReservedPrefix + "headers"
	// MetaSourceID is the stable identity of a source message, set by a subscriber that
	// has one (JetStream: "js:<stream>:<seq>"; Kafka: "kafka:<topic>:<partition>:<offset>").
	MetaSourceID = ReservedPrefix + "source_id"
	// MetaSourceTime is the time of a source message by its source, unix ms in decimal, set
	// by a subscriber that has one (JetStream: the message time; Kafka: the record
	// timestamp). A cancel applies to the messages of its id published at or before it by
	// this time (contract.Published; docs/design.md "Remembered cancels").
	MetaSourceTime = ReservedPrefix + "source_time"
	// MetaReply is the body a subscriber sends as the reply to a request (core NATS) when
	// the message is acked. Ingress sets it before Ack.
	MetaReply = ReservedPrefix + "reply"
	// MetaKafkaKey carries a Kafka record key.
	MetaKafkaKey = ReservedPrefix + "kafka_key"
	// MetaKafkaTombstone is "1" on a message that is a Kafka tombstone (a record with a
	// null value; the payload is empty): the Kafka publisher writes it with a null value.
	MetaKafkaTombstone = ReservedPrefix + "kafka_tombstone"
	// MetaRequest is "1" on a message whose sender waits for a reply and which its source
	// cannot redeliver (a core NATS request). Ingress answers it with an error instead of
	// keeping it for a retry when a write is refused for good reasons of durability
	// (delaystore.ErrNotReplicated).
	MetaRequest = ReservedPrefix + "request"
)

// Header is one header field.
type Header struct {
	Key   string
	Value string
	// Null marks a Kafka header with a null value (Value is then ""): the Kafka publisher
	// writes it null again; NATS has no null header, so it goes there as an empty value.
	// The watermill Metadata mapping ([ToMetadata]) does not keep it.
	Null bool
}

// Format prints h as {"key" "value"}, both quoted (values may be binary), the value null
// when h.Null, for every verb (%v, %q): test failures and debugging show the three states
// of a value (some, empty, null) apart.
func (h Header) Format(f fmt.State, _ rune) {
	v := "null"
	if !h.Null {
		v = strconv.Quote(h.Value)
	}
	fmt.Fprintf(f, "{%s %s}", strconv.Quote(h.Key), v)
}

// List is an ordered header list; a key may repeat. The zero value is empty and usable.
type List []Header

// Message is one outgoing message as a header list, for a publisher that takes it without
// the watermill Metadata round trip (egress's fast path: the NATS and Kafka publishers'
// PublishList). Reserved keys in Headers are not sent.
type Message struct {
	// ID is the identity of this publish, unique per scheduled firing (NATS: Nats-Msg-Id,
	// on which JetStream deduplicates). A publish error names failed messages by it.
	ID string
	// Headers are the message's headers in order; a key may repeat.
	Headers List
	// Payload is the body; it is not modified.
	Payload []byte
	// Key is a Kafka record key (nil: a null key) and Tombstone a Kafka record with a null
	// value: what [MetaKafkaKey] and [MetaKafkaTombstone] carry in a watermill message.
	// Set for Kafka targets only; other publishers never get them.
	Key       []byte
	Tombstone bool
}

// Add appends a field.
func (l *List) Add(key, value string) { *l = append(*l, Header{Key: key, Value: value}) }

// Values returns the values of key, matched case-insensitively, in order.
func (l List) Values(key string) []string {
	var out []string
	for _, h := range l {
		if strings.EqualFold(h.Key, key) {
			out = append(out, h.Value)
		}
	}
	return out
}

// Get returns the first value of key (case-insensitive) and whether it was present.
func (l List) Get(key string) (string, bool) {
	for _, h := range l {
		if strings.EqualFold(h.Key, key) {
			return h.Value, true
		}
	}
	return "", false
}

// Without returns a new list without the fields for which drop returns true.
func (l List) Without(drop func(key string) bool) List {
	out := make(List, 0, len(l))
	for _, h := range l {
		if !drop(h.Key) {
			out = append(out, h)
		}
	}
	return out
}

// IsReserved reports whether key is internal bridge metadata.
func IsReserved(key string) bool { return strings.HasPrefix(key, ReservedPrefix) }

// ToMetadata maps l onto a watermill metadata map: each key gets its last value, and when a
// key repeats, the whole list is also stored under [MetaHeaders]. A field whose key has
// the reserved prefix (a producer's header, which intake refuses) never becomes a plain
// map entry, where it would be taken for the bridge's own metadata: the whole list is
// then stored under [MetaHeaders], and [FromMetadata] gives it back. extra (reserved keys,
// may be nil) is copied in as is. Header.Null is not kept (a null value maps to "").
func ToMetadata(l List, extra map[string]string) map[string]string {
	md := make(map[string]string, len(l)+len(extra)+1)
	whole := false
	for _, h := range l {
		if IsReserved(h.Key) {
			whole = true
			continue
		}
		if _, ok := md[h.Key]; ok {
			whole = true
		}
		md[h.Key] = h.Value
	}
	if whole {
		md[MetaHeaders] = encodeList(l)
	}
	for k, v := range extra {
		md[k] = v
	}
	return md
}

// FromMetadata is the inverse of [ToMetadata]: the header list without the reserved
// metadata keys. When [MetaHeaders] is present and valid it is authoritative, and every
// field of it is kept, one with a reserved name included (a producer's header that
// ToMetadata stored there: publishers never send it, intake refuses it); plain keys of md
// that it does not mention (set after ToMetadata) are appended, reserved ones never. Plain
// map keys come out sorted, so the result is deterministic.
func FromMetadata(md map[string]string) List {
	out := make(List, 0, len(md))
	seen := map[string]bool{}
	if enc, ok := md[MetaHeaders]; ok {
		if l, ok := decodeList(enc); ok {
			for _, h := range l {
				out = append(out, h)
				seen[h.Key] = true
			}
		}
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		if !IsReserved(k) && !seen[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, Header{Key: k, Value: md[k]})
	}
	return out
}

// encodeList writes l as uvarint count, then uvarint-length-prefixed key and value of each
// field: binary-safe, so header values need not be UTF-8.
func encodeList(l List) string {
	b := binary.AppendUvarint(nil, uint64(len(l)))
	for _, h := range l {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.AppendUvarint(b, uint64(len(h.Value)))
		b = append(b, h.Value...)
	}
	return string(b)
}

// decodeList is the inverse of encodeList; it reports false on malformed input.
func decodeList(s string) (List, bool) {
	b := []byte(s)
	next := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", false
		}
		v := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return v, true
	}
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(b)) {
		return nil, false
	}
	b = b[k:]
	l := make(List, 0, count)
	for range count {
		key, ok := next()
		if !ok {
			return nil, false
		}
		val, ok := next()
		if !ok {
			return nil, false
		}
		l = append(l, Header{Key: key, Value: val})
	}
	return l, len(b) == 0
}
