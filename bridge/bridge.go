// Package bridge runs delaybridge inside a Go program: the same bridge as the `bridge run`
// sidecar (cmd/bridge is this package's first user), configured with the same
// config.Config, for services that would rather not run a second process.
//
//	cfg, err := config.Load(config.EnvMap(os.Environ())) // or build the struct in code
//	if err != nil { ... }
//	b, err := bridge.New(cfg, bridge.WithLogger(logger))
//	if err != nil { ... }
//	err = b.Run(ctx) // until ctx is cancelled; then it drains and returns
//
// Run owns what it opens (Redis and broker connections, the HTTP listeners) and closes
// it before it returns; the program owns ctx. examples/inprocess is a complete program.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/admin/monitor"
	"github.com/delaybridge/delaybridge/config"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/egress"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/api"
	"github.com/delaybridge/delaybridge/httpapi/ops"
	"github.com/delaybridge/delaybridge/ingress"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/connect"
	"github.com/delaybridge/delaybridge/internal/events"
	"github.com/delaybridge/delaybridge/internal/failpoint"
	"github.com/delaybridge/delaybridge/internal/fleetstats"
)

// Bridge is one delaybridge replica in this process. Create it with New; Run it once.
type Bridge struct {
	cfg    config.Config
	logger *slog.Logger
	opt    options
}

// Option adjusts New.
type Option func(*Bridge)

// WithLogger sets the logger (default: NewLogger(cfg, os.Stderr), JSON or text as
// BRIDGE_LOG_FORMAT says).
func WithLogger(l *slog.Logger) Option { return func(b *Bridge) { b.logger = l } }

// WithTracer sets the tracer of the ingress and egress spans (default: none).
func WithTracer(t trace.Tracer) Option { return func(b *Bridge) { b.opt.tracer = t } }

// WithClock sets the local clock of receipt times and scheduling waits (default
// time.Now). Due times are always judged on the Redis server's clock.
func WithClock(now func() time.Time) Option { return func(b *Bridge) { b.opt.now = now } }

// WithListeners hands over already-open listeners for BRIDGE_HTTP_ADDR (ops) and
// BRIDGE_API_ADDR (api; nil: opened from the address, or none when it is empty). Run
// serves and closes them.
func WithListeners(ops, api net.Listener) Option {
	return func(b *Bridge) { b.opt.ops, b.opt.api = ops, api }
}

// WithReady sets a function Run calls once the bridge consumes every source and has
// joined the fleet (as /readyz reports), from a goroutine of its own.
func WithReady(f func()) Option { return func(b *Bridge) { b.opt.ready = f } }

// WithVersion sets the version the start-up line names (default "dev").
func WithVersion(v string) Option { return func(b *Bridge) { b.opt.version = v } }

// New checks cfg as `bridge run` does (config.Config.ValidateForRun: a broker, the
// listen addresses, ...) and returns a Bridge. It opens nothing: Run does.
func New(cfg config.Config, opts ...Option) (*Bridge, error) {
	if err := cfg.ValidateForRun(); err != nil {
		return nil, fmt.Errorf("configuration:\n%w", err)
	}
	b := &Bridge{cfg: cfg, opt: options{version: "dev"}}
	for _, o := range opts {
		o(b)
	}
	if b.logger == nil {
		b.logger = NewLogger(cfg, os.Stderr)
	}
	if b.opt.now == nil {
		b.opt.now = time.Now
	}
	return b, nil
}

// Run runs the bridge until ctx is cancelled, then shuts down in the order shutdown
// lists and returns nil after a clean drain (bounded by BRIDGE_SHUTDOWN_TIMEOUT). It
// opens the HTTP listeners first (a taken port fails it at once), then Redis and the
// brokers; it waits and retries while Redis or a broker is unreachable, and fails on
// what retrying cannot fix (refused credentials, a missing stream, a shard-count
// mismatch). Call it once.
func (b *Bridge) Run(ctx context.Context) error {
	return nameVariables(serve(ctx, b.cfg, b.logger, b.opt))
}

