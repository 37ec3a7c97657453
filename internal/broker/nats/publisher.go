package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/broker"
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// ErrClosed is returned by Publish and Subscribe after Close.
var ErrClosed = errors.New("closed")

// Publisher defaults.
const (
	DefaultPublishTimeout = 5 * time.Second
	DefaultStreamCacheTTL = 30 * time.Second
)

// maxStreamCacheEntries bounds the stream lookup cache; past it, expired entries are
// dropped, and if that is not enough, all of them.
const maxStreamCacheEntries = 10_000

// maxStreamPublishers bounds the per-stream JetStream contexts; streams beyond it share
// the publisher's own context (and its window of pending acknowledgements).
const maxStreamPublishers = 1_000

var _ message.Publisher = (*Publisher)(nil)

// PublisherConfig configures a [Publisher]. The zero value is valid.
type PublisherConfig struct {
	// PublishTimeout bounds one Publish call: the stream lookup, and the wait for every
	// JetStream publish acknowledgement or for the flush of core publishes.
	// Default [DefaultPublishTimeout] (5s).
	PublishTimeout time.Duration
	// StreamCacheTTL is how long the answer to "which JetStream stream captures this
	// subject" is reused, whether a stream or none. A stream created later is noticed
	// within this time; until then the subject gets core publishes, which the stream
	// stores but does not confirm or deduplicate. Default [DefaultStreamCacheTTL] (30s).
	StreamCacheTTL time.Duration
}

