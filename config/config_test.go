package config

import (
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/egress"
	"github.com/delaybridge/delaybridge/ingress/intake"
)

// specDefaults is docs/contract.md section 4's table, in its order, plus the two extensions.
var specDefaults = []struct{ name, def string }{
	{"BRIDGE_REDIS_URL", "redis://127.0.0.1:6379/0"},
	{"BRIDGE_REDIS_CLUSTER_ADDRS", ""},
	// Extensions: Redis Sentinel and credentials for every topology.
	{"BRIDGE_REDIS_SENTINEL_ADDRS", ""},
	{"BRIDGE_REDIS_SENTINEL_MASTER", ""},
	{"BRIDGE_KEY_PREFIX", "delay"},
	{"BRIDGE_SHARDS", "16"},
	{"BRIDGE_NATS_URL", ""},
	{"BRIDGE_NATS_SUBJECT", "delay.in"},
	{"BRIDGE_NATS_QUEUE", "delaybridge"},
	{"BRIDGE_NATS_STREAM", ""},
	{"BRIDGE_NATS_CONSUMER", "delaybridge"},
	{"BRIDGE_KAFKA_BROKERS", ""},
	{"BRIDGE_KAFKA_TOPIC", "delay.in"},
	{"BRIDGE_KAFKA_GROUP", "delaybridge"},
	{"BRIDGE_CANCEL_SUBJECT", "delay.cancel"},
	{"BRIDGE_DLQ_SUBJECT", "delay.dlq"},
	{"BRIDGE_TARGET_ALLOW", "*"},
	{"BRIDGE_MAX_DELAY", "8760h"},
	{"BRIDGE_MAX_PAYLOAD", "1048576"},
	{"BRIDGE_MAX_HEADERS", "64"},
	{"BRIDGE_MAX_HEADER_BYTES", "8192"},
	{"BRIDGE_MAX_HOPS", "8"},
	{"BRIDGE_KAFKA_MAX_MESSAGE_BYTES", "1048576"},
	{"BRIDGE_KAFKA_MISSING_TOPIC_INTERVAL", "1m"},
	{"BRIDGE_API_MAX_INFLIGHT_BYTES", "33554432"},
	{"BRIDGE_API_MAX_CONNS", "256"},
	{"BRIDGE_HTTP_IDLE_TIMEOUT", "1m"},
	{"BRIDGE_LEASE", "30s"},
	{"BRIDGE_HTTP_ADDR", ":8080"},
	{"BRIDGE_API_ADDR", "127.0.0.1:8081"},
	{"BRIDGE_API_TOKEN", ""},
	{"BRIDGE_API_HOSTS", ""},
	{"BRIDGE_LOG_LEVEL", "info"},
	{"BRIDGE_LOG_FORMAT", "json"},
	// Section 9.
	{"BRIDGE_TARGET_RATE", ""},
	{"BRIDGE_TARGET_QUOTA", ""},
	// Extensions.
	{"BRIDGE_SHUTDOWN_TIMEOUT", "25s"},
	{"BRIDGE_NATS_ACK_WAIT", "30s"},
	{"BRIDGE_NATS_MAX_PROGRESS", "0s"},
	{"BRIDGE_TOMBSTONE_TTL", "0s"},
	// Section 1, cancels: how long a cancel is remembered.
	{"BRIDGE_CANCEL_WINDOW", "10m"},
	{"BRIDGE_AUDIT_RETENTION", "720h"},
	{"BRIDGE_AUDIT_MAX_ENTRIES", "100000"},
	{"BRIDGE_MAX_ATTEMPTS", "10"},
	{"BRIDGE_RETRY_BACKOFF", "1s"},
	{"BRIDGE_RETRY_BACKOFF_MAX", "5m"},
	{"BRIDGE_TARGET_INFLIGHT", "256"},
	{"BRIDGE_OWNERSHIP_TTL", "3s"},
	{"BRIDGE_CLAIM_AHEAD", "0s"},
	{"BRIDGE_SHARD_RUN", "0"},
	{"BRIDGE_PPROF", "false"},
	// Security extensions (issue 5, rows H3-H7).
	{"BRIDGE_REDIS_USERNAME", ""},
	{"BRIDGE_REDIS_PASSWORD", ""},
	{"BRIDGE_REDIS_PASSWORD_FILE", ""},
	{"BRIDGE_REDIS_TLS_CA_FILE", ""},
	{"BRIDGE_REDIS_TLS_CERT_FILE", ""},
	{"BRIDGE_REDIS_TLS_KEY_FILE", ""},
	{"BRIDGE_NATS_CREDS_FILE", ""},
	{"BRIDGE_NATS_NKEY_FILE", ""},
	{"BRIDGE_NATS_TLS_CA_FILE", ""},
	{"BRIDGE_NATS_TLS_CERT_FILE", ""},
	{"BRIDGE_NATS_TLS_KEY_FILE", ""},
	{"BRIDGE_KAFKA_SASL_MECHANISM", ""},
	{"BRIDGE_KAFKA_SASL_USERNAME", ""},
	{"BRIDGE_KAFKA_SASL_PASSWORD", ""},
	{"BRIDGE_KAFKA_SASL_PASSWORD_FILE", ""},
	{"BRIDGE_KAFKA_TLS", "false"},
	{"BRIDGE_KAFKA_TLS_CA_FILE", ""},
	{"BRIDGE_KAFKA_TLS_CERT_FILE", ""},
	{"BRIDGE_KAFKA_TLS_KEY_FILE", ""},
	{"BRIDGE_API_TOKEN_FILE", ""},
	// docs/contract.md section 7: durability under Redis failover.
	{"BRIDGE_REDIS_MIN_REPLICAS", "0"},
	{"BRIDGE_REDIS_WAIT_TIMEOUT", "1s"},
}