// OpenListeners opens the HTTP listeners of cfg (BRIDGE_HTTP_ADDR, and BRIDGE_API_ADDR
// unless empty) for WithListeners, for a program that needs their addresses before Run
// (a port 0 is chosen by the system). On error nothing stays open.
func OpenListeners(cfg config.Config) (ops, api net.Listener, err error) {
	o, err := openListeners(cfg, options{})
	return o.ops, o.api, err
}

// options are what the Options set for serve; nil fields are opened or defaulted.
type options struct {
	ops, api net.Listener
	// ready, if set, is called once the bridge consumes and delivers (whenReady).
	ready func()
	// tracer makes the ingress and egress spans; nil: none.
	tracer trace.Tracer
	// now is the local clock injected into ingress, egress and the message API
	// (internal/clock: shifted only in failpoints builds).
	now     func() time.Time
	version string
}

// openListeners opens the HTTP listeners that o does not hold yet (BRIDGE_HTTP_ADDR, and
// BRIDGE_API_ADDR unless empty), before anything else starts, so that a taken port stops
// the start at once.
func openListeners(cfg config.Config, o options) (options, error) {
	var err error
	if o.ops == nil {
		if o.ops, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return o, fmt.Errorf("BRIDGE_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
		}
	}
	if o.api == nil && cfg.APIAddr != "" {
		if o.api, err = net.Listen("tcp", cfg.APIAddr); err != nil {
			o.ops.Close()
			o.ops = nil
			return o, fmt.Errorf("BRIDGE_API_ADDR %s: %w", cfg.APIAddr, err)
		}
	}
	return o, nil
}