func (c PublisherConfig) withDefaults() (PublisherConfig, error) {
	if c.PublishTimeout < 0 || c.StreamCacheTTL < 0 {
		return c, errors.New("nats publisher config: durations must not be negative")
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.StreamCacheTTL == 0 {
		c.StreamCacheTTL = DefaultStreamCacheTTL
	}
	return c, nil
}

// Publisher is a watermill message.Publisher over a NATS connection it does not own.
// It is safe for concurrent use.
type Publisher struct {
	nc  *natsgo.Conn
	js  jetstream.JetStream
	cfg PublisherConfig
	log *slog.Logger

	gate broker.Gate // Publish enters, Close closes and waits

	cacheMu sync.Mutex
	cache   map[string]streamEntry

	// byStream holds one JetStream context per stream for async publishes: each has its
	// own window of pending acknowledgements (PublishAsyncMaxPending), so a stream that
	// never acknowledges cannot stall the publishes to another stream.
	byStreamMu sync.Mutex
	byStream   map[string]*streamPub

	viol *violations
}

type streamEntry struct {
	stream  string // "" when no stream captures the subject
	expires time.Time
}

// NewPublisher returns a Publisher on nc. logger (nil: discarded) gets a component
// attribute; the Publisher logs per-message events at Debug only and never payloads.
func NewPublisher(nc *natsgo.Conn, cfg PublisherConfig, logger *slog.Logger) (*Publisher, error) {
	if nc == nil {
		return nil, errors.New("new nats publisher: nil connection")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// The async timeout lets nats.go forget acknowledgements that never come.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout))
	if err != nil {
		return nil, fmt.Errorf("new nats publisher: %w", err)
	}
	v := newViolations()
	v.install(nc)
	return &Publisher{
		nc:       nc,
		js:       js,
		cfg:      cfg,
		log:      loggerOrDiscard(logger).With("component", "nats.publisher"),
		cache:    make(map[string]streamEntry),
		byStream: make(map[string]*streamPub),
		viol:     v,
	}, nil
}

// Publish publishes msgs to the subject topic and returns when every message is
// confirmed, or PublishTimeout after the call began.
//
// Every message carries the header Nats-Msg-Id = msg.UUID. When a JetStream stream
// captures topic (looked up once per StreamCacheTTL; a server without JetStream means
// none), the messages are published asynchronously, then Publish waits for all the
// publish acknowledgements (a duplicate within the stream's window counts as
// confirmed). Each stream has its own window of pending acknowledgements, so a stream that
// stores but never acknowledges delays only the publishes to itself. Otherwise each
// message is a core publish, and a single flush confirms that
// the server has them all (core NATS drops a message nobody subscribes to: that is not
// an error).
//
// A message whose Context is done before it is sent, or while its acknowledgement is
// awaited, fails. A publish the server refuses for lack of permission (reported
// asynchronously: NewPublisher chains a recorder in front of the connection's error
// handler) fails with a [*broker.RejectedError] of reason forbidden, one larger than the
// server's max_payload or the stream's max_msg_size with reason too_large. While the
// connection is reconnecting nothing is queued in the client (use a connection with
// ReconnectBufSize -1, as [Connect] makes): the publish fails at once and the caller tries
// again later. When some messages fail, the error is a [*broker.PublishError] naming them
// (the others are confirmed); when the call fails as a whole (closed publisher or
// connection, stream lookup, flush), a plain error. Messages are not modified.
//
// Safe for concurrent use; returns [ErrClosed] after Close.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	out := make([]outMsg, len(msgs))
	for i, msg := range msgs {
		out[i] = outMsg{id: msg.UUID, ctx: msg.Context(), nm: toNATS(topic, msg)}
	}
	return p.send(topic, out)
}

// PublishList is [Publisher.Publish] for messages given as header lists, without the
// watermill message and its Metadata map: the same wire messages (headers with the names
// as given, repeated values in order, no reserved keys, Nats-Msg-Id = msg.ID), the same
// JetStream or core decision, waits and errors (a [*broker.PublishError] names failed
// messages by ID). ctx is the context of every message (as a watermill message's
// Context); the call is bounded by PublishTimeout as Publish is. Messages are not
// modified. Safe for concurrent use; returns [ErrClosed] after Close.
func (p *Publisher) PublishList(ctx context.Context, topic string, msgs []headers.Message) error {
	out := make([]outMsg, len(msgs))
	for i := range msgs {
		out[i] = outMsg{id: msgs[i].ID, ctx: ctx, nm: listToNATS(topic, &msgs[i])}
	}
	return p.send(topic, out)
}

// outMsg is one message of a publish call: its wire message, its identity (the key of
// its failure in the call's PublishError) and its context.
type outMsg struct {
	id  string
	ctx context.Context
	nm  *natsgo.Msg
}

// send is Publish and PublishList once their messages are built.
func (p *Publisher) send(topic string, msgs []outMsg) error {
	if !p.gate.Enter() {
		return fmt.Errorf("publish to %s: publisher %w", topic, ErrClosed)
	}
	defer p.gate.Leave()

	if len(msgs) == 0 {
		return nil
	}
	if p.nc.IsClosed() {
		return fmt.Errorf("publish to %s: %w", topic, natsgo.ErrConnectionClosed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PublishTimeout)
	defer cancel()

	stream, err := p.streamFor(ctx, topic)
	if err != nil {
		return fmt.Errorf("publish to %s: look up jetstream stream: %w", topic, err)
	}
	if stream != "" {
		return p.publishJetStream(ctx, topic, stream, msgs)
	}
	return p.publishCore(ctx, topic, msgs)
}

// streamPub is the JetStream context that publishes to one stream, and its users.
// Its async publishes have no per-message acknowledgement timer (nats.go's
// WithPublishAsyncTimeout arms a time.AfterFunc per message; issue 26): each Publish call
// bounds its own wait instead. A call that stops waiting for some acknowledgement (timeout,
// message context, refused publish) retires the context: later calls get a fresh one, and
// the retired one is cleaned up (its pending acknowledgements forgotten, its reply
// subscription removed) when its last user leaves, so that acknowledgements that never
// come cannot fill the window of pending ones.
type streamPub struct {
	js      jetstream.JetStream
	users   int  // guarded by Publisher.byStreamMu
	retired bool // guarded by Publisher.byStreamMu
}

// jetStreamFor returns the JetStream context that publishes to stream, counted as used
// until releaseJetStream: its own, created on first use (at most maxStreamPublishers of
// them; further streams share p.js, nil here, whose acknowledgements time out on their own).
func (p *Publisher) jetStreamFor(stream string) (jetstream.JetStream, *streamPub) {
	p.byStreamMu.Lock()
	defer p.byStreamMu.Unlock()
	if sp, ok := p.byStream[stream]; ok {
		sp.users++
		return sp.js, sp
	}
	if len(p.byStream) >= maxStreamPublishers {
		return p.js, nil
	}
	js, err := jetstream.New(p.nc)
	if err != nil {
		return p.js, nil
	}
	sp := &streamPub{js: js, users: 1}
	p.byStream[stream] = sp
	return js, sp
}

// releaseJetStream ends a use of sp (nil: no-op); abandoned: the call stopped waiting for
// an acknowledgement, which retires sp.
func (p *Publisher) releaseJetStream(stream string, sp *streamPub, abandoned bool) {
	if sp == nil {
		return
	}
	p.byStreamMu.Lock()
	sp.users--
	if abandoned && !sp.retired {
		sp.retired = true
		if p.byStream[stream] == sp {
			delete(p.byStream, stream)
		}
	}
	cleanup := sp.retired && sp.users == 0
	p.byStreamMu.Unlock()
	if cleanup {
		sp.js.CleanupPublisher()
	}
}

func (p *Publisher) publishJetStream(ctx context.Context, topic, stream string, msgs []outMsg) error {
	start := time.Now()
	js, sp := p.jetStreamFor(stream)
	abandoned := false
	defer func() { p.releaseJetStream(stream, sp, abandoned) }()
	perr := broker.NewPublishError(topic, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, msg := range msgs {
		if err := msg.ctx.Err(); err != nil {
			perr.Add(msg.id, fmt.Errorf("message context: %w", err))
			continue
		}
		opts := []jetstream.PublishOpt{jetstream.WithStallWait(stallWait(ctx))}
		if msg.id != "" {
			opts = append(opts, jetstream.WithMsgID(msg.id))
		}
		f, err := js.PublishMsgAsync(msg.nm, opts...)
		if err != nil {
			perr.Add(msg.id, classify(err))
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		resolved, err := p.awaitAck(ctx, topic, start, msgs[i], f)
		if err != nil {
			perr.Add(msgs[i].id, err)
		}
		abandoned = abandoned || !resolved
	}
	if perr.Len() == 0 {
		return nil
	}
	p.log.Debug("jetstream publish incomplete", "topic", topic, "stream", stream, "failed", perr.Len(), "total", len(msgs))
	return perr
}

// awaitAck waits for msg's publish acknowledgement f. A permissions violation for topic
// recorded since start ends the wait with a rejection: the server answers a refused
// publish with -ERR, never with an acknowledgement. resolved: f was answered (an
// acknowledgement or an error); otherwise the wait was given up and f is still pending.
func (p *Publisher) awaitAck(ctx context.Context, topic string, start time.Time, msg outMsg, f jetstream.PubAckFuture) (resolved bool, err error) {
	for {
		forbidden, changed := p.viol.since(topic, start)
		if forbidden {
			return false, forbiddenErr(topic)
		}
		select {
		case <-changed:
			continue
		case ack := <-f.Ok():
			if ack.Duplicate {
				p.log.Debug("jetstream publish was a duplicate", "topic", topic, "uuid", msg.id, "stream", ack.Stream, "seq", ack.Sequence)
			}
			return true, nil
		case err := <-f.Err():
			if errors.Is(err, jetstream.ErrNoStreamResponse) {
				p.forget(topic) // the stream may be gone: look it up again next time
			}
			return true, classify(err)
		case <-msg.ctx.Done():
			return false, fmt.Errorf("message context: %w", msg.ctx.Err())
		case <-ctx.Done():
			return false, fmt.Errorf("no publish acknowledgement within %s", p.cfg.PublishTimeout)
		}
	}
}

func forbiddenErr(topic string) error {
	return broker.Reject(contract.ReasonForbidden, fmt.Errorf("%w for publish to %q", natsgo.ErrPermissionViolation, topic))
}

func (p *Publisher) publishCore(ctx context.Context, topic string, msgs []outMsg) error {
	start := time.Now()
	perr := broker.NewPublishError(topic, len(msgs))
	sent := make([]outMsg, 0, len(msgs))
	for _, msg := range msgs {
		if err := msg.ctx.Err(); err != nil {
			perr.Add(msg.id, fmt.Errorf("message context: %w", err))
			continue
		}
		if err := p.nc.PublishMsg(msg.nm); err != nil {
			perr.Add(msg.id, classify(err))
			continue
		}
		sent = append(sent, msg)
	}
	if len(sent) > 0 {
		if err := p.nc.FlushWithContext(ctx); err != nil {
			return fmt.Errorf("publish to %s: flush %d messages: %w", topic, len(sent), err)
		}
		// A refused publish is reported to the error handler only, a moment later.
		p.viol.catchUp(p.nc, violationWait)
		if hit, _ := p.viol.since(topic, start); hit {
			for _, msg := range sent {
				perr.Add(msg.id, forbiddenErr(topic))
			}
		}
	}
	if perr.Len() == 0 {
		return nil
	}
	p.log.Debug("core publish incomplete", "topic", topic, "failed", perr.Len(), "total", len(msgs))
	return perr
}

// classify marks the errors that no retry can fix as rejections: a message over the
// server's max_payload (refused by the client), or over the stream's max_msg_size (refused
// in the publish acknowledgement).
func classify(err error) error {
	if errors.Is(err, natsgo.ErrMaxPayload) || errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) {
		return broker.Reject(contract.ReasonTooLarge, err)
	}
	return err
}

// stallWait is how long PublishMsgAsync may wait for room among the pending async
// publishes: the rest of the call's time.
func stallWait(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if w := time.Until(d); w > time.Millisecond {
			return w
		}
	}
	return time.Millisecond
}

// streamFor returns the stream that captures subject, "" when none does, using the cache.
func (p *Publisher) streamFor(ctx context.Context, subject string) (string, error) {
	now := time.Now()
	p.cacheMu.Lock()
	e, ok := p.cache[subject]
	p.cacheMu.Unlock()
	if ok && now.Before(e.expires) {
		return e.stream, nil
	}

	stream, err := p.js.StreamNameBySubject(ctx, subject)
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrStreamNotFound):
		stream = ""
	case errors.Is(err, natsgo.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		// No JetStream on this server or account: every subject is core.
		stream = ""
	default:
		return "", err
	}

	p.cacheMu.Lock()
	defer p.cacheMu.Unlock()
	if len(p.cache) >= maxStreamCacheEntries {
		maps.DeleteFunc(p.cache, func(_ string, e streamEntry) bool { return !now.Before(e.expires) })
		if len(p.cache) >= maxStreamCacheEntries {
			clear(p.cache)
		}
	}
	p.cache[subject] = streamEntry{stream: stream, expires: now.Add(p.cfg.StreamCacheTTL)}
	return stream, nil
}

func (p *Publisher) forget(subject string) {
	p.cacheMu.Lock()
	delete(p.cache, subject)
	p.cacheMu.Unlock()
}

// Close makes later Publish calls fail with [ErrClosed], waits for the calls in progress
// (each bounded by PublishTimeout) and removes the per-stream reply subscriptions. It does
// not close the connection. Idempotent; always returns nil.
func (p *Publisher) Close() error {
	p.gate.Close()
	p.byStreamMu.Lock()
	defer p.byStreamMu.Unlock()
	for name, sp := range p.byStream {
		sp.js.CleanupPublisher()
		delete(p.byStream, name)
	}
	return nil
}
