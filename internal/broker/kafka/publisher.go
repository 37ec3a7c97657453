package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/delaybridge/delaybridge/internal/broker"
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// Publisher defaults.
const (
	DefaultBatchTimeout = 2 * time.Millisecond
	DefaultBatchSize    = 1000
	DefaultWriteTimeout = 10 * time.Second
)

// maxRecordBytes is the default of PublisherConfig.MaxRecordBytes (kafka-go's default
// batch limit, just under the brokers' default message.max.bytes).
const maxRecordBytes = 1 << 20

var _ message.Publisher = (*Publisher)(nil)

// PublisherConfig configures a [Publisher]. Brokers is required; the other fields have
// defaults.
type PublisherConfig struct {
	// Brokers are the bootstrap addresses (host:port) of the cluster. Required.
	Brokers []string
	// ClientID names the client to the brokers. Default [DefaultClientID].
	ClientID string
	// BatchTimeout is how long the writer waits for more messages to fill a partition's
	// batch before sending it. Messages of one Publish call are all queued at once, so
	// this only delays the last, partial batch of each partition. kafka-go's own
	// default is one second: far too long for a synchronous Publish. Default
	// [DefaultBatchTimeout] (2ms).
	BatchTimeout time.Duration
	// BatchSize is the most messages sent to one partition in one produce request; a
	// Publish call with more messages for a partition sends several requests, one after
	// the other. Default [DefaultBatchSize] (1000).
	BatchSize int
	// WriteTimeout bounds one Publish call (and each network read or write of the
	// writer). Default [DefaultWriteTimeout] (10s).
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
	// MaxRecordBytes is the largest record (key, value and headers) sent: the writer's
	// batch limit, to be set to the brokers' message.max.bytes
	// (BRIDGE_KAFKA_MAX_MESSAGE_BYTES). A larger record fails alone, rejected as
	// too_large. Default 1 MiB (kafka-go's default).
	MaxRecordBytes int
}

func (c PublisherConfig) withDefaults() (PublisherConfig, error) {
	if err := checkBrokers(c.Brokers); err != nil {
		return c, fmt.Errorf("kafka publisher config: %w", err)
	}
	if c.BatchTimeout < 0 || c.WriteTimeout < 0 || c.BatchSize < 0 || c.MaxRecordBytes < 0 {
		return c, errors.New("kafka publisher config: BatchTimeout, BatchSize, WriteTimeout and MaxRecordBytes must not be negative")
	}
	defaultTo(&c.ClientID, DefaultClientID)
	defaultTo(&c.BatchTimeout, DefaultBatchTimeout)
	defaultTo(&c.BatchSize, DefaultBatchSize)
	defaultTo(&c.WriteTimeout, DefaultWriteTimeout)
	defaultTo(&c.MaxRecordBytes, maxRecordBytes)
	return c, nil
}

// Publisher is a watermill message.Publisher over a kafka-go Writer it owns. Records
// are produced with acks from all in-sync replicas (RequiredAcks = all) and partitioned
// by key with murmur2, as Java's default partitioner does (records without a key go to
// a random partition).
//
// kafka-go has no idempotent producer: a Publish that failed or timed out may still
// have written some of its records, and a retry writes them again. Such duplicates carry
// the same message (for egress: the same x-delay-id).
//
// It is safe for concurrent use.
type Publisher struct {
	cfg       PublisherConfig
	log       *slog.Logger
	transport *kafkago.Transport
	writer    *kafkago.Writer

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
	tr := NewTransport(cfg.ClientID, cfg.Security)
	w := &kafkago.Writer{
		Addr:                   kafkago.TCP(cfg.Brokers...),
		Balancer:               &kafkago.Murmur2Balancer{},
		BatchSize:              cfg.BatchSize,
		BatchBytes:             int64(cfg.MaxRecordBytes),
		BatchTimeout:           cfg.BatchTimeout,
		ReadTimeout:            cfg.WriteTimeout,
		WriteTimeout:           cfg.WriteTimeout,
		RequiredAcks:           kafkago.RequireAll,
		AllowAutoTopicCreation: cfg.AllowAutoTopicCreation,
		Transport:              tr,
		Logger:                 kafkaLogger(log),
		ErrorLogger:            kafkaLogger(log),
	}
	return &Publisher{cfg: cfg, log: log, transport: tr, writer: w}, nil
}

