package config

import (
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/envconf"
	"github.com/delaybridge/delaybridge/internal/subject"
)

// Limits checked by Load.
const (
	// MaxShards is the largest accepted BRIDGE_SHARDS.
	MaxShards = 4096
	// MaxKafkaMessageBytes is the largest accepted BRIDGE_KAFKA_MAX_MESSAGE_BYTES (Kafka
	// sizes are int32; a gibibyte is far beyond any sane broker setting).
	MaxKafkaMessageBytes = 1 << 30
)

// validate returns every semantic problem of c (already normalized). vars are the raw
// BRIDGE_* variables, to tell set from defaulted.
func (c *Config) validate(vars map[string]string) []*VarError {
	ps := &envconf.Problems{}

	// Redis.
	c.validateRedis(vars, ps)

	checkTLSFiles(ps, "REDIS", c.Redis.TLSCAFile, c.Redis.TLSCertFile, c.Redis.TLSKeyFile)

	// Store.
	switch kp := c.Store.KeyPrefix; {
	case kp == "":
		ps.Add("KEY_PREFIX", "must not be empty")
	case len(kp) > 64:
		ps.Add("KEY_PREFIX", "longer than 64 bytes")
	case strings.ContainsAny(kp, "{}"):
		ps.Add("KEY_PREFIX", "%s: must not contain { or } (they would move the hash tag)", envconf.Quote(kp))
	case hasSpaceOrControl(kp) || !utf8.ValidString(kp):
		ps.Add("KEY_PREFIX", "%s: must not contain whitespace or control characters", envconf.Quote(kp))
	}
	if s := c.Store.Shards; s < 1 || s > MaxShards {
		ps.Add("SHARDS", "%d: must be 1 to %d", s, MaxShards)
	}
	ps.PositiveDuration("LEASE", c.Store.Lease, time.Millisecond)
	if ttl := c.Store.TombstoneTTL; ttl > 0 && c.NATS.Stream != "" && ttl < c.NATS.AckWait {
		ps.Add("TOMBSTONE_TTL", "%s: shorter than BRIDGE_NATS_ACK_WAIT (%s): a message redelivered after AckWait would be delivered twice; "+
			"use 0 (BRIDGE_NATS_ACK_WAIT + 1m) or a negative value to turn tombstones off", envconf.Duration(ttl), envconf.Duration(c.NATS.AckWait))
	}
	c.validateWait(ps)

	// NATS.
	if c.NATS.URL != "" {
		for i, u := range strings.Split(c.NATS.URL, ",") {
			if p := checkNATSURL(strings.TrimSpace(u)); p != "" {
				ps.Add("NATS_URL", "server %d: %s", i+1, p)
			}
		}
	}
	natsSubjectOK := checkSubject(c.NATS.Subject, true) == ""
	if !natsSubjectOK {
		ps.Add("NATS_SUBJECT", "%s: %s", envconf.Quote(c.NATS.Subject), checkSubject(c.NATS.Subject, true))
	}
	if c.NATS.Queue == "" || hasSpaceOrControl(c.NATS.Queue) {
		ps.Add("NATS_QUEUE", "%s: must be non-empty, without whitespace", envconf.Quote(c.NATS.Queue))
	}
	if c.NATS.Stream != "" {
		if p := checkJSName(c.NATS.Stream); p != "" {
			ps.Add("NATS_STREAM", "%s: %s", envconf.Quote(c.NATS.Stream), p)
		}
	}
	if p := checkJSName(c.NATS.Consumer); p != "" {
		ps.Add("NATS_CONSUMER", "%s: %s", envconf.Quote(c.NATS.Consumer), p)
	}

	checkTLSFiles(ps, "NATS", c.NATS.TLSCAFile, c.NATS.TLSCertFile, c.NATS.TLSKeyFile)
	if c.NATS.CredsFile != "" && c.NATS.NKeyFile != "" {
		ps.Add("NATS_NKEY_FILE", "set only one of BRIDGE_NATS_CREDS_FILE and BRIDGE_NATS_NKEY_FILE")
	}

	// Kafka.
	checkTLSFiles(ps, "KAFKA", c.Kafka.TLSCAFile, c.Kafka.TLSCertFile, c.Kafka.TLSKeyFile)
	switch c.Kafka.SASLMechanism {
	case "":
		if c.Kafka.SASLUsername != "" || c.Kafka.SASLPassword != "" {
			ps.Add("KAFKA_SASL_MECHANISM", "empty, but a SASL user or password is set: choose PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if c.Kafka.SASLUsername == "" {
			ps.Add("KAFKA_SASL_USERNAME", "required with BRIDGE_KAFKA_SASL_MECHANISM")
		}
		if c.Kafka.SASLPassword == "" {
			ps.Add("KAFKA_SASL_PASSWORD", "required with BRIDGE_KAFKA_SASL_MECHANISM (or BRIDGE_KAFKA_SASL_PASSWORD_FILE)")
		}
	default:
		ps.Add("KAFKA_SASL_MECHANISM", "%s: must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", envconf.Quote(c.Kafka.SASLMechanism))
	}
	for _, b := range c.Kafka.Brokers {
		if p := checkDialAddr(b); p != "" {
			ps.Add("KAFKA_BROKERS", "%s: %s", envconf.Quote(b), p)
		}
	}
	if n := c.Kafka.MaxMessageBytes; n < 1024 || n > MaxKafkaMessageBytes {
		ps.Add("KAFKA_MAX_MESSAGE_BYTES", "%d: must be 1024 to %d", n, MaxKafkaMessageBytes)
	}
	kafkaTopicOK := checkTopic(c.Kafka.Topic) == ""
	if !kafkaTopicOK {
		ps.Add("KAFKA_TOPIC", "%s: %s", envconf.Quote(c.Kafka.Topic), checkTopic(c.Kafka.Topic))
	}
	if c.Kafka.Group == "" || hasSpaceOrControl(c.Kafka.Group) || len(c.Kafka.Group) > 255 {
		ps.Add("KAFKA_GROUP", "%s: must be 1-255 bytes, without whitespace", envconf.Quote(c.Kafka.Group))
	}

	// Cancel and dead-letter names serve both brokers, and must not overlap the names the
	// bridge consumes (overlaps are only checked against names that are valid themselves,
	// so one mistake gives one line).
	kafkaOn := len(c.Kafka.Brokers) > 0
	cancelOK := false
	if p := checkSubject(c.CancelSubject, true); p != "" {
		ps.Add("CANCEL_SUBJECT", "%s: %s", envconf.Quote(c.CancelSubject), p)
	} else if p := checkTopic(c.CancelSubject); kafkaOn && p != "" {
		ps.Add("CANCEL_SUBJECT", "%s: as a Kafka topic: %s", envconf.Quote(c.CancelSubject), p)
	} else if natsSubjectOK && subject.Overlap(c.CancelSubject, c.NATS.Subject) {
		ps.Add("CANCEL_SUBJECT", "%s overlaps BRIDGE_NATS_SUBJECT %s", envconf.Quote(c.CancelSubject), envconf.Quote(c.NATS.Subject))
	} else if kafkaTopicOK && c.CancelSubject == c.Kafka.Topic {
		ps.Add("CANCEL_SUBJECT", "%s equals BRIDGE_KAFKA_TOPIC", envconf.Quote(c.CancelSubject))
	} else {
		cancelOK = true
	}
	if p := checkSubject(c.DLQSubject, false); p != "" {
		ps.Add("DLQ_SUBJECT", "%s: %s", envconf.Quote(c.DLQSubject), p)
	} else if p := checkTopic(c.DLQSubject); kafkaOn && p != "" {
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

	// Targets.
	if len(c.TargetAllow) == 0 {
		ps.Add("TARGET_ALLOW", "no pattern given (leave it unset to allow every target)")
	}
	for _, pat := range c.TargetAllow {
		if p := checkPattern(pat); p != "" {
			ps.Add("TARGET_ALLOW", "%s: %s", envconf.Quote(pat), p)
		}
	}

	// Limits.
	*ps = append(*ps, c.Ingress.Validate()...)

	// Listeners.
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
	if hasSpaceOrControl(c.APIToken) {
		ps.Add("API_TOKEN", "contains whitespace or control characters (a trailing newline?)")
	}

	// Logging and lifecycle.
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
	ps.PositiveDuration("NATS_ACK_WAIT", c.NATS.AckWait, time.Millisecond)
	*ps = append(*ps, c.Egress.Validate()...)
	out := make([]*VarError, len(*ps))
	for i, p := range *ps {
		out[i] = &VarError{Var: Prefix + p.Var, Problem: p.Problem}
	}
	return out
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
		if p := checkDialAddr(a); p != "" {
			ps.Add("REDIS_CLUSTER_ADDRS", "%s: %s", envconf.Quote(a), p)
		}
	}
	for _, a := range r.SentinelAddrs {
		if p := checkDialAddr(a); p != "" {
			ps.Add("REDIS_SENTINEL_ADDRS", "%s: %s", envconf.Quote(a), p)
		}
	}
	switch {
	case r.Sentinel() && strings.TrimSpace(r.SentinelMaster) == "":
		ps.Add("REDIS_SENTINEL_MASTER", "required with BRIDGE_REDIS_SENTINEL_ADDRS (the master name the sentinels monitor)")
	case !r.Sentinel() && r.SentinelMaster != "":
		ps.Add("REDIS_SENTINEL_MASTER", "set, but BRIDGE_REDIS_SENTINEL_ADDRS is empty")
	case hasSpaceOrControl(r.SentinelMaster):
		ps.Add("REDIS_SENTINEL_MASTER", "%s: must not contain whitespace or control characters", envconf.Quote(r.SentinelMaster))
	}
	if !r.Cluster() && !r.Sentinel() {
		if p := checkRedisURL(r.URL); p != "" {
			ps.Add("REDIS_URL", "%s", p)
		}
	}
	if hasSpaceOrControl(r.Username) {
		ps.Add("REDIS_USERNAME", "%s: must not contain whitespace or control characters", envconf.Quote(r.Username))
	}
	if strings.ContainsAny(r.Password, "\r\n") {
		ps.Add("REDIS_PASSWORD", "contains a line break (a trailing newline?)")
	}
}

// checkTLSFiles checks that a client certificate comes with its key.
func checkTLSFiles(ps *envconf.Problems, system, ca, cert, key string) {
	if cert != "" && key == "" {
		ps.Add(system+"_TLS_KEY_FILE", "required with BRIDGE_%s_TLS_CERT_FILE", system)
	}
	if key != "" && cert == "" {
		ps.Add(system+"_TLS_CERT_FILE", "required with BRIDGE_%s_TLS_KEY_FILE", system)
	}
	_ = ca
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
	if st.MinReplicas < 0 {
		ps.Add("REDIS_MIN_REPLICAS", "%d: must be >= 0", st.MinReplicas)
	}
	if st.MinReplicas <= 0 || !ps.PositiveDuration("REDIS_WAIT_TIMEOUT", st.WaitTimeout, delaystore.MinWaitTimeout) {
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

// checkNATSURL returns why one NATS server address is unusable, or "". It never echoes
// the address, which may hold credentials.
func checkNATSURL(s string) string {
	if s == "" {
		return "empty"
	}
	if !strings.Contains(s, "://") {
		s = "nats://" + s // as nats.go does
	}
	u, err := url.Parse(s)
	if err != nil {
		return "not a valid URL"
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return "scheme must be nats://, tls://, ws:// or wss://"
	}
	if u.Hostname() == "" {
		return "missing host"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "port must be 1-65535"
		}
	}
	return ""
}

// checkDialAddr checks a host:port to connect to.
func checkDialAddr(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "want host:port"
	}
	if host == "" {
		return "missing host"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "port must be 1-65535"
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

// checkSubject returns why s is not a valid NATS subject for the bridge's own use, or "".
// With wildcards, "*" and ">" are allowed as whole tokens (">" last).
func checkSubject(s string, wildcards bool) string {
	if s == "" {
		return "empty subject"
	}
	if !utf8.ValidString(s) || hasSpaceOrControl(s) {
		return "subject must not contain whitespace or control characters"
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return "subject has an empty token"
		case t == "*" || t == ">":
			if !wildcards {
				return "subject must not contain wildcards"
			}
			if t == ">" && i != len(toks)-1 {
				return "> must be the last token"
			}
		case strings.ContainsAny(t, "*>"):
			return "* and > may only be whole tokens"
		}
	}
	return ""
}

// checkTopic returns why s is not a valid Kafka topic name, or "".
func checkTopic(s string) string {
	if s == "" || len(s) > 249 {
		return "topic must be 1-249 characters"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "topic may contain only a-z A-Z 0-9 . _ -"
		}
	}
	if s == "." || s == ".." {
		return "topic may not be . or .."
	}
	return ""
}

// checkJSName checks a JetStream stream or consumer name.
func checkJSName(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > 255 {
		return "longer than 255 bytes"
	}
	if !utf8.ValidString(s) || hasSpaceOrControl(s) || strings.ContainsAny(s, ".*>/\\") {
		return "must not contain whitespace, control characters or . * > / \\"
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

func hasSpaceOrControl(s string) bool {
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return true
		}
	}
	return false
}
