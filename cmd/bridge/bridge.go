package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/delaybridge/delaybridge/config"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/egress"
	"github.com/delaybridge/delaybridge/ingress"
	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/clock"
	"github.com/delaybridge/delaybridge/internal/failpoint"
	"github.com/delaybridge/delaybridge/internal/httpapi"
	"github.com/delaybridge/delaybridge/internal/httpapi/api"
	"github.com/delaybridge/delaybridge/internal/httpapi/ops"
	"github.com/delaybridge/delaybridge/internal/monitor"
	"github.com/delaybridge/delaybridge/internal/tracing"
)

// runBridge is `bridge run`: configuration from the environment, then serve.
func runBridge(ctx context.Context, environ []string, stderr io.Writer) error {
	cfg, err := config.Load(config.EnvMap(environ))
	if err == nil {
		err = cfg.ValidateForRun()
	}
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	logger := newLogger(cfg, stderr)
	if unknown := config.Unknown(config.EnvMap(environ)); len(unknown) > 0 {
		logger.Warn("unknown BRIDGE_ variables ignored (typo?)", "names", strings.Join(unknown, ","))
	}
	tp, shutdown, err := tracing.Setup(ctx, environ, version)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			logger.Warn("flushing trace spans", "err", err)
		}
	}()
	if tracing.Enabled(environ) {
		logger.Info("OpenTelemetry tracing on (OTLP over HTTP)")
	}
	env := config.EnvMap(environ)
	now, err := clock.Local(func(k string) string { return env[k] })
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	return serve(ctx, cfg, logger, listeners{tracer: tp.Tracer("github.com/delaybridge/delaybridge"), now: now})
}

// readableDurations writes durations as Go durations ("200ms"), not the JSON handler's
// nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// newLogger returns the bridge's logger (JSON, or text with BRIDGE_LOG_FORMAT=text) and
// routes go-redis's own messages into it (logging.go).
func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Level(), ReplaceAttr: readableDurations}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	l := slog.New(h)
	routeRedisLog(l)
	return l
}

// listeners lets `bridge dev` and tests hand over already-open listeners; nil fields are
// opened from the configured addresses.
type listeners struct {
	ops, api net.Listener
	// ready, if set, is called once the bridge consumes and delivers.
	ready func()
	// tracer makes the ingress and egress spans; nil: none.
	tracer trace.Tracer
	// now is the local clock injected into ingress, egress and the message API
	// (internal/clock: shifted only in failpoints builds); nil: time.Now.
	now func() time.Time
}

// openListeners opens the HTTP listeners that ls does not hold yet (BRIDGE_HTTP_ADDR, and
// BRIDGE_API_ADDR unless empty), before anything else starts, so that a taken port stops
// the start at once and `bridge dev` can print the addresses (a port 0 is chosen by the
// system).
func openListeners(cfg config.Config, ls listeners) (listeners, error) {
	var err error
	if ls.ops == nil {
		if ls.ops, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return ls, fmt.Errorf("BRIDGE_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
		}
	}
	if ls.api == nil && cfg.APIAddr != "" {
		if ls.api, err = net.Listen("tcp", cfg.APIAddr); err != nil {
			ls.ops.Close()
			return ls, fmt.Errorf("BRIDGE_API_ADDR %s: %w", cfg.APIAddr, err)
		}
	}
	return ls, nil
}

// close closes the listeners (the HTTP servers close them too when they stop: a second
// close does nothing).
func (ls listeners) close() {
	for _, ln := range []net.Listener{ls.ops, ls.api} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// serve runs the bridge until ctx is cancelled, then shuts down in the order [shutdown]
// lists. It returns nil after a clean drain.
func serve(ctx context.Context, cfg config.Config, logger *slog.Logger, ls listeners) (err error) {
	if err := cfg.ValidateForRun(); err != nil {
		return err
	}
	logger.Info("delaybridge starting", "version", version, "shards", cfg.Store.Shards, "prefix", cfg.Store.KeyPrefix)
	// The ports first: a second bridge on a taken port stops here, before it joins a
	// consumer group or the fleet.
	if ls, err = openListeners(cfg, ls); err != nil {
		return err
	}
	defer ls.close()
	if ls.now == nil {
		ls.now = time.Now
	}
	rdb, err := newRedisClient(cfg, logger)
	if err != nil {
		return err
	}
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

// bridge is what serve assembles: the metrics and Redis watch, then ingress, egress and
// the message API over the broker sides.
type bridge struct {
	reg        *prometheus.Registry
	inMetrics  *ingress.Metrics
	outMetrics *egress.Metrics
	redisUp    *monitor.Redis
	dataset    *monitor.DatasetWatch
	storeReady atomic.Bool
	checks     []ops.Check

	in   *ingress.Ingress
	out  *egress.Egress
	api  http.Handler // nil: no message API
	ops  http.Handler
	live string // the brokers, for the "running" line
}

// newWatch registers the process, ingress, egress and store metrics and the Redis
// monitor, and the readiness check of Redis.
func newWatch(rdb redis.UniversalClient, store *delaystore.Store, logger *slog.Logger) (*bridge, error) {
	b := &bridge{reg: prometheus.NewRegistry()}
	b.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var err error
	if b.inMetrics, err = ingress.NewMetrics(b.reg); err != nil {
		return nil, err
	}
	if b.outMetrics, err = egress.NewMetrics(b.reg); err != nil {
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
		// service, and a full Redis is the store's problem, not the pod's (README, Guarantees).
		if b.redisUp.Full() {
			return monitor.FullNote
		}
		return ""
	}}}
	return b, nil
}