func mustLoad(t testing.TB, m map[string]string) Config {
	t.Helper()
	c, err := Load(m)
	if err != nil {
		t.Fatalf("Load(%v): %v", m, err)
	}
	return c
}

// problems returns the variables named by the joined VarErrors of err.
func problems(t testing.TB, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %v is not joined", err)
	}
	var out []string
	for _, e := range j.Unwrap() {
		var ve *VarError
		if !errors.As(e, &ve) {
			t.Fatalf("problem %v is not a *VarError", e)
		}
		if strings.Contains(e.Error(), "\n") {
			t.Fatalf("problem %q spans lines", e)
		}
		out = append(out, ve.Var)
	}
	return out
}

func TestDefaultsMatchSpec(t *testing.T) {
	vars := Variables()
	if len(vars) != len(specDefaults) {
		t.Fatalf("Variables() has %d entries, contract+extensions %d", len(vars), len(specDefaults))
	}
	byName := map[string]Var{}
	for _, v := range vars {
		byName[v.Name] = v
		if v.Doc == "" {
			t.Errorf("%s has no doc", v.Name)
		}
	}
	effective := mustLoad(t, map[string]string{}).Redacted()
	for _, want := range specDefaults {
		t.Run(want.name, func(t *testing.T) {
			v, ok := byName[want.name]
			if !ok {
				t.Fatalf("not in Variables()")
			}
			if v.Default != want.def {
				t.Errorf("Variables() default %q, contract %q", v.Default, want.def)
			}
			got, ok := effective[want.name]
			if !ok {
				t.Fatalf("not in Redacted()")
			}
			if got != want.def {
				t.Errorf("effective default %q, contract %q", got, want.def)
			}
		})
	}
	if byName["BRIDGE_API_ADDR"].Default != DefaultAPIAddr {
		t.Errorf("DefaultAPIAddr %q differs from the tag", DefaultAPIAddr)
	}
}

func TestDefaultsTyped(t *testing.T) {
	for _, m := range []map[string]string{nil, {}, {"PATH": "/bin", "BRIDGE_": "x", "OTHER_SHARDS": "abc"}} {
		got := mustLoad(t, m)
		want := Config{
			Redis:               Redis{URL: "redis://127.0.0.1:6379/0"},
			Store:               delaystore.Config{KeyPrefix: "delay", Shards: 16, Lease: 30 * time.Second, CancelWindow: 10 * time.Minute, WaitTimeout: time.Second},
			NATS:                NATS{Subject: "delay.in", Queue: "delaybridge", Consumer: "delaybridge", AckWait: 30 * time.Second},
			Kafka:               Kafka{Topic: "delay.in", Group: "delaybridge", MaxMessageBytes: 1048576, MissingTopicInterval: time.Minute},
			CancelSubject:       "delay.cancel",
			DLQSubject:          "delay.dlq",
			TargetAllow:         []string{"*"},
			Ingress:             intake.Rules{MaxDelay: 8760 * time.Hour, MaxPayload: 1048576, MaxHeaders: 64, MaxHeaderBytes: 8192, MaxHops: 8},
			HTTPAddr:            ":8080",
			APIAddr:             "127.0.0.1:8081",
			APIMaxInflightBytes: 32 << 20,
			APIMaxConns:         256,
			HTTPIdleTimeout:     time.Minute,
			LogLevel:            "info",
			LogFormat:           "json",
			ShutdownTimeout:     25 * time.Second,
			Egress: egress.Config{MaxAttempts: 10, BackoffMin: time.Second, BackoffMax: 5 * time.Minute,
				TargetInflight: 256, OwnershipTTL: 3 * time.Second},
			Audit: admin.AuditConfig{Retention: 720 * time.Hour, MaxEntries: 100000},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Load(%v) =\n%+v\nwant\n%+v", m, got, want)
		}
		if got.Brokers() != nil || got.ValidateForRun() == nil {
			t.Fatalf("defaults configure a broker")
		}
		if got.Level() != slog.LevelInfo {
			t.Fatalf("Level() = %v", got.Level())
		}
	}
}

