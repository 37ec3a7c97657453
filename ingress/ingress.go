package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/tracing"
)

// Parker is the part of the delay store ingress needs. Implementations must be safe for
// concurrent use; Park returns one result per request, in order.
type Parker interface {
	Park(ctx context.Context, reqs []delaystore.ParkRequest) ([]delaystore.Parked, error)
	// CancelKeyAt deletes the pending message id with ordering key key ("" none) and
	// remembers the cancel (published at at, unix ms by its source), so that an earlier
	// message of the id arriving later is not parked (delaystore.Store.CancelKeyAt).
	CancelKeyAt(ctx context.Context, id, key string, at int64) (bool, error)
	// LaneOf is which of lanes lanes parks id (delaystore.Store.LaneOf): always the same
	// for an id, and such that a lane's batch makes few, large per-shard groups.
	LaneOf(id string, lanes int) int
	// ShardOfMessage is the store shard that holds id with ordering key key
	// (delaystore.Store.ShardOfMessage): a lane waiting to fill joins a call whose shards
	// already hold all of its messages.
	ShardOfMessage(id, key string) int
	// ShardOfKey is the shard of the messages with ordering key key: their lane is
	// chosen by it, so that one lane parks a key's messages in their order.
	ShardOfKey(key string) int
}

// Kind tells what a subscription carries.
type Kind int

const (
	// Delayed messages to park.
	Delayed Kind = iota
	// Cancels: messages whose x-delay-id names a pending message to remove.
	Cancels
)

// Source is one subscription ingress consumes.
type Source struct {
	// Broker is "nats" or "kafka": it resolves unprefixed targets and selects the
	// dead-letter publisher.
	Broker string
	// Topic is the subject or topic subscribed to.
	Topic string
	// Kind is Delayed or Cancels.
	Kind Kind
	// Subscriber delivers the messages. Ingress acks or nacks every message it receives.
	// When it also implements ReceivedSubscriber, a Delayed source is read through that
	// (the fast path, without watermill messages).
	Subscriber message.Subscriber
}

// Config configures ingress.
type Config struct {
	intake.Rules
	// DLQSubject is where invalid messages go, on their source broker.
	DLQSubject string
	// BatchSize is the most messages of one lane in one store call (default 256); a lane
	// that holds that many is parked at once.
	BatchSize int
	// Lanes is how many lanes a source's messages are split into by shard (default 4). A
	// lane takes whole shards, so messages with the same id always take the same lane,
	// and a lane has one store call under way at a time, so they are parked in order.
	// Ready lanes share a store call (group commit); full ones may go in parallel.
	Lanes int
	// Linger is how long a lane waits for more messages after its first (default 1ms).
	// A lane that is ready while another call is in flight waits for that call (to go
	// with the next one), at most one more Linger.
	Linger time.Duration
	// SparseLinger is how long a sparse lane may wait for more messages after its first
	// (default 100ms; negative: never, every lane goes at Linger): a lane holding fewer
	// than sparseFill messages, all from a source that redelivers them (a source id:
	// JetStream, Kafka; never a core NATS message or request), waits for more up to
	// SparseLinger, and never past half the time left to the earliest due time among
	// them, so that a replica that sees few arrivals (one of a large fleet) parks them in
	// fewer, fuller per-shard script runs, without making any of them late.
	SparseLinger time.Duration
	// RetryMin and RetryMax bound the backoff between attempts when the store or a
	// dead-letter publish fails (defaults 50ms and 5s).
	RetryMin, RetryMax time.Duration
	// Now is the local clock: receipt times (a relative delay counts from receipt) and
	// lingers read it (default time.Now; cmd/bridge injects internal/clock's).
	Now func() time.Time
	// Tracer makes one "delaybridge park" span per parked message, a child of the
	// producer's traceparent; its span context is stored with the message so that the
	// egress publish links to it. nil or a no-op tracer: no spans (tracing.Active).
	Tracer trace.Tracer
	// Lookalikes warns about and counts incoming headers named like a contract header
	// (x-dealy). nil: New makes one over its logger, metrics and Now; the bridge passes
	// the one it shares with the message API.
	Lookalikes *intake.Lookalikes
}

