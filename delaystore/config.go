package delaystore

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/delaybridge/delaybridge/internal/envconf"
)

// Config configures a Store. Its fields are BRIDGE_* variables: package config embeds
// Config and parses the env tags; [Config.Validate] checks the values (New does too).
type Config struct {
	// KeyPrefix namespaces every Redis key of the store.
	KeyPrefix string `env:"KEY_PREFIX" envDefault:"delay" envDoc:"namespace of every Redis key"`
	// Shards is the number of shards; it must be equal on every replica (checked at Init).
	Shards int `env:"SHARDS" envDefault:"16" envDoc:"shards of the delay store, 1-4096; must be equal on all replicas (checked)"`
	// ShardRun is how many consecutive source positions (JetStream stream sequences,
	// Kafka offsets) share a shard in a store this replica creates (0: DefaultShardRun on
	// one Redis node, ClusterShardRun on Redis Cluster).
	// It is recorded in P:shards by the first Init on an empty store; every replica then
	// uses the store's run, whatever its own (docs/design.md, "Redis data layout").
	ShardRun int `env:"SHARD_RUN" envDefault:"0" envDoc:"consecutive JetStream sequences or Kafka offsets of a stream or partition that share a shard, 1-65536; only for a store this replica creates (recorded in <prefix>:shards; an existing store keeps its own); 0: 4096 on one Redis node (standalone, Sentinel), 64 on Redis Cluster; 64: owners take turns delivering one stream every 64 positions instead of 4096, at a quarter more Redis CPU at a steady rate (extension)"`
	// Lease is how long a claimed message may stay unconfirmed before another replica may
	// claim it again.
	Lease time.Duration `env:"LEASE" envDefault:"30s" envDoc:"how long a claimed message may stay unconfirmed before another replica may take it"`
	// TombstoneTTL is how long, after a message with a source id was delivered
	// (or dead-lettered, or cancelled), a park of the same source id is dropped as a
	// redelivery of an already delivered message. It must cover the source's redelivery
	// horizon (JetStream AckWait; a Kafka rebalance). 0 means [DefaultTombstoneTTL];
	// negative: no tombstones. Package config turns 0 into BRIDGE_NATS_ACK_WAIT + 1m.
	TombstoneTTL time.Duration `env:"TOMBSTONE_TTL" envDefault:"0s" envDoc:"how long after delivery a redelivery of the same source message (JetStream, Kafka) is acked without being parked again; 0: BRIDGE_NATS_ACK_WAIT + 1m; negative: off (extension)"`
	// CancelWindow is how long a cancel is remembered (counted from when the store ran it,
	// Redis time): a message of the cancelled id that its source published at or before
	// the cancel (ParkRequest.Published) and that arrives within the window is not parked
	// (Parked.Cancelled). 0 means [DefaultCancelWindow]; at most [MaxCancelWindow].
	CancelWindow time.Duration `env:"CANCEL_WINDOW" envDefault:"10m" envDoc:"how long a cancel is remembered: a message with its id that its source published before the cancel (JetStream message time, Kafka record timestamp; else receipt time) and that arrives later is not parked; 0: 10m, at most 168h"`
	// MinReplicas, when > 0, makes every write that an acknowledgement or an answer depends
	// on (Park, Cancel) count as done only when Redis WAIT, on the master that executed it,
	// confirms that many replicas within WaitTimeout; fewer is an error wrapping
	// ErrNotReplicated. Init refuses a master with fewer connected replicas. 0: no WAIT.
	MinReplicas int `env:"REDIS_MIN_REPLICAS" envDefault:"0" envDoc:"when > 0, a park, upsert or cancel counts as done only when Redis WAIT confirms that many replicas of the master that took it; the start is refused when a master has fewer"`
	// WaitTimeout bounds that WAIT (whole milliseconds, rounded up; at least
	// MinWaitTimeout when MinReplicas > 0).
	WaitTimeout time.Duration `env:"REDIS_WAIT_TIMEOUT" envDefault:"1s" envDoc:"how long that WAIT may take; fewer replicas in time = the write failed (source not acked, API 503)"`
	// TargetQuota is BRIDGE_TARGET_QUOTA ([ParseQuotaRules]): at most n messages parked per
	// pattern, summed over the targets it matches (the first matching pattern applies)
	// and over the fleet; Park refuses the rest (Parked.OverQuota).
	TargetQuota string `env:"TARGET_QUOTA" envDoc:"at most n messages parked per pattern, summed over its targets and all replicas: comma-separated <glob>=<n> (tenant-a.*=100000); the first matching pattern applies; a message over it is dead-lettered quota_exceeded (API: 429)"`
}