func TestEveryVariableParsed(t *testing.T) {
	m := map[string]string{
		"BRIDGE_REDIS_URL":               "rediss://user:pw@redis.example:6380/3",
		"BRIDGE_KEY_PREFIX":              "dq",
		"BRIDGE_SHARDS":                  "64",
		"BRIDGE_SHARD_RUN":               "1",
		"BRIDGE_NATS_URL":                "nats://a:4222,nats://b:4222",
		"BRIDGE_NATS_SUBJECT":            "sched.in",
		"BRIDGE_NATS_QUEUE":              "q1",
		"BRIDGE_NATS_STREAM":             "SCHED",
		"BRIDGE_NATS_CONSUMER":           "c1",
		"BRIDGE_NATS_ACK_WAIT":           "2s",
		"BRIDGE_NATS_MAX_PROGRESS":       "-1s",
		"BRIDGE_KAFKA_BROKERS":           "k1:9092,k2:9092",
		"BRIDGE_KAFKA_TOPIC":             "sched-in",
		"BRIDGE_KAFKA_GROUP":             "g1",
		"BRIDGE_KAFKA_MAX_MESSAGE_BYTES": "2097152",
		"BRIDGE_API_MAX_INFLIGHT_BYTES":  "1000000",
		"BRIDGE_API_MAX_CONNS":           "10",
		"BRIDGE_HTTP_IDLE_TIMEOUT":       "5s",
		"BRIDGE_CANCEL_SUBJECT":          "sched.cancel",
		"BRIDGE_DLQ_SUBJECT":             "sched.dlq",
		"BRIDGE_TARGET_ALLOW":            "orders.*,kafka:billing.*",
		"BRIDGE_MAX_DELAY":               "168h",
		"BRIDGE_MAX_PAYLOAD":             "65536",
		"BRIDGE_MAX_HEADERS":             "16",
		"BRIDGE_MAX_HEADER_BYTES":        "1024",
		"BRIDGE_MAX_HOPS":                "3",
		"BRIDGE_LEASE":                   "45s",
		"BRIDGE_TOMBSTONE_TTL":           "5m",
		"BRIDGE_CANCEL_WINDOW":           "2m",
		"BRIDGE_AUDIT_RETENTION":         "48h",
		"BRIDGE_AUDIT_MAX_ENTRIES":       "500",
		"BRIDGE_REDIS_MIN_REPLICAS":      "2",
		"BRIDGE_REDIS_WAIT_TIMEOUT":      "250ms",
		"BRIDGE_HTTP_ADDR":               "0.0.0.0:9090",
		"BRIDGE_API_ADDR":                ":9091",
		"BRIDGE_API_TOKEN":               "s3cret",
		"BRIDGE_API_HOSTS":               " bridge.internal ,,Console.Example.",
		"BRIDGE_LOG_LEVEL":               "DEBUG",
		"BRIDGE_LOG_FORMAT":              "Text",
		"BRIDGE_SHUTDOWN_TIMEOUT":        "1m",
		"BRIDGE_MAX_ATTEMPTS":            "3",
		"BRIDGE_REDIS_CLUSTER_ADDRS":     "",
	}
	got := mustLoad(t, m)
	want := Config{
		Redis:               Redis{URL: "rediss://user:pw@redis.example:6380/3"},
		Store:               delaystore.Config{KeyPrefix: "dq", Shards: 64, ShardRun: 1, Lease: 45 * time.Second, TombstoneTTL: 5 * time.Minute, CancelWindow: 2 * time.Minute, MinReplicas: 2, WaitTimeout: 250 * time.Millisecond},
		NATS:                NATS{URL: "nats://a:4222,nats://b:4222", Subject: "sched.in", Queue: "q1", Stream: "SCHED", Consumer: "c1", AckWait: 2 * time.Second, MaxProgress: -time.Second},
		Kafka:               Kafka{Brokers: []string{"k1:9092", "k2:9092"}, Topic: "sched-in", Group: "g1", MaxMessageBytes: 2 << 20, MissingTopicInterval: time.Minute},
		CancelSubject:       "sched.cancel",
		DLQSubject:          "sched.dlq",
		TargetAllow:         []string{"orders.*", "kafka:billing.*"},
		Ingress:             intake.Rules{MaxDelay: 168 * time.Hour, MaxPayload: 65536, MaxHeaders: 16, MaxHeaderBytes: 1024, MaxHops: 3},
		HTTPAddr:            "0.0.0.0:9090",
		APIAddr:             ":9091",
		APIToken:            "s3cret",
		APIHosts:            []string{"bridge.internal", "Console.Example."},
		APIMaxInflightBytes: 1000000,
		APIMaxConns:         10,
		HTTPIdleTimeout:     5 * time.Second,
		LogLevel:            "debug",
		LogFormat:           "text",
		ShutdownTimeout:     time.Minute,
		Egress: egress.Config{MaxAttempts: 3, BackoffMin: time.Second, BackoffMax: 5 * time.Minute,
			TargetInflight: 256, OwnershipTTL: 3 * time.Second},
		Audit: admin.AuditConfig{Retention: 48 * time.Hour, MaxEntries: 500},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
	if b := got.Brokers(); !reflect.DeepEqual(b, []string{"nats", "kafka"}) {
		t.Fatalf("Brokers() = %v", b)
	}
	if err := got.ValidateForRun(); err != nil {
		t.Fatalf("ValidateForRun: %v", err)
	}
	if got.Level() != slog.LevelDebug {
		t.Fatalf("Level() = %v", got.Level())
	}

	c := mustLoad(t, map[string]string{"BRIDGE_REDIS_CLUSTER_ADDRS": "r1:7000, r2:7001 ,,r3:7002"})
	if !reflect.DeepEqual(c.Redis, Redis{ClusterAddrs: []string{"r1:7000", "r2:7001", "r3:7002"}}) || !c.Redis.Cluster() {
		t.Fatalf("cluster: %+v", c.Redis)
	}
}

func TestListTrimming(t *testing.T) {
	c := mustLoad(t, map[string]string{
		"BRIDGE_KAFKA_BROKERS":       " k1:9092 , ,k2:9092,",
		"BRIDGE_TARGET_ALLOW":        " orders.* ,, billing.?  ",
		"BRIDGE_REDIS_CLUSTER_ADDRS": "\tr1:7000 ,",
	})
	if !reflect.DeepEqual(c.Kafka.Brokers, []string{"k1:9092", "k2:9092"}) {
		t.Errorf("Kafka.Brokers = %q", c.Kafka.Brokers)
	}
	if !reflect.DeepEqual(c.TargetAllow, []string{"orders.*", "billing.?"}) {
		t.Errorf("TargetAllow = %q", c.TargetAllow)
	}
	if !reflect.DeepEqual(c.Redis.ClusterAddrs, []string{"r1:7000"}) {
		t.Errorf("ClusterAddrs = %q", c.Redis.ClusterAddrs)
	}
	// A list of nothing but separators is empty.
	c = mustLoad(t, map[string]string{"BRIDGE_KAFKA_BROKERS": " , ,"})
	if c.Kafka.Brokers != nil || c.Brokers() != nil {
		t.Errorf("Kafka.Brokers = %q", c.Kafka.Brokers)
	}
}

func TestEmptyValues(t *testing.T) {
	// Empty means the default, except BRIDGE_API_ADDR, where it turns the API off.
	c := mustLoad(t, map[string]string{"BRIDGE_API_ADDR": "", "BRIDGE_SHARDS": "", "BRIDGE_LOG_LEVEL": ""})
	if c.APIAddr != "" || c.Store.Shards != 16 || c.LogLevel != "info" {
		t.Fatalf("got %+v", c)
	}
	if c = mustLoad(t, map[string]string{"BRIDGE_API_ADDR": "  "}); c.APIAddr != "" {
		t.Fatalf("APIAddr = %q", c.APIAddr)
	}
}

// TestRetryBackoffValues: BRIDGE_RETRY_BACKOFF_MAX > 0 caps BRIDGE_RETRY_BACKOFF, which may
// not exceed it.
func TestRetryBackoffValues(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string // "" = valid
	}{
		{map[string]string{"BRIDGE_RETRY_BACKOFF_MAX": "30s"}, ""},
		{map[string]string{"BRIDGE_RETRY_BACKOFF": "1h", "BRIDGE_RETRY_BACKOFF_MAX": "2h"}, ""},
		{map[string]string{"BRIDGE_RETRY_BACKOFF_MAX": "0s"}, "BRIDGE_RETRY_BACKOFF_MAX: 0s: must be > 0"},
		{map[string]string{"BRIDGE_RETRY_BACKOFF_MAX": "soon"}, `BRIDGE_RETRY_BACKOFF_MAX: "soon" is not a duration`},
		{map[string]string{"BRIDGE_RETRY_BACKOFF": "10m"}, "BRIDGE_RETRY_BACKOFF: 10m: must be at most BRIDGE_RETRY_BACKOFF_MAX (5m)"},
		{map[string]string{"BRIDGE_RETRY_BACKOFF": "2s", "BRIDGE_RETRY_BACKOFF_MAX": "1s"}, "must be at most BRIDGE_RETRY_BACKOFF_MAX (1s)"},
	} {
		c, err := Load(tc.env)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Load(%v) = %v, want %q", tc.env, err, tc.want)
		}
		if err == nil && tc.env["BRIDGE_RETRY_BACKOFF_MAX"] == "30s" && c.Egress.BackoffMax != 30*time.Second {
			t.Errorf("Egress.BackoffMax = %s, want 30s", c.Egress.BackoffMax)
		}
	}
}

