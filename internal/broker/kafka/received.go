package kafka

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// SubscribeReceived is [Subscriber.Subscribe] for a receiver that takes messages as
// headers.Received (ingress's fast path: ingress.ReceivedSubscriber): the same group
// membership, partitions, commits, drains and redeliveries, without a watermill message,
// a metadata map, a context or a watcher goroutine per message. It serves every topic
// (ok is always true) and returns at once, as Subscribe does.
//
// A Received carries what Subscribe's metadata does: ID the first UUIDHeader value (""
// without one: no ULID is made), the headers in the record's order (Subscribe's metadata
// map keeps that order only when a key repeats or one is reserved), a null header value
// as Header.Null (Subscribe's metadata cannot hold it: "" there), the key (nil when
// null), Tombstone for a null value (read from the record itself: no second fetch),
// SourceID "kafka:<topic>:<partition>:<offset>" and SourceTime the record's timestamp in
// unix ms ("" when it has none). The receiver settles each message once: Ack counts as
// Subscribe's Ack, Nack hands the record out again after NackResendDelay (a new Received);
// both return at once, also after the partition was released (then they count for
// nothing, as a late Ack does with Subscribe).
//
// The channel is closed when ctx is cancelled or Close is called, as Subscribe's.
func (s *Subscriber) SubscribeReceived(ctx context.Context, topic string) (<-chan *headers.Received, bool, error) {
	sub := &subscription{s: s, topic: topic, fast: make(chan *headers.Received)}
	if err := s.start(ctx, sub); err != nil {
		return nil, false, err
	}
	return sub.fast, true, nil
}

// record is a fetched record as the fast path hands it out, read once: every delivery of
// it (a nacked one is handed out again) is a received over the same fields.
type record struct {
	msg                  headers.Message
	sourceID, sourceTime string
}

// newRecord reads km as fromKafka does, into a record: headers in record order (one with
// the reserved prefix included: intake refuses it), the first uuidHeader value as the ID
// (not a header). A null header value is Header.Null with an empty Value (franz-go keeps
// a null value nil and an empty one a non-nil empty slice).
func newRecord(km *kgo.Record, uuidHeader string) *record {
	r := &record{}
	list := make(headers.List, 0, len(km.Headers))
	for _, h := range km.Headers {
		if uuidHeader != "" && strings.EqualFold(h.Key, uuidHeader) {
			if r.msg.ID == "" {
				r.msg.ID = string(h.Value)
			}
			continue
		}
		list = append(list, headers.Header{Key: h.Key, Value: string(h.Value), Null: h.Value == nil})
	}
	r.msg.Headers = list[:len(list):len(list)] // a receiver's append copies
	r.msg.Payload = km.Value
	r.msg.Key = km.Key
	r.msg.Tombstone = km.Value == nil
	r.sourceID, r.sourceTime = sourceIDAndTime(km.Topic, int(km.Partition), km.Offset, km.Timestamp.UnixMilli(), !km.Timestamp.IsZero())
	return r
}

// sourceIDAndTime returns sourceID(topic, partition, offset) and, with timed, ms in
// decimal ("" without), as two parts of one string (one allocation).
func sourceIDAndTime(topic string, partition int, offset, ms int64, timed bool) (id, t string) {
	var num [20]byte
	var b strings.Builder
	b.Grow(len("kafka:::") + len(topic) + 3*len(num))
	b.WriteString("kafka:")
	b.WriteString(topic)
	b.WriteByte(':')
	b.Write(strconv.AppendInt(num[:0], int64(partition), 10))
	b.WriteByte(':')
	b.Write(strconv.AppendInt(num[:0], offset, 10))
	idLen := b.Len()
	if timed {
		b.Write(strconv.AppendInt(num[:0], ms, 10))
	}
	s := b.String()
	return s[:idLen], s[idLen:]
}

// received is one delivery of an entry's record on the fast path: the Received handed out
// and its Settler, which reports the first Ack or Nack to the partition's run.
type received struct {
	headers.Received
	pc      *partitionConsumer
	e       *entry
	settled atomic.Bool
}

func newReceived(pc *partitionConsumer, e *entry) *received {
	r := &received{pc: pc, e: e}
	r.Received = headers.Received{Message: e.rec.msg, SourceID: e.rec.sourceID, SourceTime: e.rec.sourceTime, Settle: r}
	return r
}

// Ack acks the record (reply is ignored: Kafka records are not requests).
func (r *received) Ack(string) { r.settle(evAck) }

// Nack hands the record out again after NackResendDelay.
func (r *received) Nack() { r.settle(evNack) }

// settle sends the first Ack or Nack to the partition's run, at once: the events channel
// has room for it (partitionConsumer), and after the partition was released it counts for
// nothing.
func (r *received) settle(kind eventKind) {
	if !r.settled.CompareAndSwap(false, true) {
		return
	}
	select {
	case r.pc.events <- event{e: r.e, kind: kind}:
	case <-r.pc.done:
	}
}
