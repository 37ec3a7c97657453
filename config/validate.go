package config

import (
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/httpapi/api"
	kafkabroker "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/envconf"
	"github.com/delaybridge/delaybridge/internal/subject"
)

// validate returns every semantic problem of c (already normalized). vars are the raw
// BRIDGE_* variables, to tell set from defaulted. Components check their own variables
// (Validate of the adapters, intake.Rules and egress.Config); validate adds the
// variables that span components and the checks between them.
func (c *Config) validate(vars map[string]string) []*VarError {
	ps := &envconf.Problems{}
	c.validateRedis(vars, ps)
	ps.TLSFiles("REDIS", c.Redis.TLSCertFile, c.Redis.TLSKeyFile)
	c.validateStore(ps)
	c.validateWait(ps)
	*ps = append(*ps, c.NATS.Validate()...)
	*ps = append(*ps, c.Kafka.Validate()...)
	c.validateNames(ps)
	c.validateTargets(ps)
	*ps = append(*ps, c.Ingress.Validate()...)
	c.validateListeners(ps)
	c.validateLogging(ps)
	*ps = append(*ps, c.Egress.Validate()...)
	out := make([]*VarError, len(*ps))
	for i, p := range *ps {
		out[i] = &VarError{Var: Prefix + p.Var, Problem: p.Problem}
	}
	return out
}

// validateStore checks the delay store's variables and the tombstone TTL against the
// JetStream AckWait.
func (c *Config) validateStore(ps *envconf.Problems) {
	*ps = append(*ps, c.Store.Validate()...)
	*ps = append(*ps, c.Audit.Validate()...)
	if ttl := c.Store.TombstoneTTL; ttl > 0 && c.NATS.Stream != "" && ttl < c.NATS.AckWait {
		ps.Add("TOMBSTONE_TTL", "%s: shorter than BRIDGE_NATS_ACK_WAIT (%s): a message redelivered after AckWait would be delivered twice; "+
			"use 0 (BRIDGE_NATS_ACK_WAIT + 1m) or a negative value to turn tombstones off", envconf.Duration(ttl), envconf.Duration(c.NATS.AckWait))
	}
}

// validateNames checks the cancel and dead-letter names: they serve both brokers, and
// must not overlap the names the bridge consumes (overlaps are only checked against
// names that are valid themselves, so one mistake gives one line).
func (c *Config) validateNames(ps *envconf.Problems) {
	natsSubjectOK := subject.Check(c.NATS.Subject, true) == ""
	kafkaTopicOK := kafkabroker.CheckTopic(c.Kafka.Topic) == ""
	kafkaOn := len(c.Kafka.Brokers) > 0
	cancelOK := false
	if p := subject.Check(c.CancelSubject, true); p != "" {
		ps.Add("CANCEL_SUBJECT", "%s: %s", envconf.Quote(c.CancelSubject), p)
	} else if p := kafkabroker.CheckTopic(c.CancelSubject); kafkaOn && p != "" {
		ps.Add("CANCEL_SUBJECT", "%s: as a Kafka topic: %s", envconf.Quote(c.CancelSubject), p)
	} else if natsSubjectOK && subject.Overlap(c.CancelSubject, c.NATS.Subject) {
		ps.Add("CANCEL_SUBJECT", "%s overlaps BRIDGE_NATS_SUBJECT %s", envconf.Quote(c.CancelSubject), envconf.Quote(c.NATS.Subject))
	} else if kafkaTopicOK && c.CancelSubject == c.Kafka.Topic {
		ps.Add("CANCEL_SUBJECT", "%s equals BRIDGE_KAFKA_TOPIC", envconf.Quote(c.CancelSubject))
	} else {
		cancelOK = true
	}
	if p := subject.Check(c.DLQSubject, false); p != "" {
		ps.Add("DLQ_SUBJECT", "%s: %s", envconf.Quote(c.DLQSubject), p)
	} else if p := kafkabroker.CheckTopic(c.DLQSubject); kafkaOn && p != "" {
		ps.Add("DLQ_SUBJECT", "%s: as a Kafka topic: %s", envconf.Quote(c.DLQSubject), p)
	} else {
		for _, own := range []struct {
			name, value string
			ok          bool
		}{
			{"BRIDGE_NATS_SUBJECT", c.NATS.Subject, natsSubjectOK},
			{"BRIDGE_CANCEL_SUBJECT", c.CancelSubject, cancelOK},
			{"BRIDGE_KAFKA_TOPIC", c.Kafka.Topic, kafkaTopicOK},
		} {
			if own.ok && subject.Overlap(c.DLQSubject, own.value) {
				ps.Add("DLQ_SUBJECT", "%s overlaps %s %s: dead letters would be consumed again", envconf.Quote(c.DLQSubject), own.name, envconf.Quote(own.value))
				break
			}
		}
	}
}