// TestWaitValues: BRIDGE_REDIS_MIN_REPLICAS >= 0; with it > 0, BRIDGE_REDIS_WAIT_TIMEOUT
// at least 1ms and 500ms shorter than the Redis read timeout.
func TestWaitValues(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string // "" = valid
	}{
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "1"}, ""},
		{map[string]string{"BRIDGE_OWNERSHIP_TTL": "1s"}, ""},
		{map[string]string{"BRIDGE_OWNERSHIP_TTL": "100ms"}, "BRIDGE_OWNERSHIP_TTL: 100ms: must be between 300ms and 1m"},
		{map[string]string{"BRIDGE_OWNERSHIP_TTL": "2m"}, "BRIDGE_OWNERSHIP_TTL: 2m0s: must be between 300ms and 1m"},
		{map[string]string{"BRIDGE_CLAIM_AHEAD": "-1ms"}, ""},
		{map[string]string{"BRIDGE_CLAIM_AHEAD": "1s"}, ""},
		{map[string]string{"BRIDGE_CLAIM_AHEAD": "2s"}, "BRIDGE_CLAIM_AHEAD: 2s: must be at most 1s (negative: off)"},
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "2", "BRIDGE_REDIS_WAIT_TIMEOUT": "2500ms"}, ""},
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "0", "BRIDGE_REDIS_WAIT_TIMEOUT": "0s"}, ""},
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "-1"}, "BRIDGE_REDIS_MIN_REPLICAS: -1: must be >= 0"},
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "x"}, `BRIDGE_REDIS_MIN_REPLICAS: "x" is not an integer`},
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "1", "BRIDGE_REDIS_WAIT_TIMEOUT": "0s"}, "BRIDGE_REDIS_WAIT_TIMEOUT: 0s: must be > 0"},
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "1", "BRIDGE_REDIS_WAIT_TIMEOUT": "100us"}, "at least 1ms"},
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "1", "BRIDGE_REDIS_WAIT_TIMEOUT": "3s"}, "go-redis' default read timeout"},
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "1", "BRIDGE_REDIS_URL": "redis://h:6379/0?read_timeout=300ms"},
			"BRIDGE_REDIS_WAIT_TIMEOUT: 1s: must be at least 500ms shorter than the Redis read timeout (300ms, read_timeout in BRIDGE_REDIS_URL)"},
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "1", "BRIDGE_REDIS_URL": "redis://h:6379/0?read_timeout=5s", "BRIDGE_REDIS_WAIT_TIMEOUT": "4s"}, ""},
		{map[string]string{"BRIDGE_REDIS_MIN_REPLICAS": "1", "BRIDGE_REDIS_URL": "redis://h:6379/0?read_timeout=-1", "BRIDGE_REDIS_WAIT_TIMEOUT": "10s"}, ""},
	} {
		_, err := Load(tc.env)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Load(%v) = %v, want %q", tc.env, err, tc.want)
		}
	}
}