// close closes the listeners (the HTTP servers close them too when they stop: a second
// close does nothing).
func (o options) close() {
	for _, ln := range []net.Listener{o.ops, o.api} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// serve runs the bridge until ctx is cancelled, then shuts down in the order [shutdown]
// lists. It returns nil after a clean drain.
func serve(ctx context.Context, cfg config.Config, logger *slog.Logger, ls options) (err error) {
	logger.Info("delaybridge starting", "version", ls.version, "shards", cfg.Store.Shards, "prefix", cfg.Store.KeyPrefix)
	// The ports first: a second bridge on a taken port stops here, before it joins a
	// consumer group or the fleet.
	if ls, err = openListeners(cfg, ls); err != nil {
		return err
	}
	defer ls.close()
	rdb, err := connect.RedisClient(cfg.Redis.Connect(), logger)
	if err != nil {
		return err
	}
	defer routeRedisLog(logger, rdb)() // after shutdown (deferred next) closed rdb
	var sides []*brokerSide
	defer func() { shutdown(sides, rdb) }()
	store, err := delaystore.New(rdb, cfg.StoreConfig(), delaystore.WithLogger(logger.With("component", "delaystore")))
	if err != nil {
		return fmt.Errorf("delay store: %w", err)
	}
	b, err := newWatch(rdb, store, logger)
	if err != nil {
		return err
	}
	if sides, err = openSides(ctx, cfg, logger); err != nil {
		return err
	}
	if err := b.assemble(cfg, store, sides, logger, ls); err != nil {
		return err
	}
	return b.run(ctx, cfg, store, logger, ls)
}

// shutdown closes what serve opened, once ingress, egress and the HTTP servers have
// returned (ctx cancelled: ingress stopped consuming and left its unparked messages
// unacked for redelivery; egress finished the batches in flight within
// BRIDGE_SHUTDOWN_TIMEOUT and left the fleet; the listeners closed). In this order:
//
//  1. the broker sides, the last opened first (Kafka, then NATS), each one's subscriber
//     (a Kafka member leaves its group), then its publisher (flushes), then its
//     connection (NATS drains);
//  2. Redis, last: everything above may still write to it until it returns.
func shutdown(sides []*brokerSide, rdb io.Closer) {
	for i := len(sides) - 1; i >= 0; i-- {
		sides[i].close()
	}
	_ = rdb.Close()
}

// assembly is what serve assembles: the metrics and Redis watch, then ingress, egress and
// the message API over the broker sides.
type assembly struct {
	reg        *prometheus.Registry
	countsReg  *prometheus.Registry // ingress's and egress's metrics only: what b.fleet gathers
	inMetrics  *ingress.Metrics
	outMetrics *egress.Metrics
	redisUp    *monitor.Redis
	dataset    *monitor.DatasetWatch
	fleet      *fleetstats.Publisher // this replica's counts into the fleet's buckets
	storeReady atomic.Bool
	checks     []ops.Check

	in    *ingress.Ingress
	out   *egress.Egress
	admin *admin.Admin // the operator's side of the store: the API's lists, bulk changes, audit log
	api   http.Handler // nil: no message API
	// events is this replica's live events (GET /v1/events); relay shares them with the
	// other replicas' streams while any has one.
	events *events.Hub
	relay  *events.Relay
	ops    http.Handler
	live   string // the brokers, for the "running" line
}

// newWatch registers the process, ingress, egress and store metrics and the Redis
// monitor, and the readiness check of Redis.
func newWatch(rdb redis.UniversalClient, store *delaystore.Store, logger *slog.Logger) (*assembly, error) {
	b := &assembly{reg: prometheus.NewRegistry(), countsReg: prometheus.NewRegistry()}
	b.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var err error
	counts := teeRegisterer{b.reg, b.countsReg}
	if b.inMetrics, err = ingress.NewMetrics(counts); err != nil {
		return nil, err
	}
	if b.outMetrics, err = egress.NewMetrics(counts); err != nil {
		return nil, err
	}
	if b.redisUp, err = monitor.NewRedis(rdb, b.reg, logger, store.MemoryFull); err != nil {
		return nil, err
	}
	if err := monitor.RegisterScriptTimer(b.reg, rdb, store); err != nil {
		return nil, err
	}
	if err := monitor.RegisterWaitShortfalls(b.reg, store); err != nil {
		return nil, err
	}
	if b.dataset, err = monitor.NewDatasetWatch(store, logger, b.reg); err != nil {
		return nil, err
	}
	b.checks = []ops.Check{{Name: "redis", Probe: b.redisReady, Note: func() string {
		// Ready all the same: a readiness failure would take the application's pod out of
		// service, and a full Redis is the store's problem, not the pod's (docs/guarantees.md, "Back-pressure, not loss").
		if b.redisUp.Full() {
			return monitor.FullNote
		}
		return ""
	}}}
	return b, nil
}

// redisReady is the readiness of Redis: the monitor's last PING (no Redis round trip per
// probe) and the store initialised.
func (b *assembly) redisReady(context.Context) error {
	if err := b.redisUp.Err(); err != nil {
		return err
	}
	if !b.storeReady.Load() {
		return errors.New("delay store not initialised yet")
	}
	return nil
}

// assemble builds ingress, egress, the message API and the ops endpoints over the
// broker sides, from the components' own configurations plus what only the assembly
// knows (targets, size limits, the dead-letter subject, the clock, the tracer).
func (b *assembly) assemble(cfg config.Config, store *delaystore.Store, sides []*brokerSide, logger *slog.Logger, ls options) error {
	publishers := map[string]message.Publisher{}
	var sources []ingress.Source
	var names []string
	natsMaxPayload := func() int64 { return 0 } // 0 (unknown) without NATS
	deadLetters := map[string]api.DeadLetters{}
	for _, sd := range sides {
		deadLetters[sd.name] = sd.deadLetters
		publishers[sd.name] = sd.publisher
		sources = append(sources, sd.sources...)
		names = append(names, sd.name)
		b.checks = append(b.checks, sd.check)
		if sd.maxPayload != nil {
			natsMaxPayload = sd.maxPayload
		}
	}
	b.live = strings.Join(names, ",")
	rules := cfg.Ingress // the BRIDGE_* limits ingress owns; then what the assembly knows
	rules.Targets = targetPolicy(cfg)
	rules.Limits = brokerLimits(natsMaxPayload, kafkaRecordLimit(cfg.Kafka.MaxMessageBytes))
	lookalikes := intake.NewLookalikes(logger, b.inMetrics, ls.now) // brokers' and API's
	var err error
	b.in, err = ingress.New(ingress.Config{Rules: rules, DLQSubject: cfg.DLQSubject, Tracer: ls.tracer, Now: ls.now, Lookalikes: lookalikes},
		store, sources, publishers, logger, b.inMetrics)
	if err != nil {
		return err
	}
	ec := cfg.Egress // the BRIDGE_* variables egress owns; then what the assembly decides
	ec.DLQSubject, ec.DrainTimeout, ec.Lease = cfg.DLQSubject, cfg.ShutdownTimeout, cfg.Store.Lease
	ec.Tracer, ec.Now, ec.ClaimAll = ls.tracer, ls.now, failpoint.ClaimAll()
	ec.MaxDelay = cfg.Ingress.MaxDelay
	b.events = events.NewHub(ls.now)
	b.relay = events.NewRelay(b.events, store, 0, logger)
	ec.Events = b.events
	if b.out, err = egress.New(ec, store, publishers, logger, b.outMetrics); err != nil {
		return err
	}
	b.out.HearTails(b.relay.Heard) // the relays' announcements arrive with egress's wake-ups
	// The store gauges cover the shards this replica owns.
	b.reg.MustRegister(monitor.NewStoreCollector(store, b.out.Owned, b.redisUp.Err))
	b.admin = admin.New(store, admin.WithAudit(cfg.Audit))
	if len(store.QuotaRules()) > 0 {
		b.reg.MustRegister(monitor.NewQuotaCollector(store, b.admin))
	}
	b.checks = append(b.checks,
		ops.Check{Name: "ingress", Probe: func(context.Context) error { return b.in.Subscribed() }},
		ops.Check{Name: "egress", Probe: func(context.Context) error { return b.out.Joined() }})
	b.fleet = fleetstats.New(fleetstats.Config{Now: ls.now}, b.countsReg, b.admin, logger)
	b.ops = ops.New(b.checks, b.reg)
	if cfg.Pprof {
		b.ops = ops.NewWithPprof(b.checks, b.reg)
	}
	if cfg.APIAddr != "" || ls.api != nil {
		b.api = api.New(api.Config{Rules: rules, DefaultBroker: names[0], Token: cfg.APIToken, Hosts: cfg.APIHosts,
			Metrics: b.inMetrics, MaxInflightBytes: cfg.APIMaxInflightBytes, Now: ls.now,
			Gatherer: b.reg, RedisErr: b.redisUp.Err, Lookalikes: lookalikes, DeadLetters: deadLetters, Events: b.events}, store, b.admin, logger)
	}
	return nil
}

// run serves until ctx is cancelled: the HTTP listeners and the Redis monitor at once;
// ingress, egress and the dataset watch once the store is initialised. It returns when
// all of them have.
func (b *assembly) run(ctx context.Context, cfg config.Config, store *delaystore.Store, logger *slog.Logger, ls options) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return serveHTTP(gctx, ls.ops, cfg.HTTPAddr, b.ops, httpapi.ServerConfig{IdleTimeout: cfg.HTTPIdleTimeout}, logger)
	})
	g.Go(func() error { return b.redisUp.Run(gctx) })
	g.Go(func() error {
		<-gctx.Done()
		b.events.Close() // live event streams end, so the API's graceful shutdown need not wait for them
		return nil
	})
	if b.api != nil {
		apiServer := httpapi.ServerConfig{IdleTimeout: cfg.HTTPIdleTimeout, MaxConns: cfg.APIMaxConns}
		g.Go(func() error { return serveHTTP(gctx, ls.api, cfg.APIAddr, b.api, apiServer, logger) })
	}
	g.Go(func() error {
		if err := initStore(gctx, store, logger); err != nil || gctx.Err() != nil {
			return err // stopped before Redis answered: nothing ran
		}
		b.storeReady.Store(true)
		// The cursor key only serves the message API's pages: until it is read (a full
		// Redis cannot create it) cursors are refused, delivery does not need it.
		if err := b.admin.Init(gctx); err != nil && gctx.Err() == nil {
			logger.Warn("cursor key not loaded: the message API refuses cursors until it is", "err", err)
		}
		w, wctx := errgroup.WithContext(gctx)
		w.Go(func() error { return b.in.Run(wctx) })
		w.Go(func() error { return b.out.Run(wctx) })
		w.Go(func() error { return b.dataset.Run(wctx) })
		w.Go(func() error { return b.fleet.Run(wctx) })
		w.Go(func() error { return b.relay.Run(wctx) })
		logger.Info("delaybridge running", "brokers", b.live, "http", cfg.HTTPAddr, "api", cfg.APIAddr)
		w.Go(func() error { b.whenReady(wctx, ls.ready); return nil })
		err := w.Wait()
		// Ingress and egress stopped: their last counts join the fleet's (bounded, as Redis
		// may be gone).
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = b.fleet.Flush(fctx)
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}
	logger.Info("delaybridge stopped")
	return nil
}

