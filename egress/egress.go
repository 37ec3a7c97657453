package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/failpoint"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/tracing"
)

// Output header names (SPEC section 2), and the error header of dead letters.
const (
	HeaderID       = "x-delay-id"
	HeaderDue      = "x-delay-due"
	HeaderSource   = "x-delay-source"
	HeaderError    = "x-delay-error"
	HeaderTarget   = "x-target"
	HeaderKafkaKey = "x-kafka-key"
)

// Claimer is the part of the delay store egress needs. Implementations must be safe for
// concurrent use. Ack and Retry are fenced by the receipt: a stale receipt changes nothing.
type Claimer interface {
	Shards() int
	Claim(ctx context.Context, shard, max int) (delaystore.Claim, error)
	Ack(ctx context.Context, receipts []delaystore.Receipt) (delaystore.Applied, error)
	Retry(ctx context.Context, reqs []delaystore.RetryRequest) (delaystore.Applied, error)
	Heads(ctx context.Context) (heads []int64, now int64, err error)
	Wakeups(ctx context.Context) (<-chan delaystore.Wake, error)
}

// PartialFailure is implemented by a publish error that knows which messages of the call
// failed (keyed by message UUID); messages not in the map were confirmed. Any other
// publish error fails every message of the call.
type PartialFailure interface {
	error
	FailedMessages() map[string]error
}

// Rejection is implemented by a publish error that is a permanent refusal of the message
// by the target broker (no permission, too large): retrying cannot help, so the message
// is dead-lettered after this one attempt with the reason as its x-delay-error.
type Rejection interface {
	error
	RejectReason() string
}

// rejected returns the reason of a permanent rejection in err, if any.
func rejected(err error) (string, bool) {
	var r Rejection
	if err != nil && errors.As(err, &r) {
		return r.RejectReason(), true
	}
	return "", false
}

// Config configures egress.
type Config struct {
	// DLQSubject is the dead-letter subject, on the source broker of the message.
	DLQSubject string
	// BatchSize is the most messages claimed per shard in one call (default 256).
	BatchSize int
	// MaxAttempts is how many failed publishes a message may have before it is
	// dead-lettered (default 10).
	MaxAttempts int
	// BackoffMin and BackoffMax bound the delay before a failed message is tried again:
	// BackoffMin * 2^(attempts-1), capped (defaults 1s and 5m).
	BackoffMin, BackoffMax time.Duration
	// ResyncInterval is how often every shard's head is re-read, a safety net for missed
	// wake-ups (default 5s).
	ResyncInterval time.Duration
	// DrainTimeout bounds the completion of batches in flight once Run's ctx is
	// cancelled (default 20s).
	DrainTimeout time.Duration
	// Lease is the store's claim lease. When set, the messages of a claimed batch carry
	// a context that ends 4/5 of it after the claim, so that a publish never outlives
	// its claim (after the lease another replica may publish the same message).
	Lease time.Duration
	// Tracer makes one "delaybridge publish" span per delivery attempt, a child of the
	// message's traceparent and linked to the ingress span that parked it. nil: no spans.
	Tracer trace.Tracer
}

func (c *Config) defaults() {
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 256
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = time.Second
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(5*time.Minute, c.BackoffMin)
	}
	if c.ResyncInterval <= 0 {
		c.ResyncInterval = 5 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 20 * time.Second
	}
}

// Egress publishes due messages. Create with New, then Run once.
type Egress struct {
	cfg        Config
	store      Claimer
	publishers map[string]message.Publisher
	log        *slog.Logger
	metrics    *Metrics
	clock      redisClock
	workers    []*worker
}