func TestBadValues(t *testing.T) {
	tests := []struct {
		name, value string
		want        string // substring of the problem
	}{
		{"BRIDGE_SHARDS", "abc", `BRIDGE_SHARDS: "abc" is not an integer`},
		{"BRIDGE_SHARDS", " 16", `BRIDGE_SHARDS: " 16" is not an integer`},
		{"BRIDGE_SHARDS", "1.5", "not an integer"},
		{"BRIDGE_SHARDS", "99999999999", "out of range"},
		{"BRIDGE_SHARDS", "0", "must be 1 to 4096"},
		{"BRIDGE_SHARDS", "-1", "must be 1 to 4096"},
		{"BRIDGE_SHARDS", "4097", "must be 1 to 4096"},
		{"BRIDGE_SHARD_RUN", "-1", "BRIDGE_SHARD_RUN: -1: must be 1 to 65536 (0: 4096, on Redis Cluster 64)"},
		{"BRIDGE_SHARD_RUN", "65537", "must be 1 to 65536"},
		{"BRIDGE_LEASE", "0s", "BRIDGE_LEASE: 0s: must be > 0"},
		{"BRIDGE_TOMBSTONE_TTL", "1h1", `BRIDGE_TOMBSTONE_TTL: "1h1" is not a duration`},
		{"BRIDGE_CANCEL_WINDOW", "-1s", "BRIDGE_CANCEL_WINDOW: -1s: must be 0 (the default, 10m0s) to 168h0m0s"},
		{"BRIDGE_CANCEL_WINDOW", "169h", "must be 0 (the default"},
		{"BRIDGE_LEASE", "-5s", "must be > 0"},
		{"BRIDGE_LEASE", "30", `BRIDGE_LEASE: "30" is not a duration`},
		{"BRIDGE_LEASE", "100us", "at least 1ms"},
		{"BRIDGE_KEY_PREFIX", "a{b}", "{ or }"},
		{"BRIDGE_KEY_PREFIX", "a b", "whitespace"},
		{"BRIDGE_KEY_PREFIX", strings.Repeat("k", 65), "64 bytes"},
		{"BRIDGE_REDIS_URL", "http://127.0.0.1:6379", "redis:// or rediss://"},
		{"BRIDGE_REDIS_URL", "127.0.0.1:6379", "redis:// or rediss://"},
		{"BRIDGE_REDIS_URL", "redis://", "missing host"},
		{"BRIDGE_REDIS_URL", "redis://h:0", "port"},
		{"BRIDGE_REDIS_URL", "redis://h:6379/x", "database number"},
		{"BRIDGE_REDIS_URL", "redis://h:6379/-1", "database number"},
		{"BRIDGE_REDIS_URL", "redis://a b:1", "valid URL"},
		{"BRIDGE_REDIS_URL", "redis://h:6379/0?read_timeout=abc", "read_timeout"},
		{"BRIDGE_REDIS_URL", "redis://h:6379/0?no_such_option=1", "no_such_option"},
		{"BRIDGE_REDIS_CLUSTER_ADDRS", "r1", "host:port"},
		{"BRIDGE_REDIS_CLUSTER_ADDRS", "r1:7000,:7001", "missing host"},
		{"BRIDGE_REDIS_CLUSTER_ADDRS", "r1:x", "port"},
		{"BRIDGE_NATS_URL", "http://n:4222", "scheme"},
		{"BRIDGE_NATS_URL", "nats://a:4222,,nats://b:4222", "server 2: empty"},
		{"BRIDGE_NATS_URL", "nats://:4222", "missing host"},
		{"BRIDGE_NATS_URL", "nats://n:99999", "port"},
		{"BRIDGE_NATS_SUBJECT", "delay..in", "empty token"},
		{"BRIDGE_NATS_SUBJECT", "delay.>.in", "last token"},
		{"BRIDGE_NATS_SUBJECT", "delay in", "whitespace"},
		{"BRIDGE_NATS_SUBJECT", "delay.in*", "whole tokens"},
		{"BRIDGE_NATS_QUEUE", "a b", "whitespace"},
		{"BRIDGE_NATS_STREAM", "my.stream", "must not contain"},
		{"BRIDGE_NATS_CONSUMER", "c*", "must not contain"},
		{"BRIDGE_KAFKA_BROKERS", "k1", "host:port"},
		{"BRIDGE_KAFKA_TOPIC", "a/b", "a-z"},
		{"BRIDGE_KAFKA_TOPIC", "..", ". or .."},
		{"BRIDGE_KAFKA_TOPIC", strings.Repeat("t", 250), "1-249"},
		{"BRIDGE_KAFKA_GROUP", "g 1", "whitespace"},
		{"BRIDGE_CANCEL_SUBJECT", "a..b", "empty token"},
		{"BRIDGE_CANCEL_SUBJECT", "delay.in", "overlaps BRIDGE_NATS_SUBJECT"},
		{"BRIDGE_CANCEL_SUBJECT", "delay.*", "overlaps BRIDGE_NATS_SUBJECT"},
		{"BRIDGE_DLQ_SUBJECT", "delay.in", "overlaps BRIDGE_NATS_SUBJECT"},
		{"BRIDGE_DLQ_SUBJECT", "delay.cancel", "overlaps BRIDGE_CANCEL_SUBJECT"},
		{"BRIDGE_DLQ_SUBJECT", "delay.>", "wildcards"},
		{"BRIDGE_DLQ_SUBJECT", "dlq.*", "wildcards"},
		{"BRIDGE_TARGET_ALLOW", "orders.[", "malformed glob"},
		{"BRIDGE_TARGET_ALLOW", "orders.>", "can never match"},
		{"BRIDGE_TARGET_ALLOW", "foo:orders.*", "can never match"},
		{"BRIDGE_TARGET_ALLOW", " , ", "no pattern"},
		{"BRIDGE_TARGET_QUOTA", "tenant-a.*=0", "want a quota of 1 to"},
		{"BRIDGE_TARGET_QUOTA", "tenant-a.*", "want <glob>=<n>"},
		{"BRIDGE_MAX_DELAY", "0s", "must be > 0"},
		{"BRIDGE_MAX_DELAY", "-1h", "must be > 0"},
		{"BRIDGE_MAX_DELAY", "876601h", "at most 876600h"},
		{"BRIDGE_MAX_DELAY", "7d", "not a duration"},
		{"BRIDGE_MAX_DELAY", "9999999999h", "not a duration"},
		{"BRIDGE_MAX_PAYLOAD", "0", "must be > 0"},
		{"BRIDGE_MAX_PAYLOAD", "1MB", "not an integer"},
		{"BRIDGE_MAX_PAYLOAD", "536870913", "at most"},
		{"BRIDGE_MAX_HEADERS", "0", "must be > 0"},
		{"BRIDGE_MAX_HEADER_BYTES", "-1", "must be > 0"},
		{"BRIDGE_MAX_HOPS", "0", "must be > 0"},
		{"BRIDGE_KAFKA_MAX_MESSAGE_BYTES", "1000", "must be 1024 to"},
		{"BRIDGE_KAFKA_MAX_MESSAGE_BYTES", "1073741825", "must be 1024 to"},
		{"BRIDGE_KAFKA_MISSING_TOPIC_INTERVAL", "10ms", "must be between"},
		{"BRIDGE_API_MAX_INFLIGHT_BYTES", "0", "must be > 0"},
		{"BRIDGE_API_MAX_CONNS", "-1", "must be > 0"},
		{"BRIDGE_HTTP_IDLE_TIMEOUT", "0s", "must be > 0"},
		{"BRIDGE_HTTP_ADDR", "8080", "[host]:port"},
		{"BRIDGE_HTTP_ADDR", ":http", "port"},
		{"BRIDGE_API_ADDR", "localhost", "[host]:port"},
		{"BRIDGE_API_ADDR", ":70000", "port"},
		{"BRIDGE_API_TOKEN", "tok\n", "whitespace"},
		{"BRIDGE_API_HOSTS", "bridge.internal:8081", "without a port"},
		{"BRIDGE_API_HOSTS", "ok.example,*.example.com", "wildcard"},
		{"BRIDGE_API_HOSTS", "*", "wildcard"},
		{"BRIDGE_API_HOSTS", "http://bridge.internal", "without scheme"},
		{"BRIDGE_API_HOSTS", "127.0.0.1", "always allowed"},
		{"BRIDGE_API_HOSTS", "bücher.example", "xn--"},
		{"BRIDGE_LOG_LEVEL", "verbose", "debug, info, warn or error"},
		{"BRIDGE_LOG_LEVEL", "warning", "debug, info, warn or error"},
		{"BRIDGE_LOG_FORMAT", "xml", "json or text"},
		{"BRIDGE_SHUTDOWN_TIMEOUT", "0s", "must be > 0"},
		{"BRIDGE_NATS_ACK_WAIT", "0s", "must be > 0"},
		{"BRIDGE_NATS_MAX_PROGRESS", "5", "not a duration"},
		{"BRIDGE_SHUTDOWN_TIMEOUT", "soon", "not a duration"},
		{"BRIDGE_MAX_ATTEMPTS", "0", "must be >= 1"},
		{"BRIDGE_MAX_ATTEMPTS", "x", "not an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			c, err := Load(map[string]string{tt.name: tt.value})
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if !reflect.DeepEqual(c, Config{}) {
				t.Fatalf("non-zero Config with an error")
			}
			if got := problems(t, err); !reflect.DeepEqual(got, []string{tt.name}) {
				t.Fatalf("problems name %v, want only %s: %v", got, tt.name, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tt.name+": ") || !strings.Contains(msg, tt.want) {
				t.Fatalf("error %q, want %q", msg, tt.want)
			}
		})
	}
}

