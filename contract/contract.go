// Package contract is the one home of the message contract that ingress, egress, the
// broker adapters and the HTTP API share (docs/contract.md sections 1, 2 and 5): the
// header names, the reason codes of dead letters and refusals, and the rule that a
// relative delay counts from receipt.
//
// Header names are lower case. Incoming names are matched case-insensitively; the bridge
// writes its own headers with exactly these names.
package contract

import (
	"strconv"
	"time"
)

// Headers read from an incoming message (section 1).
const (
	// HeaderDelay is the relative delay of an incoming message ("30s", "1500ms", "PT1M").
	HeaderDelay = "x-delay"
	// HeaderDeliverAt is the absolute due time of an incoming message (RFC 3339 or unix ms).
	HeaderDeliverAt = "x-deliver-at"
	// HeaderTarget is where a message goes when due; dead letters carry it too.
	HeaderTarget = "x-target"
	// HeaderID is the identity of a delayed message, in and out: sending the same id
	// again reschedules, a cancel names it.
	HeaderID = "x-delay-id"
	// HeaderKafkaKey carries a Kafka record key across NATS.
	HeaderKafkaKey = "x-kafka-key"
	// HeaderKafkaTombstone carries a Kafka tombstone (a null record value) across NATS:
	// "true" on the empty payload delivered to NATS; a message with it ([Tombstone])
	// becomes a tombstone on a Kafka target. With a non-empty payload it is refused as
	// [ReasonInvalidHeaders] when the target is Kafka (a tombstone carries no value).
	HeaderKafkaTombstone = "x-kafka-tombstone"
	// HeaderHops counts how often a message went through a bridge: ingress sets it to the
	// incoming value + 1 on the parked message, and rejects a message whose count reached
	// the maximum (a loop through other services that the target check cannot see).
	HeaderHops = "x-delay-hops"
	// HeaderExpires is how long after its due time a message may still be delivered (the
	// x-delay grammar, > 0). Past due + expires it is dead-lettered with [ReasonExpired]
	// instead (section 9).
	HeaderExpires = "x-delay-expires"
	// HeaderEvery makes a message recurring: a Go duration of at least 1s or a cron
	// expression (optionally CRON_TZ=<zone> first). After each firing the message is parked
	// again for its next occurrence, with the same x-delay-id (section 9).
	HeaderEvery = "x-delay-every"
	// HeaderMisfire is what a recurring message does with occurrences it missed (the
	// bridge was down, the target failed, the first occurrence lies in the past): "once"
	// (the default: one firing as the latest of them), "skip" or "all" (at most 100). A
	// bad value, or one without HeaderEvery, is refused as [ReasonInvalidEvery] (section 9).
	HeaderMisfire = "x-delay-misfire"
	// HeaderWindow is a spread window (the x-delay grammar, at most [MaxWindow]): the
	// message is delivered at a time drawn uniformly in [due, due + window], fixed when it
	// is parked (never early, the same on every replica); x-delay-due is the drawn time. A
	// recurring message draws anew for each firing. A bad or too long value is refused as
	// [ReasonInvalidWindow] (section 9).
	HeaderWindow = "x-delay-window"
	// HeaderMaxWait bounds the debounce of a message with [HeaderID] (the x-delay grammar,
	// at least 1 ms, at most BRIDGE_MAX_DELAY): a replacement (the same x-delay-id again) is
	// due at most the max wait after the first version of the pending message was parked;
	// the bound carries over every replacement until the message is delivered or
	// cancelled, and a replacement without the header keeps it. A bad value, or one on a
	// message without x-delay-id or with [HeaderEvery], is refused as
	// [ReasonInvalidMaxWait] (section 11).
	HeaderMaxWait = "x-delay-max-wait"
	// HeaderOrderingKey orders messages (1 to [MaxOrderingKey] bytes): those with the same
	// key are published one at a time in the order the bridge parked them, each no
	// earlier than its due time and not before the one parked before it left the store.
	// A keyed message is named by its key and id: a cancel or replace of it carries the
	// same key. Repeated, empty, too long, or with [HeaderEvery]: refused as
	// [ReasonInvalidOrderingKey] (section 11).
	HeaderOrderingKey = "x-delay-ordering-key"
)