// validateTargets checks BRIDGE_TARGET_ALLOW.
func (c *Config) validateTargets(ps *envconf.Problems) {
	if len(c.TargetAllow) == 0 {
		ps.Add("TARGET_ALLOW", "no pattern given (leave it unset to allow every target)")
	}
	for _, pat := range c.TargetAllow {
		if p := checkPattern(pat); p != "" {
			ps.Add("TARGET_ALLOW", "%s: %s", envconf.Quote(pat), p)
		}
	}
}

// validateListeners checks the HTTP listeners and the message API's limits and token.
func (c *Config) validateListeners(ps *envconf.Problems) {
	if c.HTTPAddr == "" {
		ps.Add("HTTP_ADDR", "must not be empty")
	} else if p := checkListenAddr(c.HTTPAddr); p != "" {
		ps.Add("HTTP_ADDR", "%s: %s", envconf.Quote(c.HTTPAddr), p)
	}
	if c.APIAddr != "" {
		if p := checkListenAddr(c.APIAddr); p != "" {
			ps.Add("API_ADDR", "%s: %s", envconf.Quote(c.APIAddr), p)
		}
	}
	if c.APIMaxInflightBytes <= 0 {
		ps.Add("API_MAX_INFLIGHT_BYTES", "%d: must be > 0", c.APIMaxInflightBytes)
	}
	if c.APIMaxConns <= 0 {
		ps.Add("API_MAX_CONNS", "%d: must be > 0", c.APIMaxConns)
	}
	ps.PositiveDuration("HTTP_IDLE_TIMEOUT", c.HTTPIdleTimeout, time.Millisecond)
	if envconf.HasSpaceOrControl(c.APIToken) {
		ps.Add("API_TOKEN", "contains whitespace or control characters (a trailing newline?)")
	}
	for _, h := range c.APIHosts {
		if p := api.CheckHostName(h); p != "" {
			ps.Add("API_HOSTS", "%s: %s", envconf.Quote(h), p)
		}
	}
}

// validateLogging checks the log settings and the shutdown timeout.
func (c *Config) validateLogging(ps *envconf.Problems) {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		ps.Add("LOG_LEVEL", "%s: must be debug, info, warn or error", envconf.Quote(c.LogLevel))
	}
	switch c.LogFormat {
	case "json", "text":
	default:
		ps.Add("LOG_FORMAT", "%s: must be json or text", envconf.Quote(c.LogFormat))
	}
	ps.PositiveDuration("SHUTDOWN_TIMEOUT", c.ShutdownTimeout, time.Millisecond)
}

// validateRedis checks the Redis topology: one of URL, cluster seeds or sentinels.
func (c *Config) validateRedis(vars map[string]string, ps *envconf.Problems) {
	r := c.Redis
	set := []string{}
	if vars[Prefix+"REDIS_URL"] != "" {
		set = append(set, Prefix+"REDIS_URL")
	}
	if r.Cluster() {
		set = append(set, Prefix+"REDIS_CLUSTER_ADDRS")
	}
	if r.Sentinel() {
		set = append(set, Prefix+"REDIS_SENTINEL_ADDRS")
	}
	if len(set) > 1 {
		ps.Add(strings.TrimPrefix(set[0], Prefix), "set only one of BRIDGE_REDIS_URL, BRIDGE_REDIS_CLUSTER_ADDRS and BRIDGE_REDIS_SENTINEL_ADDRS (%s are set)",
			strings.Join(set, " and "))
	}
	for _, a := range r.ClusterAddrs {
		if p := envconf.DialAddr(a); p != "" {
			ps.Add("REDIS_CLUSTER_ADDRS", "%s: %s", envconf.Quote(a), p)
		}
	}
	for _, a := range r.SentinelAddrs {
		if p := envconf.DialAddr(a); p != "" {
			ps.Add("REDIS_SENTINEL_ADDRS", "%s: %s", envconf.Quote(a), p)
		}
	}
	switch {
	case r.Sentinel() && strings.TrimSpace(r.SentinelMaster) == "":
		ps.Add("REDIS_SENTINEL_MASTER", "required with BRIDGE_REDIS_SENTINEL_ADDRS (the master name the sentinels monitor)")
	case !r.Sentinel() && r.SentinelMaster != "":
		ps.Add("REDIS_SENTINEL_MASTER", "set, but BRIDGE_REDIS_SENTINEL_ADDRS is empty")
	case envconf.HasSpaceOrControl(r.SentinelMaster):
		ps.Add("REDIS_SENTINEL_MASTER", "%s: must not contain whitespace or control characters", envconf.Quote(r.SentinelMaster))
	}
	if !r.Cluster() && !r.Sentinel() {
		if p := checkRedisURL(r.URL); p != "" {
			ps.Add("REDIS_URL", "%s", p)
		}
	}
	if envconf.HasSpaceOrControl(r.Username) {
		ps.Add("REDIS_USERNAME", "%s: must not contain whitespace or control characters", envconf.Quote(r.Username))
	}
	if strings.ContainsAny(r.Password, "\r\n") {
		ps.Add("REDIS_PASSWORD", "contains a line break (a trailing newline?)")
	}
}

