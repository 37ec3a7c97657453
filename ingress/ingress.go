package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/failpoint"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/tracing"
)

// Parker is the part of the delay store ingress needs. Implementations must be safe for
// concurrent use; Park returns one result per request, in order.
type Parker interface {
	Park(ctx context.Context, reqs []delaystore.ParkRequest) ([]delaystore.Parked, error)
	Cancel(ctx context.Context, id string) (bool, error)
	// ShardOf is the shard that holds id. Ingress gives each lane whole shards, so that a
	// lane's batch makes few, large per-shard script calls.
	ShardOf(id string) int
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
	Subscriber message.Subscriber
}

// Config configures ingress.
type Config struct {
	Rules
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
	// RetryMin and RetryMax bound the backoff between attempts when the store or a
	// dead-letter publish fails (defaults 50ms and 5s).
	RetryMin, RetryMax time.Duration
	// Now is the local clock: receipt times (a relative delay counts from receipt) and
	// lingers read it (default time.Now; cmd/bridge injects internal/clock's).
	Now func() time.Time
	// Tracer makes one "delaybridge park" span per parked message, a child of the
	// producer's traceparent; its span context is stored with the message so that the
	// egress publish links to it. nil: no spans.
	Tracer trace.Tracer
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
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Ingress{
		cfg: cfg, store: store, sources: sources, dlq: dlq,
		log: logger.With("component", "ingress"), metrics: metrics, now: cfg.Now,
	}, nil
}

// Run subscribes to every source and processes messages until ctx is cancelled; it then
// returns nil once every received message has been acked or nacked. A subscribe error is
// returned at once, unless ctx ended meanwhile (a stop during start-up is clean).
// Messages in a batch that could not be parked before ctx ended are nacked (the source
// redelivers them; core NATS cannot, see README).
func (in *Ingress) Run(ctx context.Context) error {
	type sub struct {
		src Source
		ch  <-chan *message.Message
	}
	subs := make([]sub, 0, len(in.sources))
	for _, s := range in.sources {
		ch, err := s.Subscriber.Subscribe(ctx, s.Topic)
		if err != nil && ctx.Err() != nil {
			// Shut down while still subscribing (SIGTERM right after start): a clean stop,
			// drained like any other for the sources already subscribed.
			in.log.Info("stopped before subscribing", "broker", s.Broker, "topic", s.Topic)
			break
		}
		if err != nil {
			return fmt.Errorf("subscribe %s:%s: %w", s.Broker, s.Topic, err)
		}
		subs = append(subs, sub{s, ch})
		in.log.Info("consuming", "broker", s.Broker, "topic", s.Topic, "kind", kindName(s.Kind))
	}
	in.subscribed.Store(len(subs) == len(in.sources))
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.consume(ctx, s.src, s.ch)
		}()
	}
	wg.Wait()
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
	msg *message.Message
	at  time.Time
}

// prepared is a valid message on its way to a lane.
type prepared struct {
	received
	req  delaystore.ParkRequest
	span trace.Span
	lane int // shard of req.ID mod Lanes
}

// consume reads ch until it is closed. Cancels are handled one by one. Delayed messages are
// validated as they arrive (invalid ones are dead-lettered at once) and handed to group,
// which parks them by lane (the shard of their id mod Lanes), so that the messages of one
// id keep their order, in as few park calls as the load allows.
func (in *Ingress) consume(ctx context.Context, src Source, ch <-chan *message.Message) {
	if src.Kind == Cancels {
		for msg := range ch {
			in.cancel(ctx, src, msg)
		}
		return
	}
	input := make(chan prepared, in.cfg.BatchSize)
	var wg sync.WaitGroup
	wg.Go(func() { in.group(ctx, src, input) })
	for msg := range ch {
		r := received{msg: msg, at: in.now()}
		req, err := in.cfg.Prepare(in.incoming(src, r), r.at)
		if err != nil {
			in.reject(ctx, src, msg, err)
			continue
		}
		span := in.startSpan(src, &req)
		input <- prepared{received: r, req: req, span: span, lane: in.store.ShardOf(req.ID) % in.cfg.Lanes}
	}
	close(input)
	wg.Wait()
}

