package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/broker"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// Publisher defaults.
const (
	DefaultBatchTimeout = 2 * time.Millisecond
	DefaultWriteTimeout = 10 * time.Second
)

// maxRecordBytes is the default of PublisherConfig.MaxRecordBytes (just under the
// brokers' default message.max.bytes).
const maxRecordBytes = 1 << 20

var _ message.Publisher = (*Publisher)(nil)

// PublisherConfig configures a [Publisher]. Brokers is required; the other fields have
// defaults.
type PublisherConfig struct {
	// Brokers are the bootstrap addresses (host:port) of the cluster. Required.
	Brokers []string
	// ClientID names the client to the brokers. Default [DefaultClientID].
	ClientID string
	// BatchTimeout is how long a partition's batch waits for more records before it is
	// sent (franz-go's linger). Records of one Publish call are all queued at once, so
	// this only delays the last, partial batch of each partition. Default
	// [DefaultBatchTimeout] (2ms).
	BatchTimeout time.Duration
	// WriteTimeout bounds one Publish call. Default [DefaultWriteTimeout] (10s).
	WriteTimeout time.Duration
	// AllowAutoTopicCreation asks the brokers to create a missing topic (when they
	// allow it). Default false: publishing to a missing topic fails.
	AllowAutoTopicCreation bool
	// UUIDHeader, when set, is the record header that carries the message UUID (set on
	// every record, replacing a header of that name in the metadata). Empty (the
	// default): the UUID is not sent.
	UUIDHeader string
	// Security is the connection's TLS and SASL; the zero value is plaintext, no auth.
	Security Security
	// MaxRecordBytes is the largest record (key, value and headers) sent: the producer's
	// batch limit, to be set to the brokers' message.max.bytes
	// (BRIDGE_KAFKA_MAX_MESSAGE_BYTES). A larger record fails alone, rejected as
	// too_large. Default 1 MiB.
	MaxRecordBytes int
}

func (c PublisherConfig) withDefaults() (PublisherConfig, error) {
	if err := checkBrokers(c.Brokers); err != nil {
		return c, fmt.Errorf("kafka publisher config: %w", err)
	}
	if c.BatchTimeout < 0 || c.WriteTimeout < 0 || c.MaxRecordBytes < 0 {
		return c, errors.New("kafka publisher config: BatchTimeout, WriteTimeout and MaxRecordBytes must not be negative")
	}
	defaultTo(&c.ClientID, DefaultClientID)
	defaultTo(&c.BatchTimeout, DefaultBatchTimeout)
	defaultTo(&c.WriteTimeout, DefaultWriteTimeout)
	defaultTo(&c.MaxRecordBytes, maxRecordBytes)
	if c.MaxRecordBytes > MaxMessageBytesLimit {
		return c, fmt.Errorf("kafka publisher config: MaxRecordBytes %d above %d", c.MaxRecordBytes, MaxMessageBytesLimit)
	}
	return c, nil
}

// Publisher is a watermill message.Publisher over a franz-go client it owns. Records are
// produced idempotently (the producer id and per-partition sequence numbers let the
// brokers drop a batch that the client sent again after a lost answer), with acks from
// all in-sync replicas, and partitioned by key with murmur2, as Java's default
// partitioner does (records without a key stick to a partition per batch).
//
// Idempotence covers the client's own retries within one Publish call. A Publish that
// failed or timed out as a whole may still have written some of its records, and a
// retried call (a new Publish) writes them again: such duplicates carry the same message
// (for egress: the same x-delay-id).
//
// It is safe for concurrent use.
type Publisher struct {
	cfg PublisherConfig
	log *slog.Logger
	cl  *kgo.Client

	gate  broker.Gate // Publish enters, Close closes and waits
	close sync.Once
}