// waitReadMargin is how much of the Redis client's read timeout a confirmed write keeps
// beyond BRIDGE_REDIS_WAIT_TIMEOUT for its scripts: the pipeline's answers, WAIT's last,
// must arrive within the read timeout.
const waitReadMargin = 500 * time.Millisecond

// validateWait checks BRIDGE_REDIS_MIN_REPLICAS and BRIDGE_REDIS_WAIT_TIMEOUT (the store's
// own limits: delaystore.MinWaitTimeout) against the Redis client's read timeout (go-redis'
// default, or read_timeout in BRIDGE_REDIS_URL).
func (c *Config) validateWait(ps *envconf.Problems) {
	st := c.Store
	if st.MinReplicas <= 0 || st.WaitTimeout < delaystore.MinWaitTimeout { // delaystore's Validate reports these
		return
	}
	read, source := defaultReadTimeout, "go-redis' default read timeout"
	if !c.Redis.Cluster() && !c.Redis.Sentinel() {
		if o, err := redis.ParseURL(c.Redis.URL); err == nil && o.ReadTimeout != 0 {
			read, source = o.ReadTimeout, "read_timeout in BRIDGE_REDIS_URL"
		}
	}
	if read > 0 && st.WaitTimeout+waitReadMargin > read {
		ps.Add("REDIS_WAIT_TIMEOUT", "%s: must be at least %s shorter than the Redis read timeout (%s, %s), or the client gives up before WAIT answers",
			envconf.Duration(st.WaitTimeout), envconf.Duration(waitReadMargin), envconf.Duration(read), source)
	}
}

// defaultReadTimeout is go-redis' read timeout when none is set.
const defaultReadTimeout = 3 * time.Second

// checkRedisURL returns why s is not a usable standalone Redis URL, or "". It never
// echoes s, which may hold a password.
func checkRedisURL(s string) string {
	if !strings.Contains(s, "://") {
		return "scheme must be redis:// or rediss:// (TLS)"
	}
	u, err := url.Parse(s)
	if err != nil {
		return "not a valid URL"
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return "scheme must be redis:// or rediss:// (TLS)"
	}
	if u.Opaque != "" || u.Host == "" {
		return "missing host (redis://host:6379/0)"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "port must be 1-65535"
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return "the path must be a database number (/0)"
		}
	}
	// The query may set go-redis options (read_timeout=300ms...): check them the way the
	// client will read them. go-redis' message names the option, never the credentials.
	if _, err := redis.ParseURL(s); err != nil {
		return "query: " + strings.TrimPrefix(err.Error(), "redis: ")
	}
	return ""
}

// checkListenAddr checks a [host]:port to listen on (port 0: any free port).
func checkListenAddr(s string) string {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return "want [host]:port"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "port must be 0-65535"
	}
	return ""
}

// checkPattern checks a BRIDGE_TARGET_ALLOW pattern.
func checkPattern(p string) string {
	if _, err := path.Match(p, ""); err != nil {
		return "malformed glob (path.Match syntax: * ? [...] \\)"
	}
	if strings.Contains(p, ">") {
		return "can never match: a target never contains > (use * which matches dots too: orders.*)"
	}
	if broker, _, ok := strings.Cut(p, ":"); ok && !strings.ContainsAny(broker, "*?[\\") && broker != "nats" && broker != "kafka" {
		return "can never match: the part before : must be nats or kafka"
	}
	return ""
}