// New returns an Egress publishing through publishers, keyed by broker name ("nats",
// "kafka"). metrics may be nil.
func New(cfg Config, store Claimer, publishers map[string]message.Publisher, logger *slog.Logger, metrics *Metrics) (*Egress, error) {
	cfg.defaults()
	if store == nil {
		return nil, errors.New("egress: nil store")
	}
	if len(publishers) == 0 {
		return nil, errors.New("egress: no publishers")
	}
	if cfg.DLQSubject == "" {
		return nil, errors.New("egress: empty dead-letter subject")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Egress{cfg: cfg, store: store, publishers: publishers, log: logger.With("component", "egress"), metrics: metrics}
	for s := range store.Shards() {
		e.workers = append(e.workers, newWorker(s))
	}
	return e, nil
}

// Run delivers due messages until ctx is cancelled, then finishes the batches in flight
// (bounded by DrainTimeout) and returns nil. While Redis is unreachable or slow it waits
// and retries (the wake-up subscription included); it does not fail.
func (e *Egress) Run(ctx context.Context) error {
	wakes, ok := e.wakeups(ctx)
	if !ok {
		return nil
	}
	var wg sync.WaitGroup
	for _, w := range e.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.runWorker(ctx, w)
		}()
	}
	e.resync(ctx)
	ticker := time.NewTicker(e.cfg.ResyncInterval)
	defer ticker.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case w, ok := <-wakes:
			if !ok {
				break loop
			}
			if w.Shard < 0 {
				e.resync(ctx)
			} else if w.Shard < len(e.workers) {
				e.workers[w.Shard].offer(w.Due)
			}
		case <-ticker.C:
			e.resync(ctx)
		}
	}
	wg.Wait()
	return nil
}