// park parks one batch and then acks its messages, or nacks them all when the store
// stays unavailable until ctx ends. A relative delay loses the time its message waited
// in ingress (retries included), so that the due time counts from the moment the bridge
// received it. When only some shards failed (one refused for memory, one master's
// replicas behind), the messages of the others are acked at once and only the rest is
// retried: a message acked late could be delivered meanwhile and then, parked again by
// the retry after its tombstone expired, delivered twice. When Redis replicas do not
// confirm the write (delaystore.ErrNotReplicated), the core requests of the batch are
// answered with an error at once (their senders wait, and their source cannot
// redeliver) and the rest is retried. attempt is called before every store call (retry:
// not the first), returned after each with the messages still to park (none on success).
func (in *Ingress) park(ctx context.Context, src Source, batch []prepared, attempt func(retry bool), returned func(rest []prepared)) {
	first := true
	err := in.retry(ctx, "park", func(opCtx context.Context) error {
		attempt(!first)
		first = false
		// At every attempt: a park retried while Redis was unreachable keeps the due time
		// counted from receipt, rather than from the attempt that succeeded.
		now := in.now()
		reqs := make([]delaystore.ParkRequest, len(batch))
		for i, p := range batch {
			reqs[i] = p.req
			if !p.req.Absolute {
				reqs[i].Delay = contract.Remaining(p.req.Delay, p.at, now)
			}
		}
		parked, err := in.store.Park(opCtx, reqs)
		batch = in.ackParked(src, batch, reqs, parked)
		if err == nil && len(batch) > 0 {
			err = fmt.Errorf("park: %d of %d messages without a result", len(batch), len(reqs))
		}
		if len(batch) > 0 && errors.Is(err, delaystore.ErrNotReplicated) {
			batch = in.refuseRequests(src, batch, err)
		}
		returned(batch)
		if len(batch) == 0 {
			return nil
		}
		return err
	})
	if err != nil {
		for _, p := range batch {
			p.span.SetStatus(codes.Error, "not parked")
			p.span.End()
			p.msg.Nack()
		}
		in.metrics.in(src.Broker, "nacked", len(batch))
	}
}

// ackParked acks the messages of batch whose park succeeded (parked[i].ID set; reqs[i]
// is batch[i]'s request) and returns the others, in order. A message whose source id had
// a live tombstone (Parked.Delivered) is acked and counted as already delivered.
func (in *Ingress) ackParked(src Source, batch []prepared, reqs []delaystore.ParkRequest, parked []delaystore.Parked) []prepared {
	if len(parked) != len(batch) {
		return batch // nothing was parked (the call was refused before any shard ran)
	}
	rest := batch[:0:0]
	acked, delivered := 0, 0
	for i, p := range batch {
		r := parked[i]
		if r.ID == "" {
			rest = append(rest, p)
			continue
		}
		if acked == 0 {
			failpoint.Inject(failpoint.AfterPark)
		}
		acked++
		p.msg.Metadata.Set(headers.MetaReply, replyJSON(struct {
			ID  string `json:"id"`
			Due int64  `json:"due"`
		}{r.ID, r.Due}))
		p.msg.Ack()
		p.span.End()
		if r.Delivered {
			// A redelivery of a source message that was delivered already (its source ack
			// was lost): acked, not parked again.
			delivered++
			in.log.Debug("already delivered", "id", r.ID, "source_id", reqs[i].Envelope.SourceID)
			continue
		}
		in.log.Debug("parked", "id", r.ID, "due", r.Due, "target", reqs[i].Envelope.Target, "existed", r.Existed)
	}
	in.metrics.in(src.Broker, "parked", acked-delivered)
	in.metrics.in(src.Broker, "already_delivered", delivered)
	return rest
}

// refuseRequests answers the core requests of batch (headers.MetaRequest) with
// {"error": "not_replicated: ..."} and returns the other messages. A refused request may
// still stand on the Redis master: its sender retries (with x-delay-id, idempotently).
func (in *Ingress) refuseRequests(src Source, batch []prepared, cause error) []prepared {
	keep := batch[:0:0]
	for _, p := range batch {
		if p.msg.Metadata.Get(headers.MetaRequest) != "1" {
			keep = append(keep, p)
			continue
		}
		p.msg.Metadata.Set(headers.MetaReply, notReplicatedReply(cause))
		p.msg.Ack() // a core request: the ack sends the reply
		p.span.SetStatus(codes.Error, "not replicated")
		p.span.End()
		in.metrics.in(src.Broker, "nacked", 1)
	}
	return keep
}

// notReplicatedReply is the error reply to a core request whose write Redis replicas did
// not confirm.
func notReplicatedReply(cause error) string {
	return replyJSON(struct {
		Error string `json:"error"`
	}{"not_replicated: " + cause.Error() + "; retry the request"})
}

