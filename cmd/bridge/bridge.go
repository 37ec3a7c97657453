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
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/delaybridge/delaybridge/config"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/egress"
	"github.com/delaybridge/delaybridge/ingress"
	kafkabroker "github.com/delaybridge/delaybridge/internal/broker/kafka"
	natsbroker "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/clock"
	"github.com/delaybridge/delaybridge/internal/failpoint"
	"github.com/delaybridge/delaybridge/internal/httpapi"
	"github.com/delaybridge/delaybridge/internal/subject"
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

// newLogger returns the bridge's logger (JSON, or text with BRIDGE_LOG_FORMAT=text) and
// routes go-redis's own messages into it (logging.go).
func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Level()}
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

// serve runs the bridge until ctx is cancelled, then drains in order: ingress stops
// consuming, egress finishes the batches in flight, publishers flush, NATS drains, Redis
// closes. It returns nil after a clean drain.
func serve(ctx context.Context, cfg config.Config, logger *slog.Logger, ls listeners) (err error) {
	logger.Info("delaybridge starting", "version", version, "shards", cfg.Store.Shards, "prefix", cfg.Store.KeyPrefix)
	if ls.now == nil {
		ls.now = time.Now
	}
	rdb, err := newRedisClient(cfg, logger)
	if err != nil {
		return err
	}
	defer rdb.Close()
	store, err := delaystore.New(rdb, cfg.StoreConfig(), delaystore.WithLogger(logger.With("component", "delaystore")))
	if err != nil {
		return fmt.Errorf("delay store: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	inMetrics, err := ingress.NewMetrics(reg)
	if err != nil {
		return err
	}
	outMetrics, err := egress.NewMetrics(reg)
	if err != nil {
		return err
	}
	redisUp, err := newRedisMonitor(rdb, reg, logger, store.MemoryFull)
	if err != nil {
		return err
	}
	// The store gauges cover the shards this replica owns (egress, created below).
	var egressOwned atomic.Pointer[egress.Egress]
	owned := func() []int {
		if e := egressOwned.Load(); e != nil {
			return e.Owned()
		}
		return nil
	}
	reg.MustRegister(newStoreCollector(store, owned, redisUp.Err))
	if err := registerScriptTimer(reg, rdb, store); err != nil {
		return err
	}
	if err := registerWaitShortfalls(reg, store); err != nil {
		return err
	}
	dataset, err := newDatasetWatch(store, logger, reg)
	if err != nil {
		return err
	}

	var storeReady atomic.Bool
	checks := []httpapi.Check{{Name: "redis", Probe: func(context.Context) error {
		if err := redisUp.Err(); err != nil { // no Redis round trip per probe
			return err
		}
		if !storeReady.Load() {
			return errors.New("delay store not initialised yet")
		}
		return nil
	}, Note: func() string {
		// Ready all the same: a readiness failure would take the application's pod out of
		// service, and a full Redis is the store's problem, not the pod's (README, Guarantees).
		if redisUp.Full() {
			return redisFullNote
		}
		return ""
	}}}

	// natsMaxPayload is the NATS connection's max_payload, read per message (it changes
	// when the connection moves to a server with another limit); 0 (unknown) without NATS.
	natsMaxPayload := func() int64 { return 0 }
	publishers := map[string]message.Publisher{}
	var sources []ingress.Source
	defaultBroker := ""
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	if cfg.NATS.URL != "" {
		natsOpts, err := natsSecurity(cfg.NATS)
		if err != nil {
			return err
		}
		nc, err := natsbroker.Connect(ctx, cfg.NATS.URL, "delaybridge", logger, natsOpts...)
		if err != nil {
			return fmt.Errorf("nats: %w", err)
		}
		closers = append(closers, func() {
			if err := nc.Drain(); err != nil {
				nc.Close()
			}
		})
		natsMaxPayload = nc.MaxPayload
		if err := checkIngressStream(ctx, nc, cfg.NATS); err != nil {
			return err
		}
		pub, err := natsbroker.NewPublisher(nc, natsbroker.PublisherConfig{}, logger)
		if err != nil {
			return fmt.Errorf("nats publisher: %w", err)
		}
		closers = append(closers, func() { _ = pub.Close() })
		consumer := cfg.NATS.Consumer
		sub, err := natsbroker.NewSubscriber(nc, natsbroker.SubscriberConfig{
			Stream:      cfg.NATS.Stream,
			Queue:       cfg.NATS.Queue,
			AckWait:     cfg.NATS.AckWait,
			MaxProgress: cfg.NATS.MaxProgress,
			ConsumerName: func(topic string) string {
				if topic == cfg.NATS.Subject {
					return consumer
				}
				return consumer + "-cancel"
			},
		}, logger)
		if err != nil {
			return fmt.Errorf("nats subscriber: %w", err)
		}
		closers = append(closers, func() { _ = sub.Close() })
		publishers["nats"] = pub
		sources = append(sources,
			ingress.Source{Broker: "nats", Topic: cfg.NATS.Subject, Kind: ingress.Delayed, Subscriber: sub},
			ingress.Source{Broker: "nats", Topic: cfg.CancelSubject, Kind: ingress.Cancels, Subscriber: sub})
		defaultBroker = "nats"
		checks = append(checks, httpapi.Check{Name: "nats", Probe: func(context.Context) error {
			if s := nc.Status(); s != natsgo.CONNECTED {
				return fmt.Errorf("connection %s", s)
			}
			return nil
		}})
	}
	if len(cfg.Kafka.Brokers) > 0 {
		kafkaSec, err := kafkaSecurity(cfg.Kafka)
		if err != nil {
			return err
		}
		if err := checkKafkaAuth(ctx, cfg.Kafka.Brokers, kafkaSec); err != nil {
			return err
		}
		pub, err := kafkabroker.NewPublisher(kafkabroker.PublisherConfig{
			Brokers:  cfg.Kafka.Brokers,
			Security: kafkaSec,
			// As a Java producer: the broker's auto.create.topics.enable decides.
			AllowAutoTopicCreation: true,
			MaxRecordBytes:         kafkaRecordLimit(cfg.Kafka.MaxMessageBytes),
		}, logger)
		if err != nil {
			return fmt.Errorf("kafka publisher: %w", err)
		}
		closers = append(closers, func() { _ = pub.Close() })
		sub, err := kafkabroker.NewSubscriber(kafkabroker.SubscriberConfig{Brokers: cfg.Kafka.Brokers, GroupID: cfg.Kafka.Group, Security: kafkaSec}, logger)
		if err != nil {
			return fmt.Errorf("kafka subscriber: %w", err)
		}
		closers = append(closers, func() { _ = sub.Close() })
		publishers["kafka"] = pub
		sources = append(sources,
			ingress.Source{Broker: "kafka", Topic: cfg.Kafka.Topic, Kind: ingress.Delayed, Subscriber: sub},
			ingress.Source{Broker: "kafka", Topic: cfg.CancelSubject, Kind: ingress.Cancels, Subscriber: sub})
		if defaultBroker == "" {
			defaultBroker = "kafka"
		}
		brokers := cfg.Kafka.Brokers
		checks = append(checks, httpapi.Check{Name: "kafka", Probe: func(ctx context.Context) error {
			return kafkabroker.PingWith(ctx, brokers, kafkaSec)
		}})
	}
	if len(publishers) == 0 {
		return errors.New("no broker configured: set BRIDGE_NATS_URL and/or BRIDGE_KAFKA_BROKERS")
	}

	rules := cfg.Ingress // the BRIDGE_* limits ingress owns; then what the assembly knows
	rules.Targets = targetPolicy(cfg)
	rules.Limits = brokerLimits(natsMaxPayload, kafkaRecordLimit(cfg.Kafka.MaxMessageBytes))
	in, err := ingress.New(ingress.Config{Rules: rules, DLQSubject: cfg.DLQSubject, Tracer: ls.tracer, Now: ls.now}, store, sources, publishers, logger, inMetrics)
	if err != nil {
		return err
	}
	checks = append(checks, httpapi.Check{Name: "ingress", Probe: func(context.Context) error { return in.Subscribed() }})
	ec := cfg.Egress // the BRIDGE_* variables egress owns; then what the assembly decides
	ec.DLQSubject, ec.DrainTimeout, ec.Lease = cfg.DLQSubject, cfg.ShutdownTimeout, cfg.Store.Lease
	ec.Tracer, ec.Now, ec.ClaimAll = ls.tracer, ls.now, failpoint.ClaimAll()
	out, err := egress.New(ec, store, publishers, logger, outMetrics)
	if err != nil {
		return err
	}
	egressOwned.Store(out)
	checks = append(checks, httpapi.Check{Name: "egress", Probe: func(context.Context) error { return out.Joined() }})

	g, gctx := errgroup.WithContext(ctx)
	ops := httpapi.NewOps(checks, reg)
	if cfg.Pprof {
		ops = httpapi.NewOpsWithPprof(checks, reg)
	}
	opsServer := httpapi.ServerConfig{IdleTimeout: cfg.HTTPIdleTimeout}
	g.Go(func() error { return serveHTTP(gctx, ls.ops, cfg.HTTPAddr, ops, opsServer, logger) })
	g.Go(func() error { return redisUp.Run(gctx) })
	if cfg.APIAddr != "" || ls.api != nil {
		api := httpapi.NewAPI(httpapi.APIConfig{Rules: rules, DefaultBroker: defaultBroker, Token: cfg.APIToken,
			Metrics: inMetrics, MaxInflightBytes: cfg.APIMaxInflightBytes, Now: ls.now}, store, logger)
		apiServer := httpapi.ServerConfig{IdleTimeout: cfg.HTTPIdleTimeout, MaxConns: cfg.APIMaxConns}
		g.Go(func() error { return serveHTTP(gctx, ls.api, cfg.APIAddr, api, apiServer, logger) })
	}
	g.Go(func() error {
		if err := initStore(gctx, store, logger); err != nil {
			return err
		}
		storeReady.Store(true)
		w, wctx := errgroup.WithContext(gctx)
		w.Go(func() error { return in.Run(wctx) })
		w.Go(func() error { return out.Run(wctx) })
		w.Go(func() error { return dataset.Run(wctx) })
		logger.Info("delaybridge running", "brokers", strings.Join(cfg.Brokers(), ","),
			"http", cfg.HTTPAddr, "api", cfg.APIAddr)
		if ls.ready != nil {
			ls.ready()
		}
		return w.Wait()
	})
	err = g.Wait()
	if err != nil {
		return err
	}
	logger.Info("delaybridge stopped")
	return nil
}

// checkIngressStream: with BRIDGE_NATS_STREAM set, the stream must exist and capture the
// ingress subject (the bridge never creates or alters streams).
func checkIngressStream(ctx context.Context, nc *natsgo.Conn, cfg config.NATS) error {
	if cfg.Stream == "" {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := js.Stream(sctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("BRIDGE_NATS_STREAM: jetstream stream %q not found: create it (capturing %q); the bridge never creates streams", cfg.Stream, cfg.Subject)
	}
	if err != nil {
		return fmt.Errorf("BRIDGE_NATS_STREAM %q: %w", cfg.Stream, err)
	}
	for _, subj := range st.CachedInfo().Config.Subjects {
		if subject.Matches(subj, cfg.Subject) {
			return nil
		}
	}
	return fmt.Errorf("BRIDGE_NATS_STREAM: stream %q does not capture BRIDGE_NATS_SUBJECT %q (its subjects: %s)",
		cfg.Stream, cfg.Subject, strings.Join(st.CachedInfo().Config.Subjects, ", "))
}

func serveHTTP(ctx context.Context, ln net.Listener, addr string, h http.Handler, sc httpapi.ServerConfig, logger *slog.Logger) error {
	if ln != nil {
		return httpapi.ServeListener(ctx, ln, h, sc, logger)
	}
	return httpapi.Serve(ctx, addr, h, sc, logger)
}

// kafkaBatchOverhead is what a broker counts against message.max.bytes beyond the
// records kafka-go counts against its batch limit: the record batch header (61 bytes),
// rounded up.
const kafkaBatchOverhead = 128

// kafkaRecordLimit is the largest record the bridge sends to a Kafka broker whose
// message.max.bytes is maxMessageBytes (BRIDGE_KAFKA_MAX_MESSAGE_BYTES): the producer's
// batch limit and ingress's check, so that a full batch still fits the broker's limit.
func kafkaRecordLimit(maxMessageBytes int) int {
	return maxMessageBytes - kafkaBatchOverhead
}

// brokerLimits is ingress's view of the target brokers' size limits: NATS's
// max_payload as the connection knows it now, Kafka's BRIDGE_KAFKA_MAX_MESSAGE_BYTES.
func brokerLimits(natsMaxPayload func() int64, kafkaMax int) ingress.SizeLimits {
	return ingress.SizeLimitsFunc(func(broker string) int64 {
		switch broker {
		case ingress.BrokerNATS:
			return natsMaxPayload()
		case ingress.BrokerKafka:
			return int64(kafkaMax)
		}
		return 0
	})
}

// initStore records or checks the shard count, retrying while Redis is unreachable. A
// shard-count mismatch, an evicting maxmemory-policy and a master with fewer replicas than
// BRIDGE_REDIS_MIN_REPLICAS are fatal.
func initStore(ctx context.Context, store *delaystore.Store, logger *slog.Logger) error {
	wait := 200 * time.Millisecond
	for {
		err := store.Init(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, delaystore.ErrShardMismatch) || errors.Is(err, delaystore.ErrEvictionPolicy) ||
			errors.Is(err, delaystore.ErrTooFewReplicas) {
			return err
		}
		if isRedisAuthError(err) {
			return fmt.Errorf("redis refused the bridge's user (check BRIDGE_REDIS_USERNAME, BRIDGE_REDIS_PASSWORD and the ACL in the README): %w", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		logger.Warn("redis not ready; retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func targetPolicy(cfg config.Config) ingress.TargetPolicy {
	p := ingress.TargetPolicy{Brokers: map[string]bool{}, Allow: cfg.TargetAllow, Own: map[string][]string{}}
	if cfg.NATS.URL != "" {
		p.Brokers["nats"] = true
		p.Own["nats"] = []string{cfg.NATS.Subject, cfg.CancelSubject, cfg.DLQSubject}
	}
	if len(cfg.Kafka.Brokers) > 0 {
		p.Brokers["kafka"] = true
		p.Own["kafka"] = []string{cfg.Kafka.Topic, cfg.CancelSubject, cfg.DLQSubject}
	}
	return p
}