// wakeups subscribes to the store's wake-ups, retrying with backoff while Redis is
// unreachable or slow (a bridge started into a Redis outage waits rather than exits). It
// returns false when ctx ends first.
func (e *Egress) wakeups(ctx context.Context) (<-chan delaystore.Wake, bool) {
	wait := 100 * time.Millisecond
	for failed := false; ; failed = true {
		wakes, err := e.store.Wakeups(ctx)
		if err == nil {
			if failed {
				e.log.Info("wake-up subscription recovered")
			}
			return wakes, true
		}
		if ctx.Err() != nil {
			return nil, false
		}
		if !failed {
			e.log.Warn("wake-up subscription failed; retrying with backoff", "err", err)
		}
		if !sleep(ctx, wait) {
			return nil, false
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// resync reads every shard's head and offers it to its worker.
func (e *Egress) resync(ctx context.Context) {
	heads, now, err := e.store.Heads(ctx)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Debug("resync heads", "err", err)
		}
		return
	}
	e.clock.observe(now, failpoint.Now())
	for s, h := range heads {
		if h >= 0 && s < len(e.workers) {
			e.workers[s].offer(h)
		}
	}
}

// worker owns one shard: it sleeps until the shard's head is due and claims it.
type worker struct {
	shard   int
	offered atomic.Int64 // earliest due offered since the worker last looked; MaxInt64 = none
	kick    chan struct{}
}

func newWorker(shard int) *worker {
	w := &worker{shard: shard, kick: make(chan struct{}, 1)}
	w.offered.Store(math.MaxInt64)
	return w
}

// offer tells the worker that something may be due at due (Redis ms). Safe for concurrent
// use; never blocks.
func (w *worker) offer(due int64) {
	for {
		cur := w.offered.Load()
		if due >= cur || w.offered.CompareAndSwap(cur, due) {
			break
		}
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// batchesInFlight bounds, per shard, the claimed batches being published and settled at
// once (so at most batchesInFlight x BatchSize messages): a slow target holds at most
// that many, while the shard's other messages keep being claimed and published.
const batchesInFlight = 4

func (e *Egress) runWorker(ctx context.Context, w *worker) {
	next := int64(-1) // the shard's head as last known; -1: empty, wait for an offer
	errWait := 100 * time.Millisecond
	failing := false // in a streak of claim errors: logged once at Warn
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	slots := make(chan struct{}, batchesInFlight)
	var inflight sync.WaitGroup
	defer inflight.Wait() // batches in flight finish (bounded by DrainTimeout)
	for {
		if o := w.offered.Swap(math.MaxInt64); o != math.MaxInt64 && (next < 0 || o < next) {
			next = o
		}
		var fire <-chan time.Time
		if next >= 0 {
			if d := e.clock.local(next).Sub(failpoint.Now()); d > 0 {
				timer.Reset(d)
				fire = timer.C
			} else {
				fire = closedTime
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			timer.Stop()
			continue
		case <-fire:
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		c, err := e.store.Claim(ctx, w.shard, e.cfg.BatchSize)
		if err != nil || len(c.Messages) == 0 {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				e.log.Warn("claim failed; retrying with backoff", "shard", w.shard, "err", err)
				failing = true
			} else {
				e.log.Debug("claim failed", "shard", w.shard, "err", err)
			}
			if !sleep(ctx, errWait) {
				return
			}
			errWait = min(2*errWait, 5*time.Second)
			continue
		}
		if failing {
			e.log.Info("claim recovered", "shard", w.shard)
			failing = false
		}
		errWait = 100 * time.Millisecond
		e.clock.observe(c.Now, failpoint.Now())
		next = c.Next
		if len(c.Corrupt) > 0 {
			e.quarantine(ctx, c.Corrupt)
		}
		if len(c.Messages) > 0 {
			inflight.Add(1)
			e.metrics.claimed(len(c.Messages))
			go func(msgs []delaystore.Claimed) {
				defer inflight.Done()
				defer func() { <-slots }()
				defer e.metrics.settled(len(msgs))
				// The shard's head after settling (retries may make it earlier than the
				// claimed messages' lease scores in c.Next).
				if head, ok := e.deliver(ctx, w.shard, msgs); ok && head >= 0 {
					w.offer(head)
				}
			}(c.Messages)
			if len(c.Messages) == e.cfg.BatchSize {
				next = c.Now // more may be due: claim again at once
			}
		}
	}
}

var closedTime = func() chan time.Time { c := make(chan time.Time); close(c); return c }()

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// outgoing is one claimed message on its way to a broker.
type outgoing struct {
	claimed delaystore.Claimed
	broker  string
	topic   string
	msg     *message.Message
	err     error
	span    trace.Span
}

// quarantine handles entries whose envelope could not be decoded: they cannot be
// published or dead-lettered, so they stay in Redis for an operator, tried again only
// every BackoffMax, and are logged at Error.
func (e *Egress) quarantine(ctx context.Context, corrupt []delaystore.Receipt) {
	reqs := make([]delaystore.RetryRequest, len(corrupt))
	for i, r := range corrupt {
		reqs[i] = delaystore.RetryRequest{Receipt: r, Backoff: e.cfg.BackoffMax}
		e.log.Error("corrupt envelope in the delay store; left in place", "id", r.ID, "shard", r.Shard)
	}
	if _, err := e.store.Retry(ctx, reqs); err != nil {
		e.log.Error("reschedule corrupt entries", "err", err)
	}
}

// deliver publishes a claimed batch of one shard grouped by target and settles every
// message in the store: ack when confirmed, retry (or dead-letter) when not. It uses a
// context detached from ctx, bounded by DrainTimeout, so a batch claimed before shutdown
// is finished. It returns the shard's head after settling, when the store reported it.
func (e *Egress) deliver(ctx context.Context, shard int, claimed []delaystore.Claimed) (head int64, known bool) {
	failpoint.Inject(failpoint.AfterClaim)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.DrainTimeout)
	defer cancel()
	mctx := dctx // the messages' context: publishing ends within the claim
	if e.cfg.Lease > 0 {
		var mcancel context.CancelFunc
		mctx, mcancel = context.WithTimeout(dctx, e.cfg.Lease*4/5)
		defer mcancel()
	}
	out := make([]*outgoing, len(claimed))
	groups := map[string][]*outgoing{}
	for i, c := range claimed {
		o := &outgoing{claimed: c}
		o.broker, o.topic, _ = strings.Cut(c.Envelope.Target, ":")
		o.msg = outputMessage(c)
		o.msg.SetContext(mctx)
		o.span = e.startSpan(o)
		out[i] = o
		groups[c.Envelope.Target] = append(groups[c.Envelope.Target], o)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.publish(g)
		}()
	}
	wg.Wait()
	failpoint.Inject(failpoint.AfterPublish)
	confirmedAt := e.clock.redisNow(failpoint.Now())

	var acks []delaystore.Receipt
	var retries []delaystore.RetryRequest
	var firstErr error
	for _, o := range out {
		if o.err != nil {
			o.span.SetStatus(codes.Error, o.err.Error())
		}
		o.span.End()
		switch {
		case o.err == nil:
			acks = append(acks, o.claimed.Receipt)
			e.metrics.published(o.broker, confirmedAt-o.claimed.Due)
			e.log.Debug("published", "id", o.claimed.ID, "target", o.claimed.Envelope.Target, "lateness_ms", confirmedAt-o.claimed.Due)
		case e.permanent(o) && e.deadLetter(dctx, o) == nil:
			acks = append(acks, o.claimed.Receipt)
		default:
			backoff := e.backoff(o.claimed.Attempts + 1)
			retries = append(retries, delaystore.RetryRequest{Receipt: o.claimed.Receipt, Backoff: backoff})
			e.metrics.out(o.broker, "retried")
			e.log.Debug("publish failed; will retry", "id", o.claimed.ID, "target", o.claimed.Envelope.Target,
				"attempt", o.claimed.Attempts+1, "backoff", backoff, "err", o.err)
			if firstErr == nil {
				firstErr = o.err
			}
		}
	}
	if len(retries) > 0 {
		e.log.Warn("publishes failed; retrying with backoff", "shard", shard, "failed", len(retries),
			"batch", len(claimed), "first_err", firstErr)
	}
	known = true
	if len(acks) > 0 {
		applied, err := e.store.Ack(dctx, acks)
		if err != nil {
			// The lease expires and the messages are published again (same x-delay-id and
			// Nats-Msg-Id): a duplicate, never a loss.
			e.log.Error("ack after publish; messages will be published again after the lease", "count", len(acks), "err", err)
			known = false
		}
		if stale := len(acks) - applied.N; err == nil && stale > 0 {
			// The lease expired before the target confirmed (a pause, a slow broker): another
			// replica claimed these messages and the store fenced this ack. The copy just
			// published is a duplicate with the same Nats-Msg-Id.
			e.log.Warn("acks fenced: the lease expired before the publish was confirmed; another replica owns these messages",
				"shard", shard, "stale", stale, "batch", len(acks))
		}
		head, known = mergeHead(head, applied.Heads, shard, known)
	}
	if len(retries) > 0 {
		applied, err := e.store.Retry(dctx, retries)
		if err != nil {
			e.log.Error("schedule retry; messages come back after the lease", "count", len(retries), "err", err)
			known = false
		}
		head, known = mergeHead(head, applied.Heads, shard, known)
	}
	return head, known
}

// startSpan starts the publish span of o: a child of the message's traceparent, linked
// to the ingress span stored with it (tracing.IngressSpanKey).
func (e *Egress) startSpan(o *outgoing) trace.Span {
	env := o.claimed.Envelope
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.system", o.broker),
		attribute.String("messaging.destination.name", o.topic),
		attribute.String("messaging.message.id", o.claimed.ID),
		attribute.Int64("delaybridge.due_ms", o.claimed.Due),
		attribute.Int("delaybridge.attempt", o.claimed.Attempts+1))}
	if v, ok := env.Headers.Get(tracing.IngressSpanKey); ok {
		if sc := tracing.ParseSpanContext(v); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	_, span := e.cfg.Tracer.Start(tracing.Extract(context.Background(), env.Headers), "delaybridge publish", opts...)
	return span
}

// mergeHead keeps the latest report of shard's head: the last call's answer wins, since
// it saw the state after every earlier call.
func mergeHead(head int64, heads map[int]int64, shard int, known bool) (int64, bool) {
	h, ok := heads[shard]
	if !ok {
		return head, false
	}
	return h, known
}

// publish sends one group (same target) in one Publish call and records per-message
// outcomes in the group's entries.
func (e *Egress) publish(group []*outgoing) {
	first := group[0]
	pub := e.publishers[first.broker]
	if pub == nil {
		err := fmt.Errorf("broker %q of target %q is not configured", first.broker, first.claimed.Envelope.Target)
		for _, o := range group {
			o.err = err
		}
		return
	}
	msgs := make([]*message.Message, len(group))
	for i, o := range group {
		msgs[i] = o.msg
	}
	err := pub.Publish(first.topic, msgs...)
	if err == nil {
		return
	}
	var partial PartialFailure
	if errors.As(err, &partial) {
		failed := partial.FailedMessages()
		for _, o := range group {
			o.err = failed[o.msg.UUID]
		}
		return
	}
	for _, o := range group {
		o.err = err
	}
}

// permanent reports whether o's failure ends its attempts: the target rejected it for
// good, or it has had MaxAttempts.
func (e *Egress) permanent(o *outgoing) bool {
	if _, ok := rejected(o.err); ok {
		return true
	}
	return o.claimed.Attempts+1 >= e.cfg.MaxAttempts
}

// deadLetter publishes a message that was rejected by its target or ran out of attempts
// to the dead-letter subject of its source broker (for the HTTP source: of its target
// broker). x-delay-error is "<reason>: <error>" for a rejection, else "publish_failed: ...".
// ctx bounds the dead-letter publish (the message's own context may have ended).
func (e *Egress) deadLetter(ctx context.Context, o *outgoing) error {
	broker, _, _ := strings.Cut(o.claimed.Envelope.Source, ":")
	pub := e.publishers[broker]
	if pub == nil {
		broker = o.broker
		pub = e.publishers[broker]
	}
	if pub == nil {
		return fmt.Errorf("no publisher for dead letters of %s", o.claimed.ID)
	}
	dead := message.NewMessage(o.msg.UUID+":dlq", o.msg.Payload)
	for k, v := range o.msg.Metadata {
		dead.Metadata.Set(k, v)
	}
	dead.Metadata.Set(HeaderTarget, o.claimed.Envelope.Target)
	reason, isRejected := rejected(o.err)
	if isRejected {
		dead.Metadata.Set(HeaderError, fmt.Sprintf("%s: %v", reason, o.err))
	} else {
		reason = "publish_failed"
		dead.Metadata.Set(HeaderError, fmt.Sprintf("publish_failed: %d attempts, last: %v", o.claimed.Attempts+1, o.err))
	}
	dead.SetContext(ctx)
	if err := pub.Publish(e.cfg.DLQSubject, dead); err != nil {
		e.log.Warn("dead-letter publish", "id", o.claimed.ID, "err", err)
		return fmt.Errorf("dead-letter %s: %w", o.claimed.ID, err)
	}
	e.metrics.out(o.broker, "dead_lettered")
	e.log.Warn("dead-lettered: the target did not take it", "id", o.claimed.ID, "target", o.claimed.Envelope.Target,
		"reason", reason, "attempts", o.claimed.Attempts+1, "err", o.err)
	return nil
}

func (e *Egress) backoff(attempt int) time.Duration {
	d := e.cfg.BackoffMin
	for i := 1; i < attempt && d < e.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, e.cfg.BackoffMax)
}