// Ingress consumes sources and parks their messages. Create with New, then Run once.
type Ingress struct {
	cfg     Config
	store   Parker
	sources []Source
	dlq     map[string]message.Publisher
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time
	dead    *deadLetters // dead letters under way (reject)
	// subscribed is set once Run has subscribed to every source (Subscribed).
	subscribed atomic.Bool
}

// errNotSubscribed is Subscribed's answer until Run has subscribed to every source.
var errNotSubscribed = errors.New("ingress not subscribed yet")

// Subscribed returns nil once Run has subscribed to every source, so that a producer that
// waited for readiness finds a subscriber (a core NATS request to a subject nobody
// subscribes to fails at once with "no responders"). It does not block; safe for
// concurrent use.
func (in *Ingress) Subscribed() error {
	if !in.subscribed.Load() {
		return errNotSubscribed
	}
	return nil
}

// New checks the wiring and returns an Ingress. dlq maps a broker name to the publisher
// used for its dead-letter subject; every source broker needs one. metrics may be nil.
func New(cfg Config, store Parker, sources []Source, dlq map[string]message.Publisher, logger *slog.Logger, metrics *Metrics) (*Ingress, error) {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 256
	}
	if cfg.Lanes <= 0 {
		cfg.Lanes = 4
	}
	if cfg.Linger <= 0 {
		cfg.Linger = time.Millisecond
	}
	if cfg.SparseLinger == 0 {
		cfg.SparseLinger = 100 * time.Millisecond
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 50 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(5*time.Second, cfg.RetryMin)
	}
	if cfg.DLQSubject == "" {
		return nil, errors.New("ingress: empty dead-letter subject")
	}
	if store == nil {
		return nil, errors.New("ingress: nil store")
	}
	for _, s := range sources {
		if s.Subscriber == nil || s.Topic == "" {
			return nil, fmt.Errorf("ingress: source %s:%s has no subscriber or topic", s.Broker, s.Topic)
		}
		if dlq[s.Broker] == nil {
			return nil, fmt.Errorf("ingress: no dead-letter publisher for broker %q", s.Broker)
		}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.Tracer = tracing.Active(cfg.Tracer) // nil: no spans
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Lookalikes == nil {
		cfg.Lookalikes = intake.NewLookalikes(logger, metrics, cfg.Now)
	}
	log := logger.With("component", "ingress")
	return &Ingress{
		cfg: cfg, store: store, sources: sources, dlq: dlq,
		log: log, metrics: metrics, now: cfg.Now, dead: newDeadLetters(log),
	}, nil
}

// Run subscribes to every source and processes messages until ctx is cancelled; it then
// returns nil once every received message has been acked or nacked (dead letters still
// being retried when ctx ends are nacked). A subscribe error is
// returned at once, unless ctx ended meanwhile (a stop during start-up is clean).
// Messages in a batch that could not be parked before ctx ended are nacked (the source
// redelivers them; core NATS cannot, see docs/guarantees.md).
func (in *Ingress) Run(ctx context.Context) error {
	type sub struct {
		src  Source
		next func() (*headers.Received, bool)
	}
	subs := make([]sub, 0, len(in.sources))
	for _, s := range in.sources {
		next, err := subscribe(ctx, s)
		if err != nil && ctx.Err() != nil {
			// Shut down while still subscribing (SIGTERM right after start): a clean stop,
			// drained like any other for the sources already subscribed.
			in.log.Info("stopped before subscribing", "broker", s.Broker, "topic", s.Topic)
			break
		}
		if err != nil {
			return fmt.Errorf("subscribe %s:%s: %w", s.Broker, s.Topic, err)
		}
		subs = append(subs, sub{s, next})
		in.log.Info("consuming", "broker", s.Broker, "topic", s.Topic, "kind", kindName(s.Kind))
	}
	in.subscribed.Store(len(subs) == len(in.sources))
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.consume(ctx, s.src, s.next)
		}()
	}
	wg.Wait()
	in.dead.wg.Wait() // no reject is made after the consumers returned
	return nil
}

