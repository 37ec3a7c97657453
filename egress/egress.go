package egress

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/failpoint"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// Output header names (SPEC section 2), and the error header of dead letters.
const (
	HeaderID       = "x-delay-id"
	HeaderDue      = "x-delay-due"
	HeaderSource   = "x-delay-source"
	HeaderError    = "x-delay-error"
	HeaderTarget   = "x-target"
	HeaderKafkaKey = "x-kafka-key"
	// HeaderOriginalSize: see headers.OriginalSize.
	HeaderOriginalSize = headers.OriginalSize
)

// reasonTooLarge is the RejectReason of a message larger than the broker takes.
const reasonTooLarge = "too_large"

// Claimer is the part of the delay store egress needs. Implementations must be safe for
// concurrent use. Ack and Retry are fenced by the receipt: a stale receipt changes nothing.
type Claimer interface {
	Shards() int
	Claim(ctx context.Context, shard, max int) (delaystore.Claim, error)
	Ack(ctx context.Context, receipts []delaystore.Receipt) (delaystore.Applied, error)
	Retry(ctx context.Context, reqs []delaystore.RetryRequest) (delaystore.Applied, error)
	Heads(ctx context.Context, shards []int) (heads []int64, now int64, err error)
	Wakeups(ctx context.Context) (*delaystore.Wakeups, error)
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
	// TargetInflight is the most messages of one target (broker:name) this replica has
	// in Publish at once, over all shards, while the target is not confirming (default
	// 256; flowingFactor times as many while it is, see limiter). A claimed message over
	// it is put back unpublished, without counting an attempt, so that a hanging target
	// holds only its own share of the in-flight capacity.
	TargetInflight int
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
	if c.TargetInflight <= 0 {
		c.TargetInflight = 256
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
	now        func() time.Time // the local clock of scheduling decisions
	limits     *limiter
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
	e := &Egress{cfg: cfg, store: store, publishers: publishers, log: logger.With("component", "egress"),
		metrics: metrics, now: failpoint.Now}
	e.limits = newLimiter(cfg.TargetInflight, e.now)
	for s := range store.Shards() {
		e.workers = append(e.workers, newWorker(s, shardCapacity*cfg.BatchSize))
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
	defer wakes.Close()
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
		case w, ok := <-wakes.C:
			if !ok {
				break loop
			}
			if w.Shard == delaystore.WakeResync {
				e.resync(ctx)
			} else if w.Shard >= 0 && w.Shard < len(e.workers) {
				e.workers[w.Shard].offer(w.Due)
			}
		case <-ticker.C:
			e.resync(ctx)
		}
	}
	wg.Wait()
	return nil
}

// wakeups subscribes to the store's wake-ups of every shard, retrying with backoff while
// Redis is unreachable or slow (a bridge started into a Redis outage waits rather than
// exits). It returns false when ctx ends first.
func (e *Egress) wakeups(ctx context.Context) (*delaystore.Wakeups, bool) {
	wait := 100 * time.Millisecond
	for failed := false; ; failed = true {
		wakes, err := e.store.Wakeups(ctx)
		if err == nil {
			if err = wakes.Follow(ctx, e.allShards()); err != nil {
				_ = wakes.Close()
			}
		}
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

// allShards lists every shard of the store.
func (e *Egress) allShards() []int {
	all := make([]int, len(e.workers))
	for i := range all {
		all[i] = i
	}
	return all
}

// resync reads every shard's head and offers it to its worker.
func (e *Egress) resync(ctx context.Context) {
	heads, now, err := e.store.Heads(ctx, e.allShards())
	if err != nil {
		if ctx.Err() == nil {
			e.log.Debug("resync heads", "err", err)
		}
		return
	}
	e.clock.observe(now, e.now())
	for s, h := range heads {
		if h >= 0 && s < len(e.workers) {
			e.workers[s].offer(h)
		}
	}
}