// MaxOrderingKey is the longest [HeaderOrderingKey], in bytes.
const MaxOrderingKey = 256

// MaxWindow is the longest spread window ([HeaderWindow]).
const MaxWindow = time.Hour

// Headers the bridge sets on what it delivers (section 2).
const (
	// HeaderDue is set on delivered messages: the due time as scheduled, unix ms.
	HeaderDue = "x-delay-due"
	// HeaderSource is set on delivered messages: "nats:<subject>", "kafka:<topic>" or "http".
	HeaderSource = "x-delay-source"
	// HeaderError is set on dead letters: "<reason code>: <detail>" (see the Reason
	// constants).
	HeaderError = "x-delay-error"
	// HeaderOriginalSize is set on a dead letter sent without its payload, because the
	// dead-letter subject refused it as too large: the payload's size in bytes. Ingress
	// (a rejected message) and egress (an undeliverable one) both set it.
	HeaderOriginalSize = "x-delay-original-size"
	// HeaderOriginalPrefix renames the Nats-* headers of a NATS dead letter, which a
	// JetStream stream capturing the dead-letter subject would act on: Nats-Schedule
	// arrives in the dead letter as x-delay-original-Nats-Schedule.
	HeaderOriginalPrefix = "x-delay-original-"
	// HeaderRedrive is set by `bridge redrive` on each letter it sends back to the ingress:
	// the dead letter it came from ("<stream>:<sequence>" on NATS,
	// "<topic>:<partition>:<offset>" on Kafka). The bridge carries it like any header, so a
	// letter refused again comes back to the dead-letter store with it (how redrive counts
	// "refused again"), and a delivered one shows that it was redriven.
	HeaderRedrive = "x-delay-redrive"
)

