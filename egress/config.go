package egress

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/delaybridge/delaybridge/internal/envconf"
	"github.com/delaybridge/delaybridge/internal/events"
	"github.com/delaybridge/delaybridge/internal/tracing"
)

// Config configures egress. The fields with an env tag are BRIDGE_* variables (package
// config embeds Config and parses them; [Config.Validate] checks them); the others are
// set by the program that assembles the bridge. A zero field takes its default in [New].
type Config struct {
	// DLQSubject is the dead-letter subject, on the source broker of the message.
	DLQSubject string
	// BatchSize is the most messages claimed per shard in one call (default 256).
	BatchSize int
	// MaxAttempts is how many failed publishes a message may have before it is
	// dead-lettered (default 10).
	MaxAttempts int `env:"MAX_ATTEMPTS" envDefault:"10" envDoc:"egress publish attempts before a message is dead-lettered (extension)"`
	// BackoffMin is the wait before a failed message is tried again; it doubles per
	// attempt: BackoffMin * 2^(attempts-1), capped at BackoffMax (default 1s).
	BackoffMin time.Duration `env:"RETRY_BACKOFF" envDefault:"1s" envDoc:"wait before a failed target publish is retried; doubles per attempt, capped at BRIDGE_RETRY_BACKOFF_MAX (extension)"`
	// BackoffMax caps the doubling of BackoffMin: a message whose publishes keep failing
	// is tried at least this often until it is dead-lettered. It is also how often an
	// undecodable entry is looked at again (default 5m).
	BackoffMax time.Duration `env:"RETRY_BACKOFF_MAX" envDefault:"5m" envDoc:"longest wait between publish attempts of one message: the cap of BRIDGE_RETRY_BACKOFF's doubling (extension)"`
	// ResyncInterval is how often every shard's head is re-read, a safety net for missed
	// wake-ups (default 5s).
	ResyncInterval time.Duration
	// DrainTimeout bounds the completion of batches in flight once Run's ctx is
	// cancelled (default 20s).
	DrainTimeout time.Duration
	// Lease is the store's claim lease. When set, the messages of a claimed batch carry
	// a context that ends 4/5 of it after the claim, so that a publish never outlives
	// its claim (after the lease another replica may publish the same message).
	Lease time.Duration
	// TargetInflight is the most messages of one target (broker:name) this replica has
	// in Publish at once, over all shards, while the target is not confirming (default
	// 256; flowingFactor times as many while it is, see limiter). A claimed message over
	// it is put back unpublished, without counting an attempt, so that a hanging target
	// holds only its own share of the in-flight capacity.
	TargetInflight int `env:"TARGET_INFLIGHT" envDefault:"256" envDoc:"most messages of one target being published at once by this replica while it is not confirming (32 times as many while it is); more are put back untried, so a hanging target cannot hold the others up (extension)"`
	// TargetRate is BRIDGE_TARGET_RATE ([ParseRateRules]): per-target publish rates,
	// summed over the fleet. Empty: no target is limited.
	TargetRate string `env:"TARGET_RATE" envDoc:"per-target publish rates over all replicas: comma-separated <glob>=<n>/s (orders.*=200/s,kafka:billing.*=1000/s); the first matching pattern applies; messages over the rate wait, in due order"`
	// Tracer makes one "delaybridge publish" span per delivery attempt, a child of the
	// message's traceparent and linked to the ingress span that parked it. nil or a no-op tracer: no spans (tracing.Active).
	Tracer trace.Tracer
	// MemberID is this replica's id in the fleet's membership (default NewMemberID()).
	MemberID string
	// OwnershipTTL is how long this replica's membership, and with it its shards, lives
	// without a heartbeat (one every OwnershipTTL/3). A killed replica's shards are claimed
	// again within OwnershipTTL + OwnershipTTL/3. Default 3s.
	OwnershipTTL time.Duration `env:"OWNERSHIP_TTL" envDefault:"3s" envDoc:"how long a replica keeps its shards without a heartbeat (one every third of it); a killed replica's shards are taken over within 4/3 of it (extension)"`
	// ClaimAhead: a shard is claimed a recent round trip before its head is due (the lead:
	// scheduler.lead), and the claim also takes the messages due within ClaimAhead after it; those wait in the scheduler
	// until their due time (holder). Each shard is then claimed about once per ClaimAhead
	// instead of once per message at a steady rate (Redis' cost follows the shards a
	// claim touches). A held message is in delivery: a cancel or replace of it answers
	// in_delivery and it is published all the same; only a recurring message's cancel
	// withdraws the held firing (Wake.ID, best effort); a bulk change leaves it alone.
	// 0: the default, 32ms;
	// negative: off (claim only what is due). At most a quarter of Lease applies.
	ClaimAhead time.Duration `env:"CLAIM_AHEAD" envDefault:"0s" envDoc:"how far ahead of their due time messages are claimed from Redis and held in memory, to be published at their due time: each shard is claimed once per span instead of once per message (less Redis CPU at steady load); a message held in that span is in delivery: a cancel or replace of it answers in_delivery and it is still published (a recurring message's cancel withdraws the firing), a bulk change leaves it alone; 0: 32ms; negative: off (extension)"`
	// MaxDelay is BRIDGE_MAX_DELAY (set by the program from the ingress rules): a recurring
	// message's next occurrence more than MaxDelay after the firing that parks it is not
	// parked; the schedule ends with that firing (delivery.fired). <= 0: only an
	// occurrence that overflows ends it.
	MaxDelay time.Duration
	// ClaimAll claims every shard whatever the ownership (the behaviour before ownership).
	// Fault tests use it to force two replicas to claim the same shards; the claim lease
	// keeps that correct.
	ClaimAll bool
	// Now is the clock of scheduling decisions (default time.Now). Lease fences are
	// always taken from time.Now.
	Now func() time.Time
	// FailureLogInterval is the least time between two Warn lines about one failing
	// target (publishes retried, messages dead-lettered): each line counts what happened
	// since the last one; per-message detail is at Debug and in the metrics (default 1m).
	FailureLogInterval time.Duration
	// Events, when set, is told of every message delivered, dead-lettered or expired
	// (GET /v1/events); Emit must not block (an *events.Hub does not).
	Events Emitter
}