// outputMessage builds the message for the target: the stored headers plus x-delay-id,
// x-delay-due and x-delay-source. Its UUID "<id>:<version>" is unique per scheduled
// firing (the NATS adapter sends it as Nats-Msg-Id).
func outputMessage(c delaystore.Claimed) *message.Message {
	env := c.Envelope
	hs := make(headers.List, 0, len(env.Headers)+3)
	for _, f := range env.Headers {
		if f.Key != tracing.IngressSpanKey {
			hs = append(hs, f)
		}
	}
	hs.Add(HeaderID, c.ID)
	hs.Add(HeaderDue, strconv.FormatInt(c.Due, 10))
	hs.Add(HeaderSource, env.Source)
	// SPEC section 1: a Kafka key is kept Kafka to Kafka, travels to NATS as x-kafka-key,
	// and a message from NATS gets its x-kafka-key header as the record key.
	var extra map[string]string
	key := env.Key
	toKafka := strings.HasPrefix(env.Target, "kafka:")
	if key == nil && toKafka {
		if v, ok := env.Headers.Get(HeaderKafkaKey); ok {
			key = []byte(v)
		}
	}
	if key != nil {
		if toKafka {
			extra = map[string]string{headers.MetaKafkaKey: string(key)}
		} else if _, ok := env.Headers.Get(HeaderKafkaKey); !ok {
			hs.Add(HeaderKafkaKey, string(key))
		}
	}
	msg := message.NewMessage(c.ID+":"+strconv.FormatInt(c.Version, 10), env.Payload)
	msg.Metadata = headers.ToMetadata(hs, extra)
	return msg
}

// redisClock maps Redis server time (unix ms) onto the local monotonic clock, from the
// last observed pair. Safe for concurrent use.
type redisClock struct {
	mu    sync.Mutex
	at    time.Time
	redis int64
}

// observe records that the Redis time was redisMs at (or just before) local.
func (c *redisClock) observe(redisMs int64, local time.Time) {
	c.mu.Lock()
	c.at, c.redis = local, redisMs
	c.mu.Unlock()
}

// local is the local time at which the Redis clock reads redisMs. Before the first
// observation it assumes the clocks agree.
func (c *redisClock) local(redisMs int64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return time.UnixMilli(redisMs)
	}
	return c.at.Add(time.Duration(redisMs-c.redis) * time.Millisecond)
}

// redisNow estimates the Redis time at local time t.
func (c *redisClock) redisNow(t time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return t.UnixMilli()
	}
	return c.redis + t.Sub(c.at).Milliseconds()
}
