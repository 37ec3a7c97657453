package fleetstats

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/internal/backoff"
)

// DefaultInterval is how often a Publisher adds its counts to the fleet's buckets: one
// script call per replica every DefaultInterval, at most.
const DefaultInterval = 5 * time.Second

// Store is what a Publisher needs of the delay store (admin.Admin.AddStats): add
// counts to the minute and hour buckets holding at, in one call. Safe for concurrent use.
type Store interface {
	AddStats(ctx context.Context, at time.Time, counts map[string]int64) error
}

// Config configures a Publisher.
type Config struct {
	// Interval is the time between two calls (0: DefaultInterval).
	Interval time.Duration
	// Now is the clock that picks the buckets (nil: time.Now).
	Now func() time.Time
}

// Publisher adds what this replica's counters counted since its last successful call to
// the fleet's buckets in Redis: one Store.AddStats call every Interval (none when nothing
// was counted), never per message. Counts that could not be added stay for the next call.
// Create with New; Run once; Flush any time. Safe for concurrent use.
type Publisher struct {
	cfg    Config
	g      prometheus.Gatherer
	store  Store
	log    *slog.Logger
	mu     sync.Mutex
	sent   map[string]int64 // the snapshot whose counts are in Redis
	streak backoff.Streak
}

// New returns a Publisher of g's counters to store. g should hold only the counters it reads
// (ingress's and egress's): every Flush gathers it, running every collector registered.
func New(cfg Config, g prometheus.Gatherer, store Store, logger *slog.Logger) *Publisher {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "fleetstats")
	return &Publisher{cfg: cfg, g: g, store: store, log: logger, sent: map[string]int64{},
		streak: backoff.Streak{Log: logger, Every: time.Minute}}
}

// Run calls Flush every Interval until ctx is done, then returns nil; it does not flush
// when it ends: call Flush once the counters' writers (ingress, egress) have stopped, so
// their last counts are added too. A failed call is logged (at Warn once per minute while
// failures last) and its counts go with the next call.
func (p *Publisher) Run(ctx context.Context) error {
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		_ = p.Flush(ctx)
	}
}

// Flush adds the counts since the last successful Flush to the buckets of now: one
// Store.AddStats call, or none when nothing was counted. It blocks until Redis answered or
// ctx is done. On an error the counts stay for the next Flush (when the error hid a call
// that went through, as a timeout may, they are counted twice).
func (p *Publisher) Flush(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	snap, err := Snapshot(p.g)
	if err != nil {
		p.streak.Failed(ctx, "fleet stats: reading the counters failed", "err", err)
		return err
	}
	delta := map[string]int64{}
	for f, n := range snap {
		if d := n - p.sent[f]; d > 0 {
			delta[f] = d
		}
	}
	if len(delta) == 0 {
		return nil
	}
	if err := p.store.AddStats(ctx, p.cfg.Now(), delta); err != nil {
		p.streak.Failed(ctx, "fleet stats: adding this replica's counts to Redis failed; they go with the next call", "err", err)
		return err
	}
	p.streak.Recovered(ctx, "fleet stats: counts added again")
	p.sent = snap
	return nil
}
