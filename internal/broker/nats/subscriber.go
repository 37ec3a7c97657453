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

	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/headers"
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
//     ("js:<stream>:<stream sequence>").
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
		st, err := s.js.Stream(sctx, s.cfg.Stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, &streamNotFoundError{stream: s.cfg.Stream}
		}
		if err != nil {
			return nil, fmt.Errorf("jetstream stream %q: %w", s.cfg.Stream, err)
		}
		if captures(st.CachedInfo().Config, topic) {
			return s.setupJetStream(sctx, topic)
		}
	}
	return s.setupCore(ctx, topic)
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

func (s *Subscriber) setupJetStream(ctx context.Context, topic string) (func(context.Context, chan *message.Message), error) {
	cc := s.consumerConfig(topic)
	if cc.Durable == "" {
		return nil, errors.New("empty consumer name")
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, cc)
	if err != nil {
		return nil, fmt.Errorf("create or update consumer %q on stream %q: %w", cc.Durable, s.cfg.Stream, err)
	}
	log := s.log.With("topic", topic, "stream", s.cfg.Stream, "consumer", cc.Durable)
	log.Info("subscribed through jetstream")
	return func(ctx context.Context, out chan *message.Message) {
		s.runJetStream(ctx, out, topic, cons, log)
	}, nil
}

func (s *Subscriber) setupCore(ctx context.Context, topic string) (func(context.Context, chan *message.Message), error) {
	sub, err := s.nc.QueueSubscribeSync(topic, s.cfg.Queue)
	if err != nil {
		return nil, fmt.Errorf("core queue subscribe %q: %w", s.cfg.Queue, err)
	}
	fctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if err := s.nc.FlushWithContext(fctx); err != nil { // the server has our interest when this returns
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("core queue subscribe %q: flush: %w", s.cfg.Queue, err)
	}
	log := s.log.With("topic", topic, "queue", s.cfg.Queue)
	log.Info("subscribed through core nats")
	return func(ctx context.Context, out chan *message.Message) {
		s.runCore(ctx, out, sub, log)
	}, nil
}

// runJetStream hands out the consumer's messages until ctx is done, resuming with a
// fresh pull (and the consumer created again) when the server ends one.
func (s *Subscriber) runJetStream(ctx context.Context, out chan *message.Message, topic string, cons jetstream.Consumer, log *slog.Logger) {
	closeOut := sync.OnceFunc(func() { close(out) })
	defer closeOut()
	sem := make(chan struct{}, s.cfg.MaxAckPending)
	queue := s.startSettling(sem, log)
	defer close(queue)
	batch := min(s.cfg.MaxAckPending, maxPullBatch)
	for {
		it, err := cons.Messages(jetstream.PullMaxMessages(batch), jetstream.PullExpiry(pullExpiry))
		if err == nil {
			stopIter := context.AfterFunc(ctx, it.Drain) // unblocks Next
			err = s.deliverJetStream(ctx, it, out, sem, queue, log)
			stopIter()
			if ctx.Err() != nil {
				closeOut() // promptly: the hand-back below may take a moment
			}
			s.handBack(it, log)
		}
		if ctx.Err() != nil {
			return
		}
		if s.nc.IsClosed() {
			log.Warn("jetstream subscription ended: connection closed")
			return
		}
		log.Warn("jetstream consume interrupted, resuming", "error", err)
		streak := backoff.Streak{Log: log} // logged once at Warn, then quietly retried
		for {
			if !backoff.Sleep(ctx, resumeWait) {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, setupTimeout)
			cons, err = s.js.CreateOrUpdateConsumer(cctx, s.cfg.Stream, s.consumerConfig(topic))
			cancel()
			if err == nil {
				log.Info("jetstream consume resumed")
				break
			}
			if s.nc.IsClosed() {
				log.Warn("jetstream subscription ended: connection closed")
				return
			}
			streak.Failed(ctx, "jetstream consumer not available, retrying every second", "error", err)
		}
	}
}