// DefaultTombstoneTTL is the Config.TombstoneTTL used when it is 0: JetStream's default
// AckWait (30s) plus a minute.
const DefaultTombstoneTTL = 90 * time.Second

// DefaultCancelWindow is the Config.CancelWindow used when it is 0.
const DefaultCancelWindow = 10 * time.Minute

// MaxCancelWindow is the longest accepted Config.CancelWindow (a week): the expiry the
// scripts compute (Redis ms + window) stays exact in Lua's doubles.
const MaxCancelWindow = 7 * 24 * time.Hour

// MinWaitTimeout is the shortest accepted Config.WaitTimeout when MinReplicas > 0: WAIT
// counts whole milliseconds, and WAIT with 0 would block for ever.
const MinWaitTimeout = time.Millisecond

// MaxShards is the largest accepted Config.Shards.
const MaxShards = 4096

// MaxKeyPrefix is the longest accepted Config.KeyPrefix, in bytes.
const MaxKeyPrefix = 64

// Validate returns every problem of c, naming the variable (without BRIDGE_).
func (c Config) Validate() envconf.Problems {
	var ps envconf.Problems
	switch kp := c.KeyPrefix; {
	case kp == "":
		ps.Add("KEY_PREFIX", "must not be empty")
	case len(kp) > MaxKeyPrefix:
		ps.Add("KEY_PREFIX", "longer than %d bytes", MaxKeyPrefix)
	case strings.ContainsAny(kp, "{}"):
		ps.Add("KEY_PREFIX", "%s: must not contain { or } (they would move the hash tag)", envconf.Quote(kp))
	case envconf.HasSpaceOrControl(kp) || !utf8.ValidString(kp):
		ps.Add("KEY_PREFIX", "%s: must not contain whitespace or control characters", envconf.Quote(kp))
	}
	if c.Shards < 1 || c.Shards > MaxShards {
		ps.Add("SHARDS", "%d: must be 1 to %d", c.Shards, MaxShards)
	}
	if c.ShardRun < 0 || c.ShardRun > MaxShardRun {
		ps.Add("SHARD_RUN", "%d: must be 1 to %d (0: %d, on Redis Cluster %d)", c.ShardRun, MaxShardRun, DefaultShardRun, ClusterShardRun)
	}
	ps.PositiveDuration("LEASE", c.Lease, time.Millisecond)
	if c.CancelWindow < 0 || c.CancelWindow > MaxCancelWindow {
		ps.Add("CANCEL_WINDOW", "%s: must be 0 (the default, %s) to %s", c.CancelWindow, DefaultCancelWindow, MaxCancelWindow)
	}
	if c.MinReplicas < 0 {
		ps.Add("REDIS_MIN_REPLICAS", "%d: must be >= 0", c.MinReplicas)
	}
	if c.MinReplicas > 0 {
		ps.PositiveDuration("REDIS_WAIT_TIMEOUT", c.WaitTimeout, MinWaitTimeout)
	}
	if _, err := ParseQuotaRules(c.TargetQuota); err != nil {
		ps.Add("TARGET_QUOTA", "%v", err)
	}
	return ps
}
