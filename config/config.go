package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/delaybridge/delaybridge/delaystore"
)

// Prefix starts every variable of the bridge.
const Prefix = "BRIDGE_"

// DefaultAPIAddr is the default of BRIDGE_API_ADDR (kept equal to the struct tag by a test).
const DefaultAPIAddr = "127.0.0.1:8081"

// Config is the whole configuration of the bridge, one field per BRIDGE_* variable (SPEC
// section 4, plus the extensions BRIDGE_SHUTDOWN_TIMEOUT and BRIDGE_MAX_ATTEMPTS). Build it
// with [Load]. The struct tags are the single source of truth for names, defaults and
// documentation ([Variables]).
//
// Go field names that can fail to parse (non-string fields) are unique across the nested
// structs, so that parse errors, which name Go fields, map back to one variable.
type Config struct {
	// Redis selects the Redis deployment.
	Redis Redis
	// Store configures the delay store: BRIDGE_KEY_PREFIX, BRIDGE_SHARDS, BRIDGE_LEASE.
	Store delaystore.Config
	// NATS configures the NATS broker; off when NATS.URL is empty.
	NATS NATS
	// Kafka configures the Kafka broker; off when Kafka.Brokers is empty.
	Kafka Kafka

	// CancelSubject is the cancel subject (NATS) and topic (Kafka).
	CancelSubject string `env:"CANCEL_SUBJECT" envDefault:"delay.cancel" envDoc:"cancel subject/topic (a message with x-delay-id removes that pending message)"`
	// DLQSubject is the dead-letter subject (NATS) and topic (Kafka).
	DLQSubject string `env:"DLQ_SUBJECT" envDefault:"delay.dlq" envDoc:"dead-letter subject/topic of invalid and undeliverable messages"`
	// TargetAllow are the glob patterns of allowed targets ("*" matches any run of
	// characters, dots included; a pattern with ":" matches "broker:name"). Items are
	// trimmed; empty items are dropped.
	TargetAllow []string `env:"TARGET_ALLOW" envDefault:"*" envDoc:"comma-separated glob patterns of allowed targets (* matches dots too; nats:... / kafka:... match one broker)"`
	// MaxDelay is the longest accepted delay; it bounds x-deliver-at too.
	MaxDelay time.Duration `env:"MAX_DELAY" envDefault:"8760h" envDoc:"longest accepted delay (also bounds x-deliver-at), at most 100 years"`
	// MaxPayload is the largest accepted payload in bytes.
	MaxPayload int `env:"MAX_PAYLOAD" envDefault:"1048576" envDoc:"largest accepted payload, bytes"`
	// HTTPAddr is the listen address of /healthz, /readyz and /metrics.
	HTTPAddr string `env:"HTTP_ADDR" envDefault:":8080" envDoc:"listen address of /healthz, /readyz, /metrics"`
	// APIAddr is the listen address of the message API; "" turns the API off (an empty
	// BRIDGE_API_ADDR does that, unlike other variables, where empty means the default).
	APIAddr string `env:"API_ADDR" envDefault:"127.0.0.1:8081" envDoc:"listen address of the message API; empty turns it off"`
	// APIToken is the bearer token the message API requires when non-empty. Secret: never
	// printed ([Config.Redacted]).
	APIToken string `env:"API_TOKEN" envDoc:"bearer token the message API requires when set (secret)"`
	// LogLevel is "debug", "info", "warn" or "error" (given in any case, stored lower case).
	LogLevel string `env:"LOG_LEVEL" envDefault:"info" envDoc:"debug, info, warn or error"`
	// LogFormat is "json" or "text" (given in any case, stored lower case).
	LogFormat string `env:"LOG_FORMAT" envDefault:"json" envDoc:"json or text"`
	// ShutdownTimeout bounds the drain at shutdown (extension, not in SPEC).
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"25s" envDoc:"bound on the drain at shutdown (extension)"`
	// MaxAttempts is how many publish attempts egress makes before it dead-letters a due
	// message (extension, not in SPEC).
	MaxAttempts int `env:"MAX_ATTEMPTS" envDefault:"10" envDoc:"egress publish attempts before a message is dead-lettered (extension)"`
	// Pprof serves Go's net/http/pprof profiles under /debug/pprof/ on HTTPAddr
	// (extension, not in SPEC). Off by default: profiles reveal internals.
	Pprof bool `env:"PPROF" envDefault:"false" envDoc:"serve Go profiles under /debug/pprof/ on BRIDGE_HTTP_ADDR (extension)"`
}

// Redis selects standalone Redis (URL) or Redis Cluster (ClusterAddrs).
type Redis struct {
	// URL is a standalone Redis: redis:// or rediss:// (TLS), user and password in the URL
	// for ACL, the database as the path. Secret in part (the password). Empty when
	// ClusterAddrs is set: the cluster wins over the default URL, and setting both
	// variables is an error.
	URL string `env:"REDIS_URL" envDefault:"redis://127.0.0.1:6379/0" envDoc:"standalone Redis URL: redis:// or rediss:// (TLS), user:password@ for ACL, /db"`
	// ClusterAddrs are Redis Cluster seed addresses (host:port); when set, the bridge uses
	// Redis Cluster. Items are trimmed; empty items are dropped.
	ClusterAddrs []string `env:"REDIS_CLUSTER_ADDRS" envDoc:"comma-separated host:port seeds: use Redis Cluster (do not set BRIDGE_REDIS_URL too)"`
}

// Cluster reports whether Redis Cluster is configured.
func (r Redis) Cluster() bool { return len(r.ClusterAddrs) > 0 }

// NATS configures the NATS side.
type NATS struct {
	// URL is the NATS server list, comma-separated URLs as nats.Connect takes it
	// (nats://, tls://, ws://, wss://, or host:port). Empty: NATS is off. It may carry
	// credentials (user:password@ or token@): never printed ([Config.Redacted]).
	URL string `env:"NATS_URL" envDoc:"NATS servers, comma-separated URLs; empty turns NATS off"`
	// Subject is the ingress subject (wildcards allowed).
	Subject string `env:"NATS_SUBJECT" envDefault:"delay.in" envDoc:"ingress subject"`
	// Queue is the queue group of the core subscriptions, so replicas share the work.
	Queue string `env:"NATS_QUEUE" envDefault:"delaybridge" envDoc:"queue group of the core subscription"`
	// Stream, when set, makes the bridge consume the ingress subject through this
	// JetStream stream (which must exist) instead of a core subscription.
	Stream string `env:"NATS_STREAM" envDoc:"consume the ingress subject through this JetStream stream; empty: core NATS"`
	// Consumer is the durable pull consumer on Stream.
	Consumer string `env:"NATS_CONSUMER" envDefault:"delaybridge" envDoc:"durable consumer name"`
	// AckWait is how long JetStream waits for the bridge's ack before redelivering a
	// message of the ingress stream (extension, not in SPEC).
	AckWait time.Duration `env:"NATS_ACK_WAIT" envDefault:"30s" envDoc:"JetStream redelivery delay of unacked ingress messages (extension)"`
	// MaxProgress bounds how long an ingress message the bridge is still working on (its
	// park blocked on a slow or unreachable Redis) is kept from redelivery by in-progress
	// reports every AckWait/2: 0 means 5 x AckWait, at least 1m; negative turns the
	// reports off (extension, not in SPEC).
	MaxProgress time.Duration `env:"NATS_MAX_PROGRESS" envDefault:"0s" envDoc:"how long JetStream is told an ingress message is still in progress while its park waits for Redis; 0: 5 x BRIDGE_NATS_ACK_WAIT, at least 1m; negative: off (extension)"`
}

// Kafka configures the Kafka side.
type Kafka struct {
	// Brokers are the bootstrap brokers (host:port). Empty: Kafka is off. Items are
	// trimmed; empty items are dropped.
	Brokers []string `env:"KAFKA_BROKERS" envDoc:"comma-separated host:port bootstrap brokers; empty turns Kafka off"`
	// Topic is the ingress topic.
	Topic string `env:"KAFKA_TOPIC" envDefault:"delay.in" envDoc:"ingress topic"`
	// Group is the consumer group.
	Group string `env:"KAFKA_GROUP" envDefault:"delaybridge" envDoc:"consumer group"`
}

// storeDocs documents the fields of delaystore.Config, whose tags carry no envDoc.
var storeDocs = map[string]string{
	"KEY_PREFIX": "namespace of every Redis key",
	"SHARDS":     "shards of the delay store, 1-4096; must be equal on all replicas (checked)",
	"LEASE":      "how long a claimed message may stay unconfirmed before another replica may take it",
}

// VarError is one configuration problem, about one variable. Load and ValidateForRun
// return every problem at once, joined (errors.Join): one line per problem; use
// errors.As on the parts to inspect them.
type VarError struct {
	// Var is the variable, e.g. "BRIDGE_SHARDS".
	Var string
	// Problem says what is wrong; it never contains a secret.
	Problem string
}

func (e *VarError) Error() string { return e.Var + ": " + e.Problem }

// EnvMap turns os.Environ()-style "KEY=value" entries into a map. Entries without "=" are
// skipped; when a key repeats, the first entry wins (as os.Getenv on Unix).
func EnvMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, dup := m[k]; !dup {
			m[k] = v
		}
	}
	return m
}

// Load reads the configuration from environ (never from the process environment; pass
// EnvMap(os.Environ())), applies SPEC's defaults and validates every value. An unset or
// empty variable takes its default, except BRIDGE_API_ADDR, where empty turns the API off.
// Values are not trimmed, except the items of comma-separated lists.
//
// On failure it returns the zero Config and every problem at once: an errors.Join of
// *VarError, one line each, naming the variable. Brokers are not required here (tool
// commands need none); see [Config.ValidateForRun].
func Load(environ map[string]string) (Config, error) {
	// Only BRIDGE_<something> keys: a non-nil map, so the parser never falls back to the
	// process environment, and no bare "BRIDGE_" key, which would address the nested
	// structs themselves.
	vars := make(map[string]string)
	for k, v := range environ {
		if strings.HasPrefix(k, Prefix) && len(k) > len(Prefix) {
			vars[k] = v
		}
	}
	cfg, err := env.ParseAsWithOptions[Config](env.Options{Environment: vars, Prefix: Prefix})
	var problems []error
	failed := map[string]bool{}
	if err != nil {
		var agg env.AggregateError
		if !errors.As(err, &agg) {
			return Config{}, fmt.Errorf("parse environment: %w", err)
		}
		for _, e := range agg.Errors {
			ve := parseProblem(e, vars)
			failed[ve.Var] = true
			problems = append(problems, ve)
		}
	}
	cfg.normalize(vars)
	for _, ve := range cfg.validate(vars) {
		if !failed[ve.Var] {
			problems = append(problems, ve)
		}
	}
	if len(problems) > 0 {
		return Config{}, errors.Join(problems...)
	}
	return cfg, nil
}

// normalize trims list items, applies the empty-API-address rule, lower-cases the log
// settings and lets the Redis cluster win over the default URL.
func (c *Config) normalize(vars map[string]string) {
	c.Redis.ClusterAddrs = trimList(c.Redis.ClusterAddrs)
	c.Kafka.Brokers = trimList(c.Kafka.Brokers)
	c.TargetAllow = trimList(c.TargetAllow)
	if v, ok := vars[Prefix+"API_ADDR"]; ok && strings.TrimSpace(v) == "" {
		c.APIAddr = ""
	}
	c.LogLevel = strings.ToLower(c.LogLevel)
	c.LogFormat = strings.ToLower(c.LogFormat)
	if c.Redis.Cluster() && vars[Prefix+"REDIS_URL"] == "" {
		c.Redis.URL = ""
	}
}

// trimList trims each item and drops empty ones; nil when nothing is left.
func trimList(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Brokers returns the configured brokers, "nats" and/or "kafka", in that order.
func (c Config) Brokers() []string {
	var out []string
	if c.NATS.URL != "" {
		out = append(out, "nats")
	}
	if len(c.Kafka.Brokers) > 0 {
		out = append(out, "kafka")
	}
	return out
}

// ValidateForRun checks what `bridge run` needs beyond [Load]: at least one broker, and
// no JetStream stream without NATS. Problems are joined *VarError, as from Load.
func (c Config) ValidateForRun() error {
	var problems []error
	if len(c.Brokers()) == 0 {
		problems = append(problems, &VarError{Prefix + "NATS_URL", "no broker configured: set BRIDGE_NATS_URL and/or BRIDGE_KAFKA_BROKERS"})
	}
	if c.NATS.Stream != "" && c.NATS.URL == "" {
		problems = append(problems, &VarError{Prefix + "NATS_STREAM", "set, but NATS is off (BRIDGE_NATS_URL is empty)"})
	}
	return errors.Join(problems...)
}

// Level returns LogLevel as a slog.Level (Info for an unknown value, which Load rejects).
func (c Config) Level() slog.Level {
	switch c.LogLevel {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