// fetched is a JetStream message taken from the client's buffer and not yet handed out.
type fetched struct {
	jm     jetstream.Msg
	wm     *message.Message
	cancel context.CancelFunc // wm's context
}

// deliverJetStream hands out messages of it until ctx is done or it ends. A fetching
// goroutine takes messages out of the client's buffer as soon as a count of sem is free,
// and reports each one in progress from then on (keepInProgress): a message pulled from
// the server but waiting behind a blocked receiver (its parks waiting for Redis) would
// otherwise see AckWait run out, be redelivered, and be worked on twice. sem (of
// MaxAckPending, the server's own limit) bounds what is fetched and not yet settled.
func (s *Subscriber) deliverJetStream(ctx context.Context, it jetstream.MessagesContext, out chan *message.Message, sem chan struct{}, queue chan<- pending, log *slog.Logger) error {
	ready := make(chan fetched, cap(sem))
	var fetchErr error
	go func() {
		defer close(ready)
		fetchErr = s.fetchJetStream(ctx, it, sem, ready, log)
	}()
	for f := range ready {
		select {
		case out <- f.wm:
			queue <- pending{wm: f.wm, cancel: f.cancel, onAck: f.jm.Ack, onNack: f.jm.Nak}
			continue
		case <-ctx.Done():
		}
		// Stopped: hand back what was fetched and not handed out. The fetcher ends too
		// (ctx, and the iterator drained on ctx by runJetStream).
		f.cancel()
		nak(f.jm, log)
		<-sem
		for f := range ready {
			f.cancel()
			nak(f.jm, log)
			<-sem
		}
		return ctx.Err()
	}
	return fetchErr // ready is closed: the fetcher has returned
}

// fetchJetStream takes messages out of it while counts of sem are free and queues them on
// ready (which has room for every count of sem), until ctx is done or it ends.
func (s *Subscriber) fetchJetStream(ctx context.Context, it jetstream.MessagesContext, sem chan struct{}, ready chan<- fetched, log *slog.Logger) error {
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		jm, err := it.Next()
		if err != nil {
			<-sem
			return err
		}
		if ctx.Err() != nil {
			nak(jm, log)
			<-sem
			return ctx.Err()
		}
		var extra map[string]string
		if md, err := jm.Metadata(); err == nil {
			extra = map[string]string{headers.MetaSourceID: sourceID(md.Stream, md.Sequence.Stream)}
		} else {
			log.Debug("jetstream message without metadata", "error", err)
		}
		wm := fromNATS(jm.Headers(), jm.Data(), extra)
		msgCtx, cancelMsg := context.WithCancel(ctx)
		wm.SetContext(msgCtx)
		s.keepInProgress(msgCtx, jm, log)
		ready <- fetched{jm: jm, wm: wm, cancel: cancelMsg}
	}
}

// keepInProgress sends jm.InProgress every AckWait/2 until ctx ends (the message was
// settled, or the subscription stopped) or MaxProgress has passed since now. It starts no
// goroutine: one timer per message, which re-arms itself.
func (s *Subscriber) keepInProgress(ctx context.Context, jm jetstream.Msg, log *slog.Logger) {
	if s.cfg.MaxProgress < 0 {
		return
	}
	every := max(s.cfg.AckWait/2, time.Millisecond)
	until := time.Now().Add(s.cfg.MaxProgress)
	var mu sync.Mutex // guards t against the timer's own callback
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		if ctx.Err() != nil || time.Now().After(until) {
			return
		}
		if err := jm.InProgress(); err != nil {
			log.Debug("jetstream in progress", "error", err)
		}
		mu.Lock()
		t.Reset(every)
		mu.Unlock()
	})
	context.AfterFunc(ctx, func() {
		mu.Lock()
		t.Stop()
		mu.Unlock()
	})
}