func TestKafkaNamesForCancelAndDLQ(t *testing.T) {
	// NATS-only: a wildcard cancel subject is fine; with Kafka it is not a topic.
	base := map[string]string{"BRIDGE_CANCEL_SUBJECT": "cancel.*"}
	if _, err := Load(base); err != nil {
		t.Fatalf("NATS-only wildcard cancel: %v", err)
	}
	base["BRIDGE_KAFKA_BROKERS"] = "k:9092"
	_, err := Load(base)
	if got := problems(t, err); !reflect.DeepEqual(got, []string{"BRIDGE_CANCEL_SUBJECT"}) || !strings.Contains(err.Error(), "Kafka topic") {
		t.Fatalf("got %v", err)
	}
	_, err = Load(map[string]string{"BRIDGE_KAFKA_BROKERS": "k:9092", "BRIDGE_DLQ_SUBJECT": "dlq:x"})
	if got := problems(t, err); !reflect.DeepEqual(got, []string{"BRIDGE_DLQ_SUBJECT"}) {
		t.Fatalf("got %v", err)
	}
	_, err = Load(map[string]string{"BRIDGE_KAFKA_TOPIC": "in", "BRIDGE_DLQ_SUBJECT": "in", "BRIDGE_NATS_SUBJECT": "nin"})
	if got := problems(t, err); !reflect.DeepEqual(got, []string{"BRIDGE_DLQ_SUBJECT"}) || !strings.Contains(err.Error(), "BRIDGE_KAFKA_TOPIC") {
		t.Fatalf("got %v", err)
	}
}