// NewPublisher returns a Publisher for the cluster at cfg.Brokers. It does not connect:
// the first Publish does. logger (nil: discarded) gets a component attribute; the
// Publisher logs per-message events at Debug only and never payloads.
func NewPublisher(cfg PublisherConfig, logger *slog.Logger) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := loggerOrDiscard(logger).With("component", "kafka.publisher")
	opts := append(ClientOpts(cfg.Brokers, cfg.ClientID, cfg.Security),
		kgo.WithLogger(kgoLogger{log}),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotence needs it; franz-go's default
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerLinger(cfg.BatchTimeout),
		kgo.ProducerBatchMaxBytes(int32(min(cfg.MaxRecordBytes+recordBatchOverhead, MaxMessageBytesLimit))),
		kgo.RecordDeliveryTimeout(cfg.WriteTimeout),
		// A produce request without an answer within half of WriteTimeout is sent again
		// (same producer id and sequence numbers: written once) within the call.
		kgo.ProduceRequestTimeout(cfg.WriteTimeout/4),
		kgo.RequestTimeoutOverhead(cfg.WriteTimeout/4),
	)
	if cfg.AllowAutoTopicCreation {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka publisher: %w", err)
	}
	return &Publisher{cfg: cfg, log: log, cl: cl}, nil
}

// recordBatchOverhead is the size of a record batch's header: a batch of one record of
// MaxRecordBytes is that much larger.
const recordBatchOverhead = 61

// Publish writes msgs to topic and returns when every record is acknowledged by all
// in-sync replicas, or WriteTimeout after the call began. Every call takes at least
// BatchTimeout: the last, partial batch of each partition is sent only then.
//
// A record's key is the metadata [headers.MetaKafkaKey] (absent: a null key), its
// headers the non-reserved metadata (repeated keys in order, see
// [headers.FromMetadata]), plus UUIDHeader when configured. Reserved metadata never
// goes on the wire.
//
// A message whose Context is done before the write is not sent and fails. When some
// messages fail (franz-go reports each record's outcome), the error is a
// [*broker.PublishError] naming them by UUID; the others are written. When no answer
// came within WriteTimeout, a plain error: such a call may still have written some
// records. A record larger than MaxRecordBytes (headers and key included) fails alone.
// Messages are not modified. Failures no retry can fix (TOPIC_AUTHORIZATION_FAILED, a
// record too large) are [*broker.RejectedError]s, with reason forbidden or too_large;
// a missing topic (without auto-creation) fails the call as a whole.
//
// Safe for concurrent use; returns [ErrClosed] after Close.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if !p.gate.Enter() {
		return fmt.Errorf("publish to %s: publisher %w", topic, ErrClosed)
	}
	defer p.gate.Leave()

	out := make([]outRecord, len(msgs))
	for i, msg := range msgs {
		out[i] = outRecord{id: msg.UUID, ctx: msg.Context()}
		if out[i].ctx.Err() == nil {
			out[i].km = toKafka(topic, msg, p.cfg.UUIDHeader)
		}
	}
	return p.send(topic, out)
}

// PublishList is [Publisher.Publish] for messages given as header lists, without the
// watermill message and its Metadata map (egress's fast path): the same records (headers
// with the names as given, repeated values in order, no reserved keys, a null value for a
// headers.Header.Null one (Publish has no null: metadata holds strings), UUIDHeader = msg.ID
// when configured, key msg.Key, a null value when msg.Tombstone), the same waits and errors
// (a [*broker.PublishError] names failed messages by ID). ctx is the context of every
// message (as a watermill message's Context); the call is bounded by WriteTimeout as
// Publish is. Messages are not modified. Safe for concurrent use; returns [ErrClosed] after
// Close.
func (p *Publisher) PublishList(ctx context.Context, topic string, msgs []headers.Message) error {
	if !p.gate.Enter() {
		return fmt.Errorf("publish to %s: publisher %w", topic, ErrClosed)
	}
	defer p.gate.Leave()
	out := make([]outRecord, len(msgs))
	for i := range msgs {
		out[i] = outRecord{id: msgs[i].ID, ctx: ctx}
		if ctx.Err() == nil {
			out[i].km = listToKafka(topic, &msgs[i], p.cfg.UUIDHeader)
		}
	}
	return p.send(topic, out)
}