// redisReady is the readiness of Redis: the monitor's last PING (no Redis round trip per
// probe) and the store initialised.
func (b *bridge) redisReady(context.Context) error {
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
func (b *bridge) assemble(cfg config.Config, store *delaystore.Store, sides []*brokerSide, logger *slog.Logger, ls listeners) error {
	publishers := map[string]message.Publisher{}
	var sources []ingress.Source
	var names []string
	natsMaxPayload := func() int64 { return 0 } // 0 (unknown) without NATS
	for _, sd := range sides {
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
	var err error
	b.in, err = ingress.New(ingress.Config{Rules: rules, DLQSubject: cfg.DLQSubject, Tracer: ls.tracer, Now: ls.now},
		store, sources, publishers, logger, b.inMetrics)
	if err != nil {
		return err
	}
	ec := cfg.Egress // the BRIDGE_* variables egress owns; then what the assembly decides
	ec.DLQSubject, ec.DrainTimeout, ec.Lease = cfg.DLQSubject, cfg.ShutdownTimeout, cfg.Store.Lease
	ec.Tracer, ec.Now, ec.ClaimAll = ls.tracer, ls.now, failpoint.ClaimAll()
	if b.out, err = egress.New(ec, store, publishers, logger, b.outMetrics); err != nil {
		return err
	}
	// The store gauges cover the shards this replica owns.
	b.reg.MustRegister(monitor.NewStoreCollector(store, b.out.Owned, b.redisUp.Err))
	b.checks = append(b.checks,
		ops.Check{Name: "ingress", Probe: func(context.Context) error { return b.in.Subscribed() }},
		ops.Check{Name: "egress", Probe: func(context.Context) error { return b.out.Joined() }})
	b.ops = ops.New(b.checks, b.reg)
	if cfg.Pprof {
		b.ops = ops.NewWithPprof(b.checks, b.reg)
	}
	if cfg.APIAddr != "" || ls.api != nil {
		b.api = api.New(api.Config{Rules: rules, DefaultBroker: names[0], Token: cfg.APIToken,
			Metrics: b.inMetrics, MaxInflightBytes: cfg.APIMaxInflightBytes, Now: ls.now}, store, logger)
	}
	return nil
}

// run serves until ctx is cancelled: the HTTP listeners and the Redis monitor at once;
// ingress, egress and the dataset watch once the store is initialised. It returns when
// all of them have.
func (b *bridge) run(ctx context.Context, cfg config.Config, store *delaystore.Store, logger *slog.Logger, ls listeners) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return serveHTTP(gctx, ls.ops, cfg.HTTPAddr, b.ops, httpapi.ServerConfig{IdleTimeout: cfg.HTTPIdleTimeout}, logger)
	})
	g.Go(func() error { return b.redisUp.Run(gctx) })
	if b.api != nil {
		apiServer := httpapi.ServerConfig{IdleTimeout: cfg.HTTPIdleTimeout, MaxConns: cfg.APIMaxConns}
		g.Go(func() error { return serveHTTP(gctx, ls.api, cfg.APIAddr, b.api, apiServer, logger) })
	}
	g.Go(func() error {
		if err := initStore(gctx, store, logger); err != nil || gctx.Err() != nil {
			return err // stopped before Redis answered: nothing ran
		}
		b.storeReady.Store(true)
		w, wctx := errgroup.WithContext(gctx)
		w.Go(func() error { return b.in.Run(wctx) })
		w.Go(func() error { return b.out.Run(wctx) })
		w.Go(func() error { return b.dataset.Run(wctx) })
		logger.Info("delaybridge running", "brokers", b.live, "http", cfg.HTTPAddr, "api", cfg.APIAddr)
		if ls.ready != nil {
			ls.ready()
		}
		return w.Wait()
	})
	if err := g.Wait(); err != nil {
		return err
	}
	logger.Info("delaybridge stopped")
	return nil
}

func serveHTTP(ctx context.Context, ln net.Listener, addr string, h http.Handler, sc httpapi.ServerConfig, logger *slog.Logger) error {
	if ln != nil {
		return httpapi.ServeListener(ctx, ln, h, sc, logger)
	}
	return httpapi.Serve(ctx, addr, h, sc, logger)
}

// initStore records or checks the shard count, retrying while Redis is unreachable. A
// shard-count mismatch, an evicting maxmemory-policy and a master with fewer replicas than
// BRIDGE_REDIS_MIN_REPLICAS are fatal.
func initStore(ctx context.Context, store *delaystore.Store, logger *slog.Logger) error {
	wait := backoff.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := store.Init(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, delaystore.ErrShardMismatch) || errors.Is(err, delaystore.ErrEvictionPolicy) ||
			errors.Is(err, delaystore.ErrTooFewReplicas) {
			return err
		}
		if isRedisDBError(err) {
			return fmt.Errorf("redis has no such database (check the /<db> of BRIDGE_REDIS_URL; a Redis has 16 unless its databases setting says more): %w", err)
		}
		if isRedisAuthError(err) {
			return fmt.Errorf("redis refused the bridge's user (check BRIDGE_REDIS_USERNAME, BRIDGE_REDIS_PASSWORD and the ACL in the README): %w", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		d := wait.Next()
		logger.Warn("redis not ready; retrying", "err", err, "in", d)
		if !backoff.Sleep(ctx, d) {
			return nil
		}
	}
}
