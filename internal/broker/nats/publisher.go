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

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/broker"
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

	acks *acks // the acknowledgements of JetStream publishes

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
	js, err := jetstream.New(nc) // stream lookups; publishes go through acks

	if err != nil {
		return nil, fmt.Errorf("new nats publisher: %w", err)
	}
	v := newViolations()
	v.install(nc)
	return &Publisher{
		nc:    nc,
		js:    js,
		cfg:   cfg,
		log:   loggerOrDiscard(logger).With("component", "nats.publisher"),
		cache: make(map[string]streamEntry),
		acks:  newAcks(nc),
		viol:  v,
	}, nil
}

// Publish publishes msgs to the subject topic and returns when every message is
// confirmed, or PublishTimeout after the call began.
//
// Every message carries the header Nats-Msg-Id = msg.UUID. When a JetStream stream
// captures topic (looked up once per StreamCacheTTL; a server without JetStream means
// none), the messages are published asynchronously, then Publish waits for all the
// publish acknowledgements (a duplicate within the stream's window counts as
// confirmed; a disconnection fails the messages still awaiting theirs). No call waits
// for room among another call's pending acknowledgements (see acks), so a stream that
// stores but never acknowledges delays only the publishes to itself. Otherwise each
// message is a core publish, and a single flush confirms that the server has them all
// (core NATS drops a message nobody subscribes to: that is not an error).
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

// publishJetStream sends msgs as core publishes with reply subjects of one ackCall (see
// acks) and waits for their acknowledgements: every one resolved, PublishTimeout (ctx),
// a message's own context, a permissions violation for topic, or a disconnection.
func (p *Publisher) publishJetStream(ctx context.Context, topic, stream string, msgs []outMsg) error {
	start := time.Now()
	call, err := p.acks.start(len(msgs))
	if err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	defer p.acks.finish(call)
	for i, msg := range msgs {
		if err := msg.ctx.Err(); err != nil {
			call.resolve(i, false, fmt.Errorf("message context: %w", err))
			continue
		}
		msg.nm.Reply = call.reply(i)
		err := p.nc.PublishMsg(msg.nm)
		msg.nm.Reply = ""
		if err != nil {
			call.resolve(i, false, classify(err))
		}
	}
	p.awaitAcks(ctx, topic, start, msgs, call)
	perr := broker.NewPublishError(topic, len(msgs))
	for i, msg := range msgs {
		r := call.result(i)
		switch {
		case r.err == nil:
			if r.duplicate {
				p.log.Debug("jetstream publish was a duplicate", "topic", topic, "uuid", msg.id, "stream", stream)
			}
			continue
		case errors.Is(r.err, jetstream.ErrNoStreamResponse):
			p.forget(topic) // the stream may be gone: look it up again next time
		}
		perr.Add(msg.id, classify(r.err))
	}
	if perr.Len() == 0 {
		return nil
	}
	p.log.Debug("jetstream publish incomplete", "topic", topic, "stream", stream, "failed", perr.Len(), "total", len(msgs))
	return perr
}

// awaitAcks waits until every entry of call is resolved, giving up (resolving what is
// left with an error) on ctx (PublishTimeout), on a permissions violation for topic
// recorded since start (the server answers a refused publish with -ERR, never with an
// acknowledgement), and message by message on each one's context.
func (p *Publisher) awaitAcks(ctx context.Context, topic string, start time.Time, msgs []outMsg, call *ackCall) {
	i := 0
	for {
		for i < len(msgs) && call.resolvedAt(i) {
			i++
		}
		if i == len(msgs) {
			return
		}
		forbidden, changed := p.viol.since(topic, start)
		if forbidden {
			call.giveUp(forbiddenErr(topic))
			return
		}
		select {
		case <-call.done:
			return
		case <-changed:
		case <-msgs[i].ctx.Done():
			call.resolve(i, false, fmt.Errorf("message context: %w", msgs[i].ctx.Err()))
		case <-ctx.Done():
			call.giveUp(fmt.Errorf("no publish acknowledgement within %s", p.cfg.PublishTimeout))
			return
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
	p.acks.close()
	return nil
}