// Reason codes: the prefix of x-delay-error on a dead letter, the "error" of a refused
// API request, and the reason label of the metrics.
const (
	// Refusals at ingress (section 5), from the most to the least specific.
	ReasonInvalidDelay        = "invalid_delay"
	ReasonInvalidDeliverAt    = "invalid_deliver_at"
	ReasonInvalidExpires      = "invalid_expires"
	ReasonInvalidEvery        = "invalid_every"
	ReasonInvalidWindow       = "invalid_window"
	ReasonInvalidMaxWait      = "invalid_max_wait"
	ReasonInvalidOrderingKey  = "invalid_ordering_key"
	ReasonConflictingSchedule = "conflicting_schedule"
	ReasonDelayTooLong        = "delay_too_long"
	ReasonMissingTarget       = "missing_target"
	ReasonInvalidTarget       = "invalid_target"
	ReasonTargetLoop          = "target_loop"
	ReasonTargetNotAllowed    = "target_not_allowed"
	ReasonBrokerNotConfigured = "broker_not_configured"
	ReasonInvalidID           = "invalid_id"
	ReasonPayloadTooLarge     = "payload_too_large"
	ReasonInvalidHeaders      = "invalid_headers"
	// ReasonQuotaExceeded: parking the message would take its target's BRIDGE_TARGET_QUOTA
	// pattern over its limit (docs/contract.md section 9); the message API answers 429.
	ReasonQuotaExceeded = "quota_exceeded"
	ReasonUnknown       = "unknown"

	// ReasonInvalidRequest starts the 400 answer of the message API to a body that is not a
	// message (not JSON, an unknown field, a field of the wrong type, payload and
	// payload_base64 both given) and is its reason label in the metrics. Not a dead-letter
	// reason: the API answers, nothing is dead-lettered.
	ReasonInvalidRequest = "invalid_request"

	// ReasonCrossOrigin starts the 403 answer of the message API to a change (POST,
	// DELETE) that a browser sent from another site or origin (Sec-Fetch-Site, Origin):
	// a cross-site request forgery, refused with or without the token. Not a dead-letter
	// reason.
	ReasonCrossOrigin = "cross_origin"
	// ReasonHostNotAllowed starts the 403 answer of the message API, without
	// BRIDGE_API_TOKEN, to a request whose Host is a DNS name other than localhost and
	// not listed in BRIDGE_API_HOSTS: a page on a name rebound to the bridge's address
	// (DNS rebinding). Not a dead-letter reason.
	ReasonHostNotAllowed = "host_not_allowed"
	// ReasonInvalidCursor starts the 400 answer of the message API to a cursor that the
	// bridge did not issue for that query (altered, made up, or another selector's).
	// Not a dead-letter reason.
	ReasonInvalidCursor = "invalid_cursor"
	// ReasonNotJSON starts the 415 answer of the message API to a POST whose
	// Content-Type is not application/json. Not a dead-letter reason.
	ReasonNotJSON = "not_json"
	// ReasonTooManyTails starts the 429 answer of GET /v1/events when a replica already
	// serves its most live event streams. Not a dead-letter reason.
	ReasonTooManyTails = "too_many_tails"
	// ReasonTooManyPaused starts the 409 answer of POST /v1/targets/pause when the fleet
	// already has as many target globs paused as it takes (64). Not a dead-letter reason.
	ReasonTooManyPaused = "too_many_paused"

	// ReasonNotReplicated starts the error reply of a request refused for durability
	// (BRIDGE_REDIS_MIN_REPLICAS not confirmed in time): nothing was parked or
	// dead-lettered; the sender retries. Not a dead-letter reason.
	ReasonNotReplicated = "not_replicated"

	// Dead letters at egress.
	// ReasonPublishFailed: the target failed BRIDGE_MAX_ATTEMPTS publishes.
	ReasonPublishFailed = "publish_failed"
	// ReasonForbidden: the target broker refused the publish for lack of permission (a
	// NATS permissions violation, Kafka TOPIC_AUTHORIZATION_FAILED).
	ReasonForbidden = "forbidden"
	// ReasonTooLarge: the message exceeds what the target broker accepts (NATS
	// max_payload, Kafka MESSAGE_TOO_LARGE).
	ReasonTooLarge = "too_large"
	// ReasonExpired: the message could not be published before its due time + its
	// x-delay-expires (an outage, a failing target, a rate limit); it was not delivered.
	ReasonExpired = "expired"
	// ReasonCorrupt: the stored message does not decode (Redis lost its names, or the
	// entry was damaged), so the bridge cannot tell its target for sure and never
	// publishes it (section 3, "Only its own target"): its headers and payload as far as
	// they survive, x-target and x-delay-source only when they do.
	ReasonCorrupt = "corrupt"
)

// Remaining is what is left of a relative delay at now for a message received at
// received: the delay counts from receipt, not from the moment the bridge parks it (a
// park retried while Redis was unreachable does not push the due time out). Never
// negative; a zero received means "received now".
func Remaining(delay time.Duration, received, now time.Time) time.Duration {
	if !received.IsZero() {
		delay -= now.Sub(received)
	}
	return max(delay, 0)
}

// Tombstone reports whether values (of [HeaderKafkaTombstone]) ask for a tombstone: one
// of them is "true", in any case. Any other value is an ordinary header.
func Tombstone(values []string) bool {
	for _, v := range values {
		if len(v) == 4 && (v[0]|0x20) == 't' && (v[1]|0x20) == 'r' && (v[2]|0x20) == 'u' && (v[3]|0x20) == 'e' {
			return true
		}
	}
	return false
}

// maxPublished bounds a source time: 2^53 ms, the largest integer Lua's doubles hold
// exactly (the store's scripts compare it).
const maxPublished = 1 << 53

// Published is a message's (or a cancel's) time by its source, unix ms, as the cancel rule
// compares them (docs/contract.md section 1: a cancel applies to every message of its id
// published before it): source is the adapter's decimal milliseconds (JetStream message
// time, Kafka record timestamp; reserved metadata _delaybridge_source_time); when it is
// empty (core NATS, the message API), not a decimal, <= 0 or >= 2^53, the receipt time
// counts instead. Never <= 0: a received before 1970 counts as 1 ms.
func Published(source string, received time.Time) int64 {
	if ms, err := strconv.ParseInt(source, 10, 64); err == nil && ms > 0 && ms < maxPublished {
		return ms
	}
	return min(max(received.UnixMilli(), 1), maxPublished-1)
}