// Emitter takes live events (internal/events.Hub). Emit must not block: it runs on the
// delivery path, once per message. Safe for concurrent use.
type Emitter interface {
	Emit(events.Event)
}

// Limits of the variables, checked by [Config.Validate].
const (
	// MinOwnershipTTL and MaxOwnershipTTL bound BRIDGE_OWNERSHIP_TTL.
	MinOwnershipTTL = 300 * time.Millisecond
	MaxOwnershipTTL = time.Minute
	// MaxClaimAhead bounds BRIDGE_CLAIM_AHEAD.
	MaxClaimAhead = time.Second
	// defaultClaimAhead is Config.ClaimAhead's default.
	defaultClaimAhead = 32 * time.Millisecond
)

// Validate returns every problem of the fields set from BRIDGE_* variables, naming the
// variable. New does not call it: a zero field there means its default.
func (c Config) Validate() envconf.Problems {
	var ps envconf.Problems
	if c.MaxAttempts < 1 {
		ps.Add("MAX_ATTEMPTS", "%d: must be >= 1", c.MaxAttempts)
	}
	ps.PositiveDuration("RETRY_BACKOFF", c.BackoffMin, time.Millisecond)
	ps.PositiveDuration("RETRY_BACKOFF_MAX", c.BackoffMax, time.Millisecond)
	if c.BackoffMax > 0 && c.BackoffMin > c.BackoffMax {
		ps.Add("RETRY_BACKOFF", "%s: must be at most BRIDGE_RETRY_BACKOFF_MAX (%s), the cap of the doubling",
			envconf.Duration(c.BackoffMin), envconf.Duration(c.BackoffMax))
	}
	if c.OwnershipTTL < MinOwnershipTTL || c.OwnershipTTL > MaxOwnershipTTL {
		ps.Add("OWNERSHIP_TTL", "%s: must be between %s and %s", c.OwnershipTTL, envconf.Duration(MinOwnershipTTL), envconf.Duration(MaxOwnershipTTL))
	}
	if c.ClaimAhead > MaxClaimAhead {
		ps.Add("CLAIM_AHEAD", "%s: must be at most %s (negative: off)", envconf.Duration(c.ClaimAhead), envconf.Duration(MaxClaimAhead))
	}
	if c.TargetInflight < 1 {
		ps.Add("TARGET_INFLIGHT", "%d: must be >= 1", c.TargetInflight)
	}
	if _, err := ParseRateRules(c.TargetRate); err != nil {
		ps.Add("TARGET_RATE", "%v", err)
	}
	return ps
}

func (c *Config) defaults() {
	c.Tracer = tracing.Active(c.Tracer) // nil: no spans
	if c.BatchSize <= 0 {
		c.BatchSize = 256
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = time.Second
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(5*time.Minute, c.BackoffMin)
	}
	if c.ResyncInterval <= 0 {
		c.ResyncInterval = 5 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 20 * time.Second
	}
	if c.TargetInflight <= 0 {
		c.TargetInflight = 256
	}
	if c.MemberID == "" {
		c.MemberID = NewMemberID()
	}
	if c.OwnershipTTL <= 0 {
		c.OwnershipTTL = 3 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.FailureLogInterval <= 0 {
		c.FailureLogInterval = time.Minute
	}
	if c.ClaimAhead == 0 {
		c.ClaimAhead = defaultClaimAhead
	}
}

// ahead is the span claimed ahead of due: ClaimAhead, none when negative, at most a
// quarter of Lease (a held message's lease runs from its claim).
func (c Config) ahead() time.Duration {
	a := max(c.ClaimAhead, 0)
	if c.Lease > 0 {
		a = min(a, c.Lease/4)
	}
	return a
}
