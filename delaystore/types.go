package delaystore

import (
	"errors"
	"fmt"
	"time"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// Sentinel errors.
var (
	// ErrNotFound: no pending message has that id.
	ErrNotFound = errors.New("delaystore: message not found")
	// ErrNotInitialised: Init has not read the store's layout yet, on which the shard of an
	// id depends (Park, Get, Cancel refuse until it has).
	ErrNotInitialised = errors.New("delaystore: not initialised yet (Init has not read the store's layout)")
	// ErrShardMismatch: the shard count recorded in Redis differs from Config.Shards.
	ErrShardMismatch = errors.New("delaystore: shard count differs from the one recorded in redis")
	// ErrEvictionPolicy: Redis runs an allkeys-* maxmemory-policy, which would silently
	// evict parked messages.
	ErrEvictionPolicy = errors.New("delaystore: redis maxmemory-policy evicts keys without a TTL")
	// ErrCorrupt: a stored envelope could not be decoded.
	ErrCorrupt = errors.New("delaystore: corrupt envelope")
	// ErrNotReplicated: Redis WAIT confirmed fewer than Config.MinReplicas replicas of a
	// write in time. The write may have been applied on the master but is not durable
	// across a failover: the caller must treat it as failed (not acknowledge its source)
	// and may repeat it (Park with Replace false is idempotent).
	ErrNotReplicated = errors.New("delaystore: write not confirmed by enough redis replicas")
	// ErrTooFewReplicas: at Init, a master has fewer connected replicas than
	// Config.MinReplicas, or does not say how many it has.
	ErrTooFewReplicas = errors.New("delaystore: redis master has fewer connected replicas than required")
	// ErrInDelivery: CancelAt found the message in delivery (claimed by a replica whose
	// lease runs, which may hold it until its due time): it can no longer be stopped and
	// was not deleted. Returned as an *InDeliveryError.
	ErrInDelivery = errors.New("delaystore: message in delivery")
)

// InDeliveryError is CancelAt's answer for a message in delivery (errors.Is
// ErrInDelivery): the replica that claimed it publishes it (and then acks it), so the
// cancel did not stop it. Stopped is set for a recurring message: its entry was deleted,
// so no firing after the one in delivery is parked (the schedule ends), but that firing
// may still be published.
type InDeliveryError struct {
	ID      string
	Stopped bool
}

func (e *InDeliveryError) Error() string {
	if e.Stopped {
		return "in_delivery: " + e.ID + ": a firing is being delivered and may still be published; no later firing will be"
	}
	return "in_delivery: " + e.ID + ": claimed for delivery, it can no longer be stopped"
}

// Is reports whether target is ErrInDelivery.
func (e *InDeliveryError) Is(target error) bool { return target == ErrInDelivery }

// ReplicaError is Init's refusal of a Redis master with fewer connected replicas than
// Config.MinReplicas (Required), or one that refuses to tell (Refused set: INFO
// replication denied) (errors.Is ErrTooFewReplicas). Its fields let the caller name the
// setting (package bridge: BRIDGE_REDIS_MIN_REPLICAS).
type ReplicaError struct {
	// Master names the master ("redis master host:port" in a Cluster).
	Master string
	// Role and Connected are what INFO replication said (unset when Refused).
	Role      string
	Connected int
	// Required is Config.MinReplicas.
	Required int
	// Refused is the master's refusal of INFO replication, nil when it answered.
	Refused error
}

func (e *ReplicaError) Error() string {
	if e.Refused != nil {
		return fmt.Sprintf("init: %s refuses INFO replication (%v), so its replicas cannot be counted for the %d required "+
			"(allow +info in the ACL): %v", e.Master, e.Refused, e.Required, ErrTooFewReplicas)
	}
	return fmt.Sprintf("init: %s (role %s) has %d connected replicas, fewer than the %d required: "+
		"no write could be confirmed: %v", e.Master, e.Role, e.Connected, e.Required, ErrTooFewReplicas)
}

// Unwrap returns ErrTooFewReplicas.
func (e *ReplicaError) Unwrap() error { return ErrTooFewReplicas }

// ShardCountError is Init's refusal of a store whose shard count (Configured: Config.Shards)
// differs from the one recorded in Redis (Recorded, under Key) (errors.Is
// ErrShardMismatch). Its fields let the caller name the setting (package bridge:
// BRIDGE_SHARDS).
type ShardCountError struct {
	Key                  string
	Recorded, Configured int
}

func (e *ShardCountError) Error() string {
	return fmt.Sprintf("init: redis key %s records %d shards but this store has %d: %v",
		e.Key, e.Recorded, e.Configured, ErrShardMismatch)
}

// Unwrap returns ErrShardMismatch.
func (e *ShardCountError) Unwrap() error { return ErrShardMismatch }

// Envelope is what the store keeps of a message besides its schedule.
type Envelope struct {
	// Target is where the message goes when due, with its broker: "nats:orders.timeout".
	Target string
	// Source is where it came from: "nats:delay.in", "kafka:delay.in" or "http".
	Source string
	// SourceID is the stable identity of the source message ("js:<stream>:<seq>",
	// "kafka:<topic>:<partition>:<offset>"), "" when it has none (core requests, the
	// message API). It is stored with the message (no extra byte when it equals the
	// message id). A message with one leaves a tombstone when it is acked or cancelled,
	// and a park of the same source id is then dropped for Config.TombstoneTTL: a source
	// that redelivers a delivered message does not get it delivered again.
	SourceID string
	// Headers are the headers to forward (control and bridge headers already removed).
	Headers headers.List
	// Key is the Kafka record key; nil means none (distinct from an empty key).
	Key []byte
	// Payload is the message body, byte for byte.
	Payload []byte
	// Expires is how long after its due time the message may still be published
	// (x-delay-expires); 0: no limit. Egress dead-letters it as expired past due + Expires.
	// Stored as a trailing reserved header of the body (encodeBody).
	Expires time.Duration
	// Every is the recurring schedule of the message (x-delay-every, package
	// internal/schedule), "" for a message delivered once. The store keeps it as text;
	// egress computes each next occurrence (RetryRequest.Next). Stored like Expires.
	Every string
	// Tombstone marks a Kafka tombstone (a record with a null value; Payload is empty):
	// egress publishes it to Kafka with a null value, to NATS with x-kafka-tombstone.
	// Stored like Expires, only when set.
	Tombstone bool
	// Misfire is the x-delay-misfire policy of a recurring message as text ("skip",
	// "all"; package internal/schedule reads it), "" for the default (once), which is
	// not stored. Stored like Expires, only when set.
	Misfire string
	// Window is the spread window of the message (x-delay-window, at most an hour; 0:
	// none). The store keeps the drawn time as the due time; egress draws each next
	// firing of a recurring message in its own window (internal/schedule NextSpread).
	// Stored like Expires, only when set.
	Window time.Duration
	// OrderingKey is the message's ordering key (x-delay-ordering-key, 1 to
	// contract.MaxOrderingKey bytes; "" none): messages with the same key are published one at a
	// time in parking order (docs/design.md "Ordering keys"). It selects the shard instead
	// of the id and is not allowed with Every. Stored like Expires, only when set.
	OrderingKey string
	// Anchor is, for a recurring message with a Window, the nominal (undrawn) due time of
	// its first firing, unix ms: an interval schedule counts from it. 0 otherwise. Stored
	// with Window.
	Anchor int64
	// MaxWait bounds the debounce of a message with x-delay-id (x-delay-max-wait; 0:
	// none): park.lua fixes DueBy, the time the first version of the pending message was
	// parked plus MaxWait, and parks each version no later than it. Stored in the body's
	// bound field (flagBound), only when set.
	MaxWait time.Duration
	// DueBy is the bound of a debounced message, unix ms, fixed by park.lua (the value a
	// ParkRequest gives is ignored): the version it parks is due no later than it, and a
	// replacement keeps it (docs/design.md "Bounded debounce"). Set exactly when MaxWait
	// is; 0 in a body not parked yet.
	DueBy int64
}

// ParkRequest asks the store to hold a message until it is due.
type ParkRequest struct {
	// ID identifies the message; it selects the shard.
	ID string
	// Replace: when a message with this ID is already parked, replace it (reschedule, with a
	// new version). When false the existing one is kept (idempotent redelivery).
	Replace bool
	// Absolute selects At (unix ms) as the due time; otherwise due = Redis time + Delay.
	Absolute bool
	// Delay is the relative delay (>= 0) when !Absolute; millisecond resolution.
	Delay time.Duration
	// At is the absolute due time in unix ms when Absolute.
	At int64
	// Published is the message's time by its source, unix ms (JetStream message time,
	// Kafka record timestamp; else the receipt time): a remembered cancel of ID (CancelAt)
	// at or after it drops the request (Parked.Cancelled). <= 0: unknown, never dropped so.
	Published int64
	// Envelope is the message.
	Envelope Envelope
}

// Parked is the outcome of one ParkRequest.
type Parked struct {
	ID string
	// Due is the scheduled due time, unix ms (Redis clock).
	Due int64
	// Existed: the ID was already parked and was kept (Replace=false, or a redelivery of
	// the same source message) or replaced; also true when Delivered.
	Existed bool
	// Delivered: the request's source id has a live tombstone (the source message was
	// delivered, dead-lettered or cancelled within Config.TombstoneTTL): nothing was
	// parked and Due is 0. The caller acknowledges the source as usual.
	Delivered bool
	// Cancelled: a cancel of the ID at or after the request's Published time was
	// remembered (CancelAt, within Config.CancelWindow): nothing was parked, Due is 0, and
	// Existed is true. The caller acknowledges the source as usual.
	Cancelled bool
	// OverQuota: the message would take its target's BRIDGE_TARGET_QUOTA pattern over its
	// limit (Config.TargetQuota): nothing was parked (an entry it would replace is kept),
	// Due is 0. The caller dead-letters it (reason quota_exceeded) and then acknowledges
	// the source; the API answers 429.
	OverQuota bool
	// InDelivery: the message replaced an entry of its ID that is in delivery (claimed by
	// a replica whose lease runs): that version is still published (its holder does not
	// see the replacement), and this one is parked as its own firing; Existed is true.
	// False for a replace means the replaced version will not be delivered.
	InDelivery bool
}

// Receipt identifies one claim of one message; it fences Ack and Retry, so a stale claim
// (lease expired and re-claimed, or message rescheduled or cancelled) changes nothing.
type Receipt struct {
	ID      string
	Shard   int
	Version int64
	Token   int64
}

// Claimed is a message handed to a claimer under a lease.
type Claimed struct {
	Receipt
	// Due is the due time as scheduled, unix ms.
	Due int64
	// Eligible is when the message may be published, unix ms (Redis clock): the claim's
	// Now for one that was due then; for one claimed ahead (ClaimRequest.Ahead), its score,
	// when it becomes claimable: its Due or, for a retry or a put-back, its next attempt.
	Eligible int64
	// Attempts counts failed deliveries so far.
	Attempts int
	// Released is when the message's predecessor of its ordering key left the store and
	// released it, unix ms (Redis clock), when that was after Due; 0 when it was released
	// by its due time or has no ordering key. Its own schedule makes it due at
	// max(Due, Released); Released - Due it waited for its predecessor (docs/design.md
	// "Ordering keys").
	Released int64
	Envelope Envelope
}

// Claim is the result of one claim call on one shard.
type Claim struct {
	// Now is the Redis server time of the claim, unix ms.
	Now int64
	// Time is the same Redis time to the microsecond (Now is its millisecond), for the
	// caller's estimate of the Redis clock.
	Time time.Time
	// Messages are the claimed messages (at most the requested count).
	Messages []Claimed
	// Next is the shard's earliest score after the claim (unix ms), or -1 when empty. It
	// includes the lease expiry of claimed messages.
	Next int64
	// Corrupt are claimed entries whose stored envelope could not be decoded, with what
	// survives of each. They are leased like Messages and come back after every lease
	// until removed: dead-letter them and Ack their receipts (egress does), or Cancel them
	// by ID.
	Corrupt []Corrupt
}

// Corrupt is a claimed entry whose stored envelope does not decode: the bridge cannot
// tell its target for sure, so it is never published, only dead-lettered
// (docs/contract.md section 3, "Only its own target").
type Corrupt struct {
	// Receipt fences the entry like a claimed message's (Version is 0 when even the
	// stored header is unreadable: such an entry is removed only by Cancel).
	Receipt
	// Eligible is when the entry was due to be published, unix ms (Redis clock), as
	// Claimed.Eligible: a dead letter of it waits for it too.
	Eligible int64
	// Envelope is what survives. A body whose structure decodes but whose target or
	// source is a name code the shard's names no longer hold (the names hash was lost
	// or deleted by hand) keeps everything else: source id, headers (with the hops count),
	// key, payload, and the target or source that does resolve ("" for one that does
	// not; a code is never guessed). A body whose structure does not decode keeps only
	// its bytes as Payload (after the stored header; the whole stored value when the
	// header is unreadable); every other field is then empty.
	Envelope Envelope
	// Err is why the entry does not decode (errors.Is ErrCorrupt).
	Err error
}

// RetryRequest re-schedules a claimed message after a failed delivery.
type RetryRequest struct {
	Receipt
	// Backoff is how long from now (Redis time) until the next attempt.
	Backoff time.Duration
	// PutBack returns a message that was not published (its target was at its in-flight
	// limit): only the next claim moves; attempts and the retry set are unchanged.
	PutBack bool
	// Next, when > 0, ends the firing of a recurring message instead (it was published or
	// dead-lettered): the same script that fences it as Ack does parks it again for its
	// next occurrence, due at Next (unix ms, Redis clock), with a new version (so the next
	// firing has its own x-delay-id:version), attempts 0, out of the retry set. Backoff and
	// PutBack are ignored. A cancelled or replaced message is left alone (fenced).
	Next int64
}

// Message is a pending message as Get returns it.
type Message struct {
	ID       string
	Shard    int
	Due      int64
	Attempts int
	Version  int64
	Envelope Envelope
	// HeldBy is, for a message its ordering key's chain holds (read by GetKey with its
	// key), the id of the message before it in the chain; "" for any other.
	HeldBy string
}

// Stats describes the store.
type Stats struct {
	// Parked is the number of messages in the store (pending and claimed).
	Parked int64
	// PerShard is Parked by shard.
	PerShard []int64
	// NextDue is the earliest score over all shards (unix ms), or -1 when empty.
	NextDue int64
	// Now is the Redis server time, unix ms.
	Now int64
}

// Wake tells that a shard's head became earlier (a message due at Due was parked).
// A negative Shard is a notice of the fleet instead: WakeResync, WakeFleet, WakePauses,
// WakeTails (its ID is the announcing relay's, not a withdrawal).
// With ID set it is a withdrawal instead: the entry ID at Version of Shard was cancelled
// or replaced, so a copy of it claimed ahead and not published yet is not to be published
// (Due is 0). Withdrawals are best effort: one missed leaves that copy to be published.
type Wake struct {
	Shard   int
	Due     int64
	ID      string
	Version int64
}