func TestSeveralBadValuesReportedTogether(t *testing.T) {
	_, err := Load(map[string]string{
		"BRIDGE_SHARDS":       "abc",
		"BRIDGE_LEASE":        "0s",
		"BRIDGE_MAX_DELAY":    "forever",
		"BRIDGE_LOG_LEVEL":    "loud",
		"BRIDGE_LOG_FORMAT":   "xml",
		"BRIDGE_HTTP_ADDR":    "nope",
		"BRIDGE_MAX_ATTEMPTS": "-1",
	})
	got := problems(t, err)
	want := []string{"BRIDGE_SHARDS", "BRIDGE_MAX_DELAY", "BRIDGE_LEASE", "BRIDGE_HTTP_ADDR", "BRIDGE_LOG_LEVEL", "BRIDGE_LOG_FORMAT", "BRIDGE_MAX_ATTEMPTS"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems %v, want %v\n%v", got, want, err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines:\n%v", len(lines), err)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, want[i]+": ") {
			t.Errorf("line %q does not start with %s", l, want[i])
		}
	}
	// A value that fails to parse is reported once, not again by the semantic checks.
	if strings.Count(err.Error(), "BRIDGE_SHARDS") != 1 {
		t.Errorf("BRIDGE_SHARDS reported twice:\n%v", err)
	}
}

func TestRedisClusterAndURL(t *testing.T) {
	// Cluster alone: the default URL is ignored and cleared.
	c := mustLoad(t, map[string]string{"BRIDGE_REDIS_CLUSTER_ADDRS": "r1:7000"})
	if c.Redis.URL != "" || !c.Redis.Cluster() {
		t.Fatalf("Redis = %+v", c.Redis)
	}
	// An empty URL is the same as unset.
	if _, err := Load(map[string]string{"BRIDGE_REDIS_CLUSTER_ADDRS": "r1:7000", "BRIDGE_REDIS_URL": ""}); err != nil {
		t.Fatal(err)
	}
	// Both set explicitly: an error, even with the default value.
	_, err := Load(map[string]string{"BRIDGE_REDIS_CLUSTER_ADDRS": "r1:7000", "BRIDGE_REDIS_URL": "redis://127.0.0.1:6379/0"})
	if got := problems(t, err); !reflect.DeepEqual(got, []string{"BRIDGE_REDIS_URL"}) || !strings.Contains(err.Error(), "set only one") {
		t.Fatalf("got %v", err)
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	c := mustLoad(t, map[string]string{
		"BRIDGE_REDIS_URL": "rediss://app:hunter2@redis:6380/0",
		"BRIDGE_NATS_URL":  "nats://u:natspw@n1:4222, nats://natstoken@n2:4222,tokenonly@n3:4222",
		"BRIDGE_API_TOKEN": "apisecret",
	})
	r := c.Redacted()
	all := ""
	for k, v := range r {
		all += k + "=" + v + "\n"
	}
	for _, secret := range []string{"hunter2", "natspw", "natstoken", "tokenonly", "apisecret"} {
		if strings.Contains(all, secret) {
			t.Errorf("secret %q printed:\n%s", secret, all)
		}
	}
	if r["BRIDGE_API_TOKEN"] != "[redacted]" {
		t.Errorf("token shown as %q", r["BRIDGE_API_TOKEN"])
	}
	if r["BRIDGE_REDIS_URL"] != "rediss://app:xxxxx@redis:6380/0" {
		t.Errorf("redis URL shown as %q", r["BRIDGE_REDIS_URL"])
	}
	if r["BRIDGE_NATS_URL"] != "nats://u:xxxxx@n1:4222,nats://xxxxx@n2:4222,xxxxx@n3:4222" {
		t.Errorf("nats URL shown as %q", r["BRIDGE_NATS_URL"])
	}
	if r["BRIDGE_SHARDS"] != "16" || r["BRIDGE_LEASE"] != "30s" {
		t.Errorf("plain values: %v", r)
	}
	if r := mustLoad(t, nil).Redacted(); r["BRIDGE_API_TOKEN"] != "" {
		t.Errorf("empty token shown as %q", r["BRIDGE_API_TOKEN"])
	}

	// Error messages never echo URLs, tokens or their parts.
	_, err := Load(map[string]string{
		"BRIDGE_REDIS_URL": "http://app:hunter2@redis:6380/0",
		"BRIDGE_NATS_URL":  "http://u:natspw@n1:4222,nats://natstoken@:4222",
		"BRIDGE_API_TOKEN": "apisecret\n",
	})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, secret := range []string{"hunter2", "natspw", "natstoken", "apisecret"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("secret %q in error:\n%v", secret, err)
		}
	}
	if _, err := Load(map[string]string{"BRIDGE_REDIS_URL": "redis://app:hun ter2@redis%zz"}); err == nil || strings.Contains(err.Error(), "hun") {
		t.Errorf("unparsable URL: %v", err)
	}
}

