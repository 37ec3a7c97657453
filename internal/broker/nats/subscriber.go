package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/subject"
)

// Subscriber defaults.
const (
	DefaultQueue         = "delaybridge"
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 2048
	DefaultMaxInFlight   = 2048
)

const (
	// maxPullBatch caps how many JetStream messages the client buffers ahead.
	maxPullBatch = 1000
	// pullExpiry is the life of one pull request. The server sends idle heartbeats at half
	// of it; two missed ones end the pull and the subscription resumes with a fresh one
	// (and the consumer created again, should it be gone).
	pullExpiry = 10 * time.Second
	// drainTimeout bounds, on stop, the handing back (Nak) of JetStream messages that the
	// client had buffered but never handed out.
	drainTimeout = 2 * time.Second
	// setupTimeout bounds the subscription set-up calls (stream info, consumer, flush).
	setupTimeout = 10 * time.Second
	// resumeWait is the pause before a JetStream consumer that ended (deleted, leader
	// lost) is created again.
	resumeWait = time.Second
)

// ErrStreamNotFound is matched (errors.Is) by the error of Subscribe when the configured
// stream does not exist. The adapter never creates streams.
var ErrStreamNotFound = errors.New("jetstream stream not found")

type streamNotFoundError struct{ stream string }

func (e *streamNotFoundError) Error() string {
	return fmt.Sprintf("jetstream stream %q not found: the bridge never creates streams", e.stream)
}

func (e *streamNotFoundError) Is(target error) bool { return target == ErrStreamNotFound }

var _ message.Subscriber = (*Subscriber)(nil)

// SubscriberConfig configures a [Subscriber]. The zero value is valid: core queue
// subscriptions in group [DefaultQueue].
type SubscriberConfig struct {
	// Stream, when set, is the JetStream stream through which the topics it captures are
	// consumed (a durable pull consumer per topic). It must exist: Subscribe fails when it
	// does not. Topics it does not capture, and all topics when Stream is empty, get a
	// core queue subscription.
	Stream string
	// ConsumerName names the durable consumer of a topic; it must give distinct topics
	// distinct names. Default [DefaultConsumerName].
	ConsumerName func(topic string) string
	// Queue is the queue group of core subscriptions, so that replicas share the work.
	// Default [DefaultQueue] ("delaybridge").
	Queue string
	// AckWait is how long JetStream waits for a message's Ack before redelivering it.
	// Default [DefaultAckWait] (30s).
	AckWait time.Duration
	// MaxAckPending bounds the JetStream messages handed out and not yet acked, per
	// consumer (server side) and per subscription (client side). Default
	// [DefaultMaxAckPending] (2048).
	MaxAckPending int
	// MaxInFlight bounds the core messages handed out and not yet acked or nacked, per
	// subscription. Default [DefaultMaxInFlight] (2048).
	MaxInFlight int
	// MaxProgress bounds how long a JetStream message handed out and not yet acked or
	// nacked is kept from redelivery: every AckWait/2 the Subscriber tells the server the
	// message is in progress (InProgress), so that a receiver blocked on a slow or
	// unreachable dependency is not raced by a redelivered copy. After MaxProgress the
	// reminders stop and JetStream redelivers after AckWait, so a hung message is not held
	// forever. 0 means [DefaultMaxProgress]; negative turns the reminders off.
	MaxProgress time.Duration
}

// DefaultMaxProgress is the MaxProgress used when it is 0: 5 times ackWait, at least a
// minute.
func DefaultMaxProgress(ackWait time.Duration) time.Duration {
	return max(5*ackWait, time.Minute)
}

// DefaultConsumerName is the topic with `.`, `*` and `>` replaced by `_`.
func DefaultConsumerName(topic string) string {
	return consumerNameReplacer.Replace(topic)
}

var consumerNameReplacer = strings.NewReplacer(".", "_", "*", "_", ">", "_")