// startSpan starts the ingress span of a valid message, a child of its traceparent, and
// when it records, stores its span context with the message (tracing.IngressSpanKey).
func (in *Ingress) startSpan(src Source, req *delaystore.ParkRequest) trace.Span {
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

// incoming extracts what Prepare needs from a watermill message.
func (in *Ingress) incoming(src Source, r received) Incoming {
	md := r.msg.Metadata
	var key []byte
	if k, ok := md[headers.MetaKafkaKey]; ok {
		key = []byte(k)
	}
	return Incoming{
		Headers:  headers.FromMetadata(md),
		Payload:  r.msg.Payload,
		Key:      key,
		Broker:   src.Broker,
		Source:   src.Broker + ":" + src.Topic,
		SourceID: md[headers.MetaSourceID],
		NewID:    watermill.NewULID,
		Received: r.at,
	}
}

// cancel removes the pending message named by msg's x-delay-id and acks msg.
func (in *Ingress) cancel(ctx context.Context, src Source, msg *message.Message) {
	ids := headers.FromMetadata(msg.Metadata).Values(contract.HeaderID)
	if len(ids) != 1 {
		err := errCancelWithoutID
		if len(ids) > 1 {
			err = fmt.Errorf("%w: %s given %d times", ErrInvalidID, contract.HeaderID, len(ids))
		}
		in.reject(ctx, src, msg, err)
		return
	}
	id := ids[0]
	var cancelled bool
	refused := false
	err := in.retry(ctx, "cancel", func(opCtx context.Context) error {
		var err error
		cancelled, err = in.store.Cancel(opCtx, id)
		if errors.Is(err, delaystore.ErrNotReplicated) && msg.Metadata.Get(headers.MetaRequest) == "1" {
			msg.Metadata.Set(headers.MetaReply, notReplicatedReply(err))
			refused = true
			return nil // answered with the error below; the sender retries
		}
		return err
	})
	if err == nil && refused {
		msg.Ack()
		in.metrics.in(src.Broker, "nacked", 1)
		return
	}
	if err != nil {
		msg.Nack()
		in.metrics.in(src.Broker, "nacked", 1)
		return
	}
	msg.Metadata.Set(headers.MetaReply, replyJSON(struct {
		ID        string `json:"id"`
		Cancelled bool   `json:"cancelled"`
	}{id, cancelled}))
	msg.Ack()
	in.log.Debug("cancel", "id", id, "cancelled", cancelled)
	in.metrics.in(src.Broker, "cancelled", 1)
}

// reject sends msg to the dead-letter subject of its broker, with all its headers and
// x-delay-error, then acks it (with an error reply for a request). If the dead-letter
// publish cannot be done before ctx ends, msg is nacked instead.
func (in *Ingress) reject(ctx context.Context, src Source, msg *message.Message, cause error) {
	text := ErrorText(cause)
	dead := message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		if k != headers.MetaReply && k != headers.MetaSourceID {
			dead.Metadata.Set(k, v)
		}
	}
	if src.Broker == BrokerNATS {
		dead.Metadata = disarmNATSHeaders(dead.Metadata)
	}
	dead.Metadata.Set(contract.HeaderError, text)
	err := in.retry(ctx, "dead-letter", func(opCtx context.Context) error {
		dead.SetContext(opCtx)
		err := in.dlq[src.Broker].Publish(in.cfg.DLQSubject, dead)
		if tooLarge(err) && len(dead.Payload) > 0 {
			// The dead letter (the message plus x-delay-error) is more than the broker
			// takes: send it without its payload rather than retry it forever.
			in.log.Warn("dead letter too large; dead-lettering it without its payload", "id", logID(msg), "size", len(dead.Payload))
			dead = withoutPayload(dead)
			dead.SetContext(opCtx)
			err = in.dlq[src.Broker].Publish(in.cfg.DLQSubject, dead)
		}
		return err
	})
	if err != nil {
		msg.Nack()
		in.metrics.in(src.Broker, "nacked", 1)
		return
	}
	msg.Metadata.Set(headers.MetaReply, replyJSON(struct {
		Error string `json:"error"`
	}{text}))
	msg.Ack()
	in.log.Debug("rejected", "id", logID(msg), "broker", src.Broker, "topic", src.Topic, "reason", Reason(cause))
	in.metrics.rejected(src.Broker, Reason(cause))
}

// tooLarge reports whether err is (or wraps) a broker's permanent refusal of a message
// as too large (an error with RejectReason() "too_large", as the adapters make).
func tooLarge(err error) bool {
	var r interface{ RejectReason() string }
	return errors.As(err, &r) && r.RejectReason() == "too_large"
}

// withoutPayload is a copy of dead with an empty payload and contract.HeaderOriginalSize.
func withoutPayload(dead *message.Message) *message.Message {
	out := message.NewMessage(dead.UUID, nil)
	for k, v := range dead.Metadata {
		out.Metadata.Set(k, v)
	}
	list := headers.FromMetadata(out.Metadata)
	list.Add(contract.HeaderOriginalSize, strconv.Itoa(len(dead.Payload)))
	extra := map[string]string{}
	for k, v := range out.Metadata {
		if headers.IsReserved(k) && k != headers.MetaHeaders {
			extra[k] = v
		}
	}
	out.Metadata = headers.ToMetadata(list, extra)
	return out
}

// replyJSON encodes a reply body without HTML escaping (error texts quote subjects such
// as orders.> verbatim). The reply structs always encode.
func replyJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// opTimeout bounds one store call or dead-letter publish.
const opTimeout = 10 * time.Second

// retry calls op until it succeeds or ctx ends, with capped exponential backoff; the
// first failure of a streak is logged at Warn, recovery at Info. op gets a context that
// is not cancelled with ctx (bounded by opTimeout), so a batch read before shutdown is
// still parked and acked during the drain.
func (in *Ingress) retry(ctx context.Context, what string, op func(context.Context) error) error {
	wait := backoff.Backoff{Min: in.cfg.RetryMin, Max: in.cfg.RetryMax}
	streak := backoff.Streak{Log: in.log}
	for {
		opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		err := op(opCtx)
		cancel()
		if err == nil {
			streak.Recovered(ctx, what+" recovered")
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		streak.Failed(ctx, what+" failed; retrying, sources are not acked meanwhile", "err", err)
		if !backoff.Sleep(ctx, wait.Next()) {
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		}
	}
}