// Publish writes msgs to topic in one kafka-go WriteMessages call and returns when
// every record is acknowledged by all in-sync replicas, or WriteTimeout after the call
// began. Every call takes at least BatchTimeout: kafka-go sends the last, partial batch
// of each partition only then.
//
// A record's key is the metadata [headers.MetaKafkaKey] (absent: a null key), its
// headers the non-reserved metadata (repeated keys in order, see
// [headers.FromMetadata]), plus UUIDHeader when configured. Reserved metadata never
// goes on the wire.
//
// A message whose Context is done before the write is not sent and fails. When some
// messages fail (kafka-go reports errors per partition batch, so per message), the
// error is a [*broker.PublishError] naming them by UUID; the others are written. When the
// call fails as a whole (closed publisher, unknown topic, timeout), a plain error: a
// timed-out call may still have written some records. A record larger than the
// writer's batch limit (MaxRecordBytes, headers and key included) fails alone. Messages are not
// modified. Failures no retry can fix (TOPIC_AUTHORIZATION_FAILED, a record too large)
// are [*broker.RejectedError]s, with reason forbidden or too_large.
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
// with the names as given, repeated values in order, no reserved keys, UUIDHeader = msg.ID
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
	km  kafkago.Message
}

// send is Publish and PublishList once their records are built (inside the gate).
func (p *Publisher) send(topic string, msgs []outRecord) error {
	if len(msgs) == 0 {
		return nil
	}
	perr := broker.NewPublishError(topic, len(msgs))
	records := make([]kafkago.Message, 0, len(msgs))
	uuids := make([]string, 0, len(msgs))
	for i := range msgs {
		msg := &msgs[i]
		if err := msg.ctx.Err(); err != nil {
			perr.Add(msg.id, fmt.Errorf("message context: %w", err))
			continue
		}
		if n := recordSize(&msg.km); n > p.cfg.MaxRecordBytes {
			perr.Add(msg.id, broker.Reject(contract.ReasonTooLarge,
				fmt.Errorf("record of about %d bytes exceeds the %d byte limit: %w", n, p.cfg.MaxRecordBytes, kafkago.MessageSizeTooLarge)))
			continue
		}
		records = append(records, msg.km)
		uuids = append(uuids, msg.id)
	}

	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.WriteTimeout)
	defer cancel()
	if err := p.write(ctx, topic, records, uuids, perr); err != nil {
		return err
	}
	if p.log.Enabled(ctx, slog.LevelDebug) {
		for _, id := range uuids {
			if !perr.Failed(id) {
				p.log.Debug("published", "topic", topic, "uuid", id)
			}
		}
	}
	if perr.Len() == 0 {
		return nil
	}
	p.log.Debug("publish incomplete", "topic", topic, "failed", perr.Len(), "total", len(msgs))
	return perr
}

// write sends records in one WriteMessages call and records per-message failures in
// perr. It returns an error only when the call failed as a whole.
func (p *Publisher) write(ctx context.Context, topic string, records []kafkago.Message, uuids []string, perr *broker.PublishError) error {
	if len(records) == 0 {
		return nil
	}
	err := p.writer.WriteMessages(ctx, records...)
	if err == nil {
		return nil
	}
	var werrs kafkago.WriteErrors
	if errors.As(err, &werrs) && len(werrs) == len(records) {
		for i, e := range werrs {
			if e != nil {
				perr.Add(uuids[i], classify(e))
			}
		}
		return nil
	}
	if _, ok := broker.IsRejected(classify(err)); ok {
		for _, id := range uuids {
			perr.Add(id, classify(err))
		}
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("publish %d messages to %s: no acknowledgement within %s: %w", len(records), topic, p.cfg.WriteTimeout, err)
	}
	return fmt.Errorf("publish %d messages to %s: %w", len(records), topic, err)
}

// classify marks the broker errors that no retry can fix as rejections: no permission
// on the topic, or a record the broker will not take.
func classify(err error) error {
	switch {
	case errors.Is(err, kafkago.TopicAuthorizationFailed), errors.Is(err, kafkago.ClusterAuthorizationFailed):
		return broker.Reject(contract.ReasonForbidden, err)
	case errors.Is(err, kafkago.MessageSizeTooLarge), errors.Is(err, kafkago.RecordListTooLarge):
		return broker.Reject(contract.ReasonTooLarge, err)
	}
	return err
}

// recordSize is an upper bound of the size kafka-go gives a record when it checks it
// against the batch limit (it refuses a whole WriteMessages call for one record over
// it): varints counted at their largest.
func recordSize(km *kafkago.Message) int {
	n := 4 + 1 + 1 + 4 + len(km.Key) + 4 + len(km.Value) + 8 + 5
	for _, h := range km.Headers {
		n += 5 + len(h.Key) + 5 + len(h.Value)
	}
	return n
}

// Close makes later Publish calls fail with [ErrClosed], waits for the calls in
// progress (each bounded by WriteTimeout), then closes the writer and its connections.
// Idempotent and safe to call concurrently; returns the writer's close error, if any.
func (p *Publisher) Close() error {
	p.gate.Close()
	var err error
	p.close.Do(func() {
		if e := p.writer.Close(); e != nil {
			err = fmt.Errorf("close kafka writer: %w", e)
		}
		p.transport.CloseIdleConnections()
	})
	return err
}