// handBack stops it and naks the messages it still buffers: they were never handed
// out, so another subscriber may have them at once rather than after AckWait. Bounded
// by drainTimeout; what is left then is redelivered after AckWait.
func (s *Subscriber) handBack(it jetstream.MessagesContext, log *slog.Logger) {
	it.Drain()
	deadline := time.Now().Add(drainTimeout)
	n := 0
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			it.Stop()
			break
		}
		jm, err := it.Next(jetstream.NextMaxWait(wait))
		if err != nil {
			if errors.Is(err, natsgo.ErrTimeout) {
				it.Stop()
			}
			break
		}
		nak(jm, log)
		n++
	}
	if n > 0 {
		log.Debug("handed back buffered jetstream messages", "count", n)
	}
}

func nak(jm jetstream.Msg, log *slog.Logger) {
	if err := jm.Nak(); err != nil {
		log.Debug("jetstream nak", "error", err)
	}
}

// runCore hands out the core subscription's messages until ctx is done.
func (s *Subscriber) runCore(ctx context.Context, out chan *message.Message, sub *natsgo.Subscription, log *slog.Logger) {
	defer close(out)
	defer func() {
		// Messages the client buffered are dropped: core NATS has no redelivery.
		if err := sub.Unsubscribe(); err != nil && !s.nc.IsClosed() {
			log.Debug("core unsubscribe", "error", err)
		}
	}()
	sem := make(chan struct{}, s.cfg.MaxInFlight)
	queue := s.startSettling(sem, log)
	defer close(queue)
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			<-sem
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, natsgo.ErrSlowConsumer) {
				log.Warn("core subscription is a slow consumer: the server or client dropped messages")
				continue
			}
			log.Warn("core subscription ended", "error", err)
			return
		}
		var extra map[string]string
		if m.Reply != "" {
			extra = map[string]string{headers.MetaRequest: "1"}
		}
		wm := fromNATS(m.Header, m.Data, extra)
		msgCtx, cancelMsg := context.WithCancel(ctx)
		wm.SetContext(msgCtx)
		select {
		case out <- wm:
			queue <- pending{wm: wm, cancel: cancelMsg,
				onAck:  func() error { return reply(m, wm) },
				onNack: func() error { return nil }, // no redelivery in core NATS
			}
		case <-ctx.Done():
			cancelMsg()
			<-sem
			return
		}
	}
}

// reply answers a core request with the metadata reply body, when both are present.
func reply(m *natsgo.Msg, wm *message.Message) error {
	body := wm.Metadata.Get(headers.MetaReply)
	if body == "" || m.Reply == "" {
		return nil
	}
	return m.Respond([]byte(body))
}

// pending is a handed-out message awaiting its Ack or Nack.
type pending struct {
	wm            *message.Message
	cancel        context.CancelFunc // the message's context
	onAck, onNack func() error
}

// startSettling starts the goroutine that settles the messages of one subscription and
// returns its queue, which the caller closes when it hands out no more. The caller must
// hold a count of s.wg (no race with Close's Wait).
func (s *Subscriber) startSettling(sem chan struct{}, log *slog.Logger) chan pending {
	queue := make(chan pending, cap(sem))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for p := range queue {
			s.settle(p, log)
			<-sem
		}
	}()
	return queue
}

// settle waits for p's Ack or Nack and runs onAck or onNack. Messages are settled in the
// order they were handed out, by one goroutine per subscription rather than one per
// message: an early Ack waits for the messages handed out before it (receivers ack in
// batches, so the wait is one batch at most). On Close settle gives up, unless the Ack or
// Nack had already come: an unacked JetStream message is then redelivered after AckWait;
// a core message is gone.
func (s *Subscriber) settle(p pending, log *slog.Logger) {
	var acked bool
	select {
	case <-p.wm.Acked():
		acked = true
	case <-p.wm.Nacked():
	case <-s.closeCtx.Done():
		select {
		case <-p.wm.Acked():
			acked = true
		case <-p.wm.Nacked():
		default:
			p.cancel()
			return
		}
	}
	p.cancel()
	if acked {
		if err := p.onAck(); err != nil {
			log.Debug("ack", "uuid", p.wm.UUID, "error", err)
		}
		return
	}
	if err := p.onNack(); err != nil {
		log.Debug("nack", "uuid", p.wm.UUID, "error", err)
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