// outRecord is one message of a publish call: its record, its identity (the key of its
// failure in the call's PublishError) and its context.
type outRecord struct {
	id  string
	ctx context.Context
	km  *kgo.Record
}

// produced is the outcome of one record of a send.
type produced struct {
	i   int
	err error
}

// send is Publish and PublishList once their records are built (inside the gate).
func (p *Publisher) send(topic string, msgs []outRecord) error {
	if len(msgs) == 0 {
		return nil
	}
	perr := broker.NewPublishError(topic, len(msgs))
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.WriteTimeout)
	defer cancel()
	// Buffered for every record: a promise that runs after a timed-out call returned
	// never blocks.
	done := make(chan produced, len(msgs))
	sent := 0
	for i := range msgs {
		msg := &msgs[i]
		if err := msg.ctx.Err(); err != nil {
			perr.Add(msg.id, fmt.Errorf("message context: %w", err))
			continue
		}
		if n := recordSize(msg.km); n > p.cfg.MaxRecordBytes {
			perr.Add(msg.id, broker.Reject(contract.ReasonTooLarge,
				fmt.Errorf("record of about %d bytes exceeds the %d byte limit: %w", n, p.cfg.MaxRecordBytes, kerr.MessageTooLarge)))
			continue
		}
		sent++
		p.cl.Produce(ctx, msg.km, func(_ *kgo.Record, err error) { done <- produced{i: i, err: err} })
	}
	for range sent {
		select {
		case r := <-done:
			if r.err != nil {
				perr.Add(msgs[r.i].id, classify(r.err))
			} else if p.log.Enabled(ctx, slog.LevelDebug) {
				p.log.Debug("published", "topic", topic, "uuid", msgs[r.i].id)
			}
		case <-ctx.Done():
			return fmt.Errorf("publish %d messages to %s: no acknowledgement within %s: %w", sent, topic, p.cfg.WriteTimeout, ctx.Err())
		}
	}
	if perr.Len() == 0 {
		return nil
	}
	if missing := perr.Len() == len(msgs) && sent == len(msgs) && allUnknownTopic(perr); missing {
		return fmt.Errorf("publish %d messages to %s: %w", sent, topic, kerr.UnknownTopicOrPartition)
	}
	p.log.Debug("publish incomplete", "topic", topic, "failed", perr.Len(), "total", len(msgs))
	return perr
}

// allUnknownTopic reports whether every failure of perr is a missing topic: the call
// failed as a whole.
func allUnknownTopic(perr *broker.PublishError) bool {
	for _, err := range perr.FailedMessages() {
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return false
		}
	}
	return true
}

// classify marks the broker errors that no retry can fix as rejections: no permission
// on the topic, or a record the broker will not take.
func classify(err error) error {
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return broker.Reject(contract.ReasonForbidden, err)
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return broker.Reject(contract.ReasonTooLarge, err)
	}
	return err
}

// recordSize is an upper bound of the encoded size of a record (the producer refuses a
// record whose batch would exceed its limit): varints counted at their largest.
func recordSize(km *kgo.Record) int {
	n := 5 + 1 + 10 + 5 + 5 + len(km.Key) + 5 + len(km.Value) + 5
	for _, h := range km.Headers {
		n += 5 + len(h.Key) + 5 + len(h.Value)
	}
	return n
}

// Close makes later Publish calls fail with [ErrClosed], waits for the calls in
// progress (each bounded by WriteTimeout), then closes the client and its connections.
// Idempotent and safe to call concurrently; returns nil.
func (p *Publisher) Close() error {
	p.gate.Close()
	p.close.Do(p.cl.Close)
	return nil
}