func kindName(k Kind) string {
	if k == Cancels {
		return "cancel"
	}
	return "delayed"
}

// received is a message with the moment ingress read it.
type received struct {
	msg *headers.Received
	at  time.Time
}

// prepared is a valid message on its way to a lane.
type prepared struct {
	received
	req   delaystore.ParkRequest
	span  trace.Span
	lane  int // laneOf(req)
	shard int // Parker.ShardOfMessage(req.ID, its ordering key)
}

// consume reads messages (next) until their channel is closed. Cancels are handled one by
// one. Delayed messages are validated as they arrive (invalid ones are handed to reject,
// which dead-letters them without holding the source) and handed to group, which parks them by lane (Parker.LaneOf),
// so that the messages of one id keep their order, in as few park calls as the load
// allows.
func (in *Ingress) consume(ctx context.Context, src Source, next func() (*headers.Received, bool)) {
	if src.Kind == Cancels {
		for msg, ok := next(); ok; msg, ok = next() {
			in.cancel(ctx, src, msg)
		}
		return
	}
	input := make(chan prepared, in.cfg.BatchSize)
	var wg sync.WaitGroup
	wg.Go(func() { in.group(ctx, src, input) })
	name := src.Broker + ":" + src.Topic // once, not per message
	for msg, ok := next(); ok; msg, ok = next() {
		r := received{msg: msg, at: in.now()}
		inc := in.incoming(src, name, r)
		in.cfg.Lookalikes.Check(inc.Headers, inc.Source)
		req, err := in.cfg.Prepare(inc, r.at)
		if err != nil {
			in.reject(ctx, src, msg, err)
			continue
		}
		span := in.startSpan(src, &req)
		input <- prepared{received: r, req: req, span: span, lane: in.laneOf(req),
			shard: in.store.ShardOfMessage(req.ID, req.Envelope.OrderingKey)}
	}
	close(input)
	wg.Wait()
}

// laneOf is the lane that parks req: its id's (Parker.LaneOf), or for a message with an
// ordering key its key's shard's, so that one lane parks every message of a key, in the
// order they arrived.
func (in *Ingress) laneOf(req delaystore.ParkRequest) int {
	if key := req.Envelope.OrderingKey; key != "" && in.cfg.Lanes > 1 {
		return in.store.ShardOfKey(key) % in.cfg.Lanes
	}
	return in.store.LaneOf(req.ID, in.cfg.Lanes)
}

// startSpan starts the ingress span of a valid message, a child of its traceparent, and
// when it records, stores its span context with the message (tracing.IngressSpanKey);
// nil without a tracer.
func (in *Ingress) startSpan(src Source, req *delaystore.ParkRequest) trace.Span {
	if in.cfg.Tracer == nil {
		return nil
	}
	parent := tracing.Extract(context.Background(), req.Envelope.Headers)
	_, span := in.cfg.Tracer.Start(parent, "delaybridge park", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", src.Broker),
			attribute.String("messaging.destination.name", src.Topic),
			attribute.String("messaging.message.id", req.ID),
			attribute.String("delaybridge.target", req.Envelope.Target)))
	if span.IsRecording() {
		if v := tracing.FormatSpanContext(span.SpanContext()); v != "" {
			req.Envelope.Headers.Add(tracing.IngressSpanKey, v)
		}
	}
	return span
}

// incoming extracts what Prepare needs from a received message of src, named name
// ("<broker>:<topic>", the x-delay-source value).
func (in *Ingress) incoming(src Source, name string, r received) intake.Incoming {
	m := r.msg
	return intake.Incoming{
		Headers:    m.Headers,
		Payload:    m.Payload,
		Key:        m.Key,
		Tombstone:  m.Tombstone,
		Broker:     src.Broker,
		Source:     name,
		SourceID:   m.SourceID,
		SourceTime: m.SourceTime,
		NewID:      watermill.NewULID,
		Received:   r.at,
	}
}