func (c SubscriberConfig) withDefaults() (SubscriberConfig, error) {
	if c.AckWait < 0 || c.MaxAckPending < 0 || c.MaxInFlight < 0 {
		return c, errors.New("nats subscriber config: AckWait, MaxAckPending and MaxInFlight must not be negative")
	}
	if c.ConsumerName == nil {
		c.ConsumerName = DefaultConsumerName
	}
	if c.Queue == "" {
		c.Queue = DefaultQueue
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxProgress == 0 {
		c.MaxProgress = DefaultMaxProgress(c.AckWait)
	}
	return c, nil
}

// Subscriber is a watermill message.Subscriber over a NATS connection it does not own.
// It is safe for concurrent use.
//
// Messages are handed out without waiting for the previous one's Ack (up to
// MaxAckPending or MaxInFlight outstanding per subscription), so order is not
// guaranteed across redeliveries. The receiver acks or nacks each message:
//
//   - JetStream: Ack is a JetStream ack, sent without waiting for the server's
//     confirmation (a lost ack means a redelivery after AckWait, never a loss); Nack is
//     a Nak, and JetStream redelivers at once. While a message is neither acked nor
//     nacked, the Subscriber reports it in progress every AckWait/2, for at most
//     MaxProgress; JetStream redelivers it AckWait after the last report. The metadata carries [headers.MetaSourceID]
//     ("js:<stream>:<stream sequence>") and [headers.MetaSourceTime] (the message time,
//     unix ms).
//   - Core: Ack sends metadata [headers.MetaReply], when set and the message is a
//     request, as the reply. Nack sends nothing: core NATS has no redelivery, the
//     message is gone (a requester times out). A request carries [headers.MetaRequest]
//     "1" (never taken from the wire).
type Subscriber struct {
	nc  *natsgo.Conn
	js  jetstream.JetStream
	cfg SubscriberConfig
	log *slog.Logger

	mu     sync.Mutex // guards closed against wg.Add
	closed bool
	wg     sync.WaitGroup // subscription loops and message watchers

	closeCtx    context.Context // cancelled by Close
	closeCancel context.CancelFunc
}

// NewSubscriber returns a Subscriber on nc. logger (nil: discarded) gets a component
// attribute; the Subscriber logs per-message events at Debug only and never payloads.
func NewSubscriber(nc *natsgo.Conn, cfg SubscriberConfig, logger *slog.Logger) (*Subscriber, error) {
	if nc == nil {
		return nil, errors.New("new nats subscriber: nil connection")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("new nats subscriber: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Subscriber{
		nc:          nc,
		js:          js,
		cfg:         cfg,
		log:         loggerOrDiscard(logger).With("component", "nats.subscriber"),
		closeCtx:    ctx,
		closeCancel: cancel,
	}, nil
}

// Subscribe starts consuming topic (a subject, wildcards allowed) and returns the
// channel of its messages. It blocks until the subscription is in place (consumer
// created or updated, or core interest registered at the server), so that a message
// published after it returns is received.
//
// The channel is closed when ctx is cancelled or Close is called; ctx does not cancel
// the messages already handed out, which can still be acked or nacked until Close.
// Every message's Context derives from ctx and is cancelled by its Ack or Nack, ctx's
// cancellation, or Close.
//
// Fails when Stream is set but does not exist (errors.Is [ErrStreamNotFound]), when
// the consumer cannot be created, or after Close ([ErrClosed]).
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("subscribe to %s: subscriber %w", topic, ErrClosed)
	}
	s.wg.Add(1)
	s.mu.Unlock()

	runCtx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.closeCtx, cancel)
	run, err := s.setup(runCtx, topic)
	if err != nil {
		stopOnClose()
		cancel()
		s.wg.Done()
		return nil, fmt.Errorf("subscribe to %s: %w", topic, err)
	}
	out := make(chan *message.Message)
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer stopOnClose()
		run(runCtx, out)
	}()
	return out, nil
}

// setup prepares the subscription of topic and returns its loop, which closes out.
func (s *Subscriber) setup(ctx context.Context, topic string) (func(context.Context, chan *message.Message), error) {
	if s.cfg.Stream != "" {
		sctx, cancel := context.WithTimeout(ctx, setupTimeout)
		defer cancel()
		js, err := s.captured(sctx, topic)
		if err != nil {
			return nil, err
		}
		if js {
			return s.setupJetStream(sctx, topic)
		}
	}
	return s.setupCore(ctx, topic)
}

// captured reports whether the configured stream (which must be set) captures topic.
func (s *Subscriber) captured(ctx context.Context, topic string) (bool, error) {
	st, err := s.js.Stream(ctx, s.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, &streamNotFoundError{stream: s.cfg.Stream}
	}
	if err != nil {
		return false, fmt.Errorf("jetstream stream %q: %w", s.cfg.Stream, err)
	}
	return captures(st.CachedInfo().Config, topic), nil
}

// captures reports whether the stream stores every subject of topic.
func captures(cfg jetstream.StreamConfig, topic string) bool {
	subjects := cfg.Subjects
	if len(subjects) == 0 && cfg.Mirror == nil && len(cfg.Sources) == 0 {
		subjects = []string{cfg.Name} // a plain stream without subjects listens on its name
	}
	for _, p := range subjects {
		if subject.Matches(p, topic) {
			return true
		}
	}
	return false
}

func (s *Subscriber) consumerConfig(topic string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.cfg.ConsumerName(topic),
		FilterSubject: topic,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxAckPending: s.cfg.MaxAckPending,
	}
}

// Close stops every subscription, closes their channels and waits for the adapter's
// goroutines. Messages handed out and not yet acked or nacked are left so: JetStream
// redelivers them after AckWait (they are never acked on Close); core ones are gone.
// JetStream messages buffered but not handed out are nacked for prompt redelivery.
// Close blocks for at most a few seconds (an ack awaiting the server's confirmation, the
// hand-back of buffered messages), usually milliseconds. It does not close the
// connection. Idempotent and safe to call concurrently; always returns nil.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeCancel()
	s.wg.Wait()
	return nil
}