// whenReady calls ready once ingress consumes every source and egress has joined the
// fleet (what /readyz waits for besides Redis), or never when ctx ends first.
func (b *assembly) whenReady(ctx context.Context, ready func()) {
	if ready == nil {
		return
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for b.in.Subscribed() != nil || b.out.Joined() != nil {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	ready()
}

// serveHTTP serves h on ln, or on addr when ln is nil.
func serveHTTP(ctx context.Context, ln net.Listener, addr string, h http.Handler, sc httpapi.ServerConfig, logger *slog.Logger) error {
	if ln != nil {
		return httpapi.ServeListener(ctx, ln, h, sc, logger)
	}
	return httpapi.Serve(ctx, addr, h, sc, logger)
}

// initStore records or checks the shard count, retrying while Redis is unreachable (every
// failure logged at Warn). A shard-count mismatch, an evicting maxmemory-policy and a
// master with fewer replicas than BRIDGE_REDIS_MIN_REPLICAS are fatal, and so are a
// missing database and a refused user (with a hint).
func initStore(ctx context.Context, store *delaystore.Store, logger *slog.Logger) error {
	const minWait = 200 * time.Millisecond
	err := backoff.Retry(ctx, backoff.Policy{Min: minWait, Max: 5 * time.Second, Log: logger,
		Failed: "redis not ready; retrying", WaitKey: "in", Every: minWait}, // tries are minWait apart: each failure is a Warn
		store.Init, initFatal)
	switch {
	case err == nil || ctx.Err() != nil && !initFatal(err):
		return nil
	case connect.IsNoDBError(err):
		return fmt.Errorf("redis has no such database (check the /<db> of BRIDGE_REDIS_URL; a Redis has 16 unless its databases setting says more): %w", err)
	case connect.IsAuthError(err):
		return fmt.Errorf("redis refused the bridge's user (check BRIDGE_REDIS_USERNAME, BRIDGE_REDIS_PASSWORD and the ACL in docs/operating.md, Security): %w", err)
	}
	return err
}

// initFatal reports whether an error of Store.Init ends initStore's retries.
func initFatal(err error) bool {
	return errors.Is(err, delaystore.ErrShardMismatch) || errors.Is(err, delaystore.ErrEvictionPolicy) ||
		errors.Is(err, delaystore.ErrTooFewReplicas) || connect.IsNoDBError(err) || connect.IsAuthError(err)
}