func TestValidateForRun(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{}, []string{"BRIDGE_NATS_URL"}},
		{map[string]string{"BRIDGE_NATS_URL": "nats://n:4222"}, nil},
		{map[string]string{"BRIDGE_NATS_URL": "n:4222"}, nil},
		{map[string]string{"BRIDGE_KAFKA_BROKERS": "k:9092"}, nil},
		{map[string]string{"BRIDGE_KAFKA_BROKERS": "k:9092", "BRIDGE_NATS_STREAM": "S"}, []string{"BRIDGE_NATS_STREAM"}},
		{map[string]string{"BRIDGE_NATS_STREAM": "S"}, []string{"BRIDGE_NATS_URL", "BRIDGE_NATS_STREAM"}},
	}
	for _, tt := range tests {
		c := mustLoad(t, tt.env)
		if got := problems(t, c.ValidateForRun()); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%v: problems %v, want %v", tt.env, got, tt.want)
		}
	}
	c := mustLoad(t, map[string]string{"BRIDGE_KAFKA_BROKERS": "k:9092"})
	if b := c.Brokers(); !reflect.DeepEqual(b, []string{"kafka"}) {
		t.Errorf("Brokers() = %v", b)
	}
}

func TestEnvMap(t *testing.T) {
	got := EnvMap([]string{"A=1", "B=x=y", "C=", "NOEQUALS", "=hidden", "A=2", "BRIDGE_SHARDS=8"})
	want := map[string]string{"A": "1", "B": "x=y", "C": "", "BRIDGE_SHARDS": "8"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("EnvMap = %v, want %v", got, want)
	}
	if c := mustLoad(t, got); c.Store.Shards != 8 {
		t.Fatalf("Shards = %d", c.Store.Shards)
	}
}

func TestUnknown(t *testing.T) {
	got := Unknown(map[string]string{"BRIDGE_SHARD": "8", "BRIDGE_SHARDS": "8", "PATH": "/bin", "BRIDGE_PORT": "tcp://x:1"})
	if !reflect.DeepEqual(got, []string{"BRIDGE_PORT", "BRIDGE_SHARD"}) {
		t.Fatalf("Unknown = %v", got)
	}
	// Unknown variables are not errors.
	mustLoad(t, map[string]string{"BRIDGE_SHARD": "abc"})
}

// TestParseErrorsMapUniquely: every field that can fail to parse (non-string) has a Go
// name that no other field shares, so a parse error names exactly one variable.
func TestParseErrorsMapUniquely(t *testing.T) {
	seen := map[string]string{}
	for _, f := range fields() {
		if f.typ.Kind() == reflect.String || f.typ == reflect.TypeOf([]string(nil)) {
			continue
		}
		if other, dup := seen[f.goName]; dup {
			t.Errorf("Go field name %s used by %s and %s", f.goName, other, f.Name)
		}
		seen[f.goName] = f.Name
	}
	for _, f := range fields() {
		if other, ok := seen[f.goName]; ok && other != f.Name {
			t.Errorf("Go field name %s used by %s and %s", f.goName, other, f.Name)
		}
	}
}

func TestLevel(t *testing.T) {
	for lvl, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "Warn": slog.LevelWarn, "error": slog.LevelError} {
		if got := mustLoad(t, map[string]string{"BRIDGE_LOG_LEVEL": lvl}).Level(); got != want {
			t.Errorf("%s: Level() = %v", lvl, got)
		}
	}
}

// TestTombstoneTTLDefault: BRIDGE_TOMBSTONE_TTL 0 (the default) becomes
// BRIDGE_NATS_ACK_WAIT + 1m in StoreConfig; negative is kept (off); an explicit value is
// kept as is, and refused when shorter than the AckWait of a JetStream source.
func TestTombstoneTTLDefault(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want time.Duration
	}{
		{map[string]string{}, 90 * time.Second},
		{map[string]string{"BRIDGE_NATS_ACK_WAIT": "5m"}, 6 * time.Minute},
		{map[string]string{"BRIDGE_TOMBSTONE_TTL": "-1s"}, -time.Second},
		{map[string]string{"BRIDGE_TOMBSTONE_TTL": "45s", "BRIDGE_NATS_STREAM": "IN"}, 45 * time.Second},
		{map[string]string{"BRIDGE_TOMBSTONE_TTL": "10s"}, 10 * time.Second}, // Kafka or core NATS: no AckWait
	} {
		if got := mustLoad(t, tc.env).StoreConfig().TombstoneTTL; got != tc.want {
			t.Errorf("%v: TombstoneTTL %s, want %s", tc.env, got, tc.want)
		}
	}
	_, err := Load(map[string]string{"BRIDGE_TOMBSTONE_TTL": "10s", "BRIDGE_NATS_STREAM": "IN"})
	if err == nil || !strings.Contains(err.Error(), "BRIDGE_TOMBSTONE_TTL: 10s: shorter than BRIDGE_NATS_ACK_WAIT (30s)") {
		t.Fatalf("TTL below AckWait: %v", err)
	}
}
