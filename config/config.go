package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/egress"
	"github.com/delaybridge/delaybridge/ingress/intake"
	kafkabroker "github.com/delaybridge/delaybridge/internal/broker/kafka"
	natsbroker "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/connect"
)

// Prefix starts every variable of the bridge.
const Prefix = "BRIDGE_"

// DefaultAPIAddr is the default of BRIDGE_API_ADDR (kept equal to the struct tag by a test).
const DefaultAPIAddr = "127.0.0.1:8081"

// Config is the whole configuration of the bridge, one field per BRIDGE_* variable
// (docs/contract.md section 4, plus the extensions BRIDGE_SHUTDOWN_TIMEOUT and BRIDGE_MAX_ATTEMPTS). Build it
// with [Load]. The struct tags are the single source of truth for names, defaults and
// documentation ([Variables]).
//
// Go field names that can fail to parse (non-string fields) are unique across the nested
// structs, so that parse errors, which name Go fields, map back to one variable.
type Config struct {
	// Redis selects the Redis deployment.
	Redis Redis
	// Store configures the delay store: BRIDGE_KEY_PREFIX, BRIDGE_SHARDS, BRIDGE_LEASE,
	// BRIDGE_TOMBSTONE_TTL, BRIDGE_CANCEL_WINDOW, BRIDGE_REDIS_MIN_REPLICAS,
	// BRIDGE_REDIS_WAIT_TIMEOUT (the store
	// owns their defaults, documentation and checks).
	Store delaystore.Config
	// NATS configures the NATS broker; off when NATS.URL is empty (the NATS adapter owns
	// the BRIDGE_NATS_* variables).
	NATS NATS
	// Kafka configures the Kafka broker; off when Kafka.Brokers is empty (the Kafka
	// adapter owns the BRIDGE_KAFKA_* variables).
	Kafka Kafka
	// Ingress are the limits of incoming messages: BRIDGE_MAX_DELAY, BRIDGE_MAX_PAYLOAD,
	// BRIDGE_MAX_HEADERS, BRIDGE_MAX_HEADER_BYTES, BRIDGE_MAX_HOPS (ingress owns their
	// defaults, documentation and checks).
	Ingress intake.Rules
	// Egress configures delivery: BRIDGE_MAX_ATTEMPTS, BRIDGE_RETRY_BACKOFF,
	// BRIDGE_RETRY_BACKOFF_MAX, BRIDGE_TARGET_INFLIGHT, BRIDGE_OWNERSHIP_TTL (egress owns
	// their defaults, documentation and checks).
	Egress egress.Config
	// Audit bounds the audit log: BRIDGE_AUDIT_RETENTION, BRIDGE_AUDIT_MAX_ENTRIES (the
	// operator's side of the store, package admin, owns their defaults, documentation and
	// checks).
	Audit admin.AuditConfig

	// CancelSubject is the cancel subject (NATS) and topic (Kafka).
	CancelSubject string `env:"CANCEL_SUBJECT" envDefault:"delay.cancel" envDoc:"cancel subject/topic (a message with x-delay-id removes that pending message)"`
	// DLQSubject is the dead-letter subject (NATS) and topic (Kafka).
	DLQSubject string `env:"DLQ_SUBJECT" envDefault:"delay.dlq" envDoc:"dead-letter subject/topic of invalid and undeliverable messages"`
	// TargetAllow are the glob patterns of allowed targets ("*" matches any run of
	// characters, dots included; a pattern with ":" matches "broker:name"). Items are
	// trimmed; empty items are dropped.
	TargetAllow []string `env:"TARGET_ALLOW" envDefault:"*" envDoc:"comma-separated glob patterns of allowed targets (* matches dots too; nats:... / kafka:... match one broker)"`
	// HTTPAddr is the listen address of /healthz, /readyz and /metrics.
	HTTPAddr string `env:"HTTP_ADDR" envDefault:":8080" envDoc:"listen address of /healthz, /readyz, /metrics"`
	// APIAddr is the listen address of the message API; "" turns the API off (an empty
	// BRIDGE_API_ADDR does that, unlike other variables, where empty means the default).
	APIAddr string `env:"API_ADDR" envDefault:"127.0.0.1:8081" envDoc:"listen address of the message API; empty turns it off"`
	// APIMaxInflightBytes bounds the request-body bytes the message API holds at once
	// (extension, not in the contract); it is raised to one largest request when smaller.
	APIMaxInflightBytes int64 `env:"API_MAX_INFLIGHT_BYTES" envDefault:"33554432" envDoc:"request-body bytes the message API reads at once; beyond: 503 with Retry-After (extension)"`
	// APIMaxConns bounds the message API's open connections (extension, not in the contract).
	APIMaxConns int `env:"API_MAX_CONNS" envDefault:"256" envDoc:"most open connections of the message API; more wait to be accepted (extension)"`
	// HTTPIdleTimeout closes an idle keep-alive connection of either HTTP listener
	// (extension, not in the contract).
	HTTPIdleTimeout time.Duration `env:"HTTP_IDLE_TIMEOUT" envDefault:"1m" envDoc:"idle keep-alive connections of both HTTP listeners are closed after this (extension)"`
	// APIToken is the bearer token the message API requires when non-empty. Secret: never
	// printed ([Config.Redacted]).
	APIToken string `env:"API_TOKEN" envDoc:"bearer token the message API requires when set (secret)"`
	// APITokenFile names a file holding APIToken (trailing newline trimmed).
	APITokenFile string `env:"API_TOKEN_FILE" envDoc:"file holding BRIDGE_API_TOKEN"`
	// APIHosts are the DNS names, besides localhost, by which a browser may reach the
	// message API when APIToken is empty: a request whose Host is another name gets 403
	// host_not_allowed (DNS rebinding); IP addresses are always allowed, with any port.
	// Items are trimmed, empty items dropped; each is a host name without port or wildcard
	// (api.CheckHostName), matched in any case, a trailing dot ignored.
	APIHosts []string `env:"API_HOSTS" envDoc:"without BRIDGE_API_TOKEN: comma-separated host names besides localhost that a request's Host may name (no port, no wildcard); other names get 403 host_not_allowed (DNS rebinding); IP addresses always pass"`
	// LogLevel is "debug", "info", "warn" or "error" (given in any case, stored lower case).
	LogLevel string `env:"LOG_LEVEL" envDefault:"info" envDoc:"debug, info, warn or error"`
	// LogFormat is "json" or "text" (given in any case, stored lower case).
	LogFormat string `env:"LOG_FORMAT" envDefault:"json" envDoc:"json or text"`
	// ShutdownTimeout bounds the drain at shutdown (extension, not in the contract).
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"25s" envDoc:"bound on the drain at shutdown (extension)"`
	// Pprof serves Go's net/http/pprof profiles under /debug/pprof/ on HTTPAddr
	// (extension, not in the contract). Off by default: profiles reveal internals.
	Pprof bool `env:"PPROF" envDefault:"false" envDoc:"serve Go profiles under /debug/pprof/ on BRIDGE_HTTP_ADDR (extension)"`
}

// Redis selects the Redis deployment: standalone (URL), Sentinel (SentinelAddrs and
// SentinelMaster) or Cluster (ClusterAddrs). Exactly one is used: a Sentinel or Cluster
// setting wins over the default URL, and setting two of the three variables is an error.
type Redis struct {
	// URL is a standalone Redis: redis:// or rediss:// (TLS), user and password in the URL
	// for ACL, the database as the path. Secret in part (the password). Empty when
	// ClusterAddrs or SentinelAddrs is set.
	URL string `env:"REDIS_URL" envDefault:"redis://127.0.0.1:6379/0" envDoc:"standalone Redis URL: redis:// or rediss:// (TLS), user:password@ for ACL, /db"`
	// ClusterAddrs are Redis Cluster seed addresses (host:port); when set, the bridge uses
	// Redis Cluster. Items are trimmed; empty items are dropped.
	ClusterAddrs []string `env:"REDIS_CLUSTER_ADDRS" envDoc:"comma-separated host:port seeds: use Redis Cluster (do not set BRIDGE_REDIS_URL too)"`
	// SentinelAddrs are Redis Sentinel addresses (host:port); when set, the bridge asks
	// them for the primary of SentinelMaster and follows failovers. Items are trimmed;
	// empty items are dropped.
	SentinelAddrs []string `env:"REDIS_SENTINEL_ADDRS" envDoc:"comma-separated host:port of Redis Sentinels: use the primary they name (do not set BRIDGE_REDIS_URL too)"`
	// SentinelMaster is the master name the sentinels monitor; required with
	// SentinelAddrs.
	SentinelMaster string `env:"REDIS_SENTINEL_MASTER" envDoc:"master name monitored by the sentinels; required with BRIDGE_REDIS_SENTINEL_ADDRS"`
	// Username is the Redis ACL user, in every mode; it overrides the URL's.
	Username string `env:"REDIS_USERNAME" envDoc:"Redis ACL user (overrides the URL's; every mode)"`
	// Password is the password of Username (or of the default user), in every mode; it
	// overrides the URL's. Secret: never printed.
	Password string `env:"REDIS_PASSWORD" envDoc:"Redis password (overrides the URL's; every mode; secret)"`
	// PasswordFile names a file holding Password (trailing newline trimmed).
	PasswordFile string `env:"REDIS_PASSWORD_FILE" envDoc:"file holding BRIDGE_REDIS_PASSWORD (e.g. a mounted secret)"`
	// TLSCAFile is a PEM bundle of the CAs that sign the Redis server certificate; set,
	// it turns TLS on (as rediss:// does).
	TLSCAFile string `env:"REDIS_TLS_CA_FILE" envDoc:"PEM CA bundle for Redis TLS; turns TLS on (as rediss:// does)"`
	// TLSCertFile and TLSKeyFile are the client certificate and key for Redis mutual
	// TLS (both or neither); re-read at every connection (rotation).
	TLSCertFile string `env:"REDIS_TLS_CERT_FILE" envDoc:"PEM client certificate for Redis mutual TLS (with BRIDGE_REDIS_TLS_KEY_FILE)"`
	TLSKeyFile  string `env:"REDIS_TLS_KEY_FILE" envDoc:"PEM client key for Redis mutual TLS"`
}

// Cluster reports whether Redis Cluster is configured.
func (r Redis) Cluster() bool { return len(r.ClusterAddrs) > 0 }

// Sentinel reports whether Redis Sentinel is configured.
func (r Redis) Sentinel() bool { return len(r.SentinelAddrs) > 0 }

// Connect is r as internal/connect takes it (connect.RedisClient): where and how to
// reach Redis, without the variables' names and files (PasswordFile is read by Load).
func (r Redis) Connect() connect.Redis {
	return connect.Redis{
		URL: r.URL, ClusterAddrs: r.ClusterAddrs, SentinelAddrs: r.SentinelAddrs, SentinelMaster: r.SentinelMaster,
		Username: r.Username, Password: r.Password,
		TLSCAFile: r.TLSCAFile, TLSCertFile: r.TLSCertFile, TLSKeyFile: r.TLSKeyFile,
	}
}

// NATS is the NATS adapter's configuration (BRIDGE_NATS_*), named here for brevity.
type NATS = natsbroker.Config

// Kafka is the Kafka adapter's configuration (BRIDGE_KAFKA_*), named here for brevity.
type Kafka = kafkabroker.Config

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

// RedisNamed reports whether environ names a Redis (BRIDGE_REDIS_URL,
// BRIDGE_REDIS_CLUSTER_ADDRS or BRIDGE_REDIS_SENTINEL_ADDRS set and not blank). A command
// that is not the bridge itself writes to Redis only when one was named: the default URL
// (127.0.0.1:6379) may be anybody's Redis. It is a pure function.
func RedisNamed(environ map[string]string) bool {
	for _, v := range []string{"BRIDGE_REDIS_URL", "BRIDGE_REDIS_CLUSTER_ADDRS", "BRIDGE_REDIS_SENTINEL_ADDRS"} {
		if strings.TrimSpace(strings.ReplaceAll(environ[v], ",", "")) != "" {
			return true
		}
	}
	return false
}

// Load reads the configuration from environ (never from the process environment; pass
// EnvMap(os.Environ())), applies the contract's defaults and validates every value. An unset or
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
	var problems []error
	failed := map[string]bool{}
	for _, ve := range readSecretFiles(vars) {
		failed[ve.Var] = true
		problems = append(problems, ve)
	}
	cfg, err := env.ParseAsWithOptions[Config](env.Options{Environment: vars, Prefix: Prefix})
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
// settings and lets a Redis Cluster or Sentinel setting win over the default URL.
func (c *Config) normalize(vars map[string]string) {
	c.Redis.ClusterAddrs = trimList(c.Redis.ClusterAddrs)
	c.Redis.SentinelAddrs = trimList(c.Redis.SentinelAddrs)
	c.Kafka.Normalize()
	c.TargetAllow = trimList(c.TargetAllow)
	c.APIHosts = trimList(c.APIHosts)
	if v, ok := vars[Prefix+"API_ADDR"]; ok && strings.TrimSpace(v) == "" {
		c.APIAddr = ""
	}
	c.LogLevel = strings.ToLower(c.LogLevel)
	c.LogFormat = strings.ToLower(c.LogFormat)
	if (c.Redis.Cluster() || c.Redis.Sentinel()) && vars[Prefix+"REDIS_URL"] == "" {
		c.Redis.URL = ""
	}
}

// TombstoneMargin is what BRIDGE_TOMBSTONE_TTL adds to BRIDGE_NATS_ACK_WAIT when it is 0:
// room for a redelivered message to wait in a lane or for Redis, and for a Kafka
// rebalance.
const TombstoneMargin = time.Minute

// StoreConfig is c.Store with its derived defaults resolved: TombstoneTTL 0 becomes
// NATS.AckWait + [TombstoneMargin]. Pass it to delaystore.New.
func (c Config) StoreConfig() delaystore.Config {
	sc := c.Store
	if sc.TombstoneTTL == 0 {
		sc.TombstoneTTL = c.NATS.AckWait + TombstoneMargin
	}
	return sc
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
