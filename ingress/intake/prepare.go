package intake

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// Incoming is a message as it arrived, before validation.
type Incoming struct {
	// Headers are all headers of the message, control headers included.
	Headers headers.List
	Payload []byte
	// Key is the Kafka record key, nil when none.
	Key []byte
	// Tombstone: a Kafka record with a null value (Payload is empty).
	Tombstone bool
	// Broker is the source broker ("nats" or "kafka"); it resolves unprefixed targets.
	Broker string
	// Source is the x-delay-source value: "nats:delay.in", "kafka:delay.in" or "http".
	Source string
	// SourceID is a stable identity of the source message ("" when it has none); used as
	// the id when x-delay-id is absent, and makes a redelivery keep the parked copy or,
	// once it was delivered, be dropped (the store's tombstones).
	SourceID string
	// SourceTime is the message's time by its source, decimal unix ms (metadata
	// headers.MetaSourceTime: JetStream message time, Kafka record timestamp); "" when it
	// has none (core NATS, the message API): the receipt time counts (contract.Published).
	// A remembered cancel of the id at or after it drops the message.
	SourceTime string
	// NewID makes an id when neither x-delay-id nor SourceID is present.
	NewID func() string
	// Received is when the bridge received the message; x-delay counts from it.
	Received time.Time
}

// Prepare validates in and turns it into a park request, with a due-time computation that
// the store finishes with its own clock. It is pure and safe for concurrent use. now is
// the local time, used only to bound x-deliver-at by MaxDelay; the relative delay is
// reduced by the time elapsed since in.Received.
//
// Besides the control headers it checks the header list as a whole: the MaxHeaders and
// MaxHeaderBytes limits, x-delay-hops (MaxHops; the parked message carries the incoming
// count + 1), a single well-formed x-kafka-key, for a NATS target that NATS can carry
// every forwarded header unchanged (Kafka to Kafka carries any bytes), and that the
// outgoing message fits the target broker's limit (Limits, [SizeLimits]). A header named
// with the bridge's reserved prefix is refused ([checkReserved]). Headers the bridge sets
// itself and Nats-* headers are stripped ([isDropped]).
//
// The compatibility headers of NATS message schedules and kafka-message-scheduler are
// translated first ([translateCompat]): Nats-Schedule "@at <time>" and scheduler-epoch
// stand for x-deliver-at, Nats-Schedule-Target and scheduler-target-topic for x-target,
// scheduler-target-key gives the delivered record key, and a message with scheduler-epoch
// or scheduler-target-topic takes its Kafka record key as its id (as x-delay-id would).
// They are control headers: not forwarded.
func (r Rules) Prepare(in Incoming, now time.Time) (delaystore.ParkRequest, error) {
	var req delaystore.ParkRequest
	h, comp, err := r.incomingHeaders(in)
	if err != nil {
		return req, err
	}
	if req.ID, req.Replace, err = chooseID(h, comp, in); err != nil {
		return req, err
	}
	sched, err := ParseSchedule(h, r.MaxDelay, now)
	if err != nil {
		return req, err
	}
	fire, err := parseFiring(h, r.MaxDelay, now)
	if err == nil {
		err = fire.checkMaxWait(req.Replace)
	}
	var key string
	if err == nil {
		key, err = ParseOrderingKey(h, fire.every.String() != "")
	}
	if err != nil {
		return req, err
	}
	out, err := r.outgoing(h, comp, in, req.ID)
	if err != nil {
		return req, err
	}
	if sched.Absolute {
		req.Absolute, req.At = true, sched.At
	} else {
		req.Delay = contract.Remaining(sched.Delay, in.Received, now)
	}
	firstFiring(&req, h, fire.every, now)
	req.Published = contract.Published(in.SourceTime, in.Received)
	req.Envelope = delaystore.Envelope{
		Target:    out.target.String(),
		Source:    in.Source,
		SourceID:  in.SourceID,
		Headers:   out.headers,
		Key:       out.key,
		Payload:   in.Payload,
		Tombstone: in.Tombstone,
		Expires:   fire.expires,
		Every:     fire.every.String(),
		Misfire:   fire.storedMisfire(),
		MaxWait:   fire.maxWait,

		OrderingKey: key,
	}
	if err := spread(&req, sched, fire.window, r.MaxDelay, now); err != nil {
		return delaystore.ParkRequest{}, err
	}
	return req, nil
}

// incomingHeaders checks the payload's size and the header list as a whole (limits,
// reserved names, a single x-kafka-key) and translates the compatibility headers: the
// header list the contract headers are read from.
func (r Rules) incomingHeaders(in Incoming) (headers.List, compat, error) {
	if len(in.Payload) > r.MaxPayload {
		return nil, compat{}, fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, len(in.Payload), r.MaxPayload)
	}
	if err := checkLimits(in.Headers, orDefault(r.MaxHeaders, DefaultMaxHeaders), orDefault(r.MaxHeaderBytes, DefaultMaxHeaderBytes)); err != nil {
		return nil, compat{}, err
	}
	if err := checkReserved(in.Headers); err != nil {
		return nil, compat{}, err
	}
	h, comp, err := translateCompat(in.Headers)
	if err != nil {
		return nil, compat{}, err
	}
	if keys := h.Values(contract.HeaderKafkaKey); len(keys) > 1 {
		return nil, compat{}, fmt.Errorf("%w: %s given %d times", ErrInvalidHeaders, contract.HeaderKafkaKey, len(keys))
	}
	return h, comp, nil
}

// outbound is what a parked message will be delivered as: its target, record key and
// forwarded headers.
type outbound struct {
	target  Target
	key     []byte
	headers headers.List
}

// outgoing is the target, key and forwarded headers of a message with headers h (id: its
// id), checked: the hops count, a tombstone without a payload, and the size the target
// broker takes.
func (r Rules) outgoing(h headers.List, comp compat, in Incoming, id string) (outbound, error) {
	target, err := r.target(h, in.Broker)
	if err != nil {
		return outbound{}, err
	}
	hops, err := parseHops(h, orDefault(r.MaxHops, DefaultMaxHops))
	if err != nil {
		return outbound{}, err
	}
	if target.Broker == BrokerKafka && len(in.Payload) > 0 && contract.Tombstone(h.Values(contract.HeaderKafkaTombstone)) {
		return outbound{}, fmt.Errorf("%w: %s: true with a %d byte payload (a tombstone has no value)",
			ErrInvalidHeaders, contract.HeaderKafkaTombstone, len(in.Payload))
	}
	key := outgoingKey(in.Key, comp)
	forward, err := outgoingHeaders(h, target, key, hops)
	if err != nil {
		return outbound{}, err
	}
	if err := checkOutgoingSize(r.Limits, target.Broker, forward, id, in.Source, key, in.Payload); err != nil {
		return outbound{}, err
	}
	return outbound{target: target, key: key, headers: forward}, nil
}

// chooseID is the id of a message and whether it replaces a pending message of that id:
// x-delay-id (replaces), else the record key of a kafka-message-scheduler schedule
// (replaces), else the source's stable id (a redelivery keeps the parked copy), else a
// new one.
func chooseID(h headers.List, comp compat, in Incoming) (id string, replace bool, err error) {
	ids := h.Values(contract.HeaderID)
	switch {
	case len(ids) > 1:
		return "", false, fmt.Errorf("%w: %s given %d times", ErrInvalidID, contract.HeaderID, len(ids))
	case len(ids) == 1:
		if err := ValidateID(ids[0]); err != nil {
			return "", false, err
		}
		return ids[0], true, nil
	case comp.scheduler && len(in.Key) > 0:
		// kafka-message-scheduler: the record key names the schedule, and a schedule
		// published again with the same key replaces the pending one.
		if err := ValidateID(string(in.Key)); err != nil {
			return "", false, fmt.Errorf("record key of a kafka-message-scheduler schedule: %w", err)
		}
		return string(in.Key), true, nil
	case in.SourceID != "":
		return in.SourceID, false, nil
	}
	return in.NewID(), false, nil
}

// target is the one x-target of h, validated by the target policy.
func (r Rules) target(h headers.List, sourceBroker string) (Target, error) {
	targets := h.Values(contract.HeaderTarget)
	switch len(targets) {
	case 0:
		return Target{}, fmt.Errorf("%w: no %s header", ErrMissingTarget, contract.HeaderTarget)
	case 1:
		return r.Targets.ParseTarget(targets[0], sourceBroker)
	}
	return Target{}, fmt.Errorf("%w: %s given %d times", ErrInvalidTarget, contract.HeaderTarget, len(targets))
}

// outgoingKey is the record key a message is delivered with: its own, except that a
// kafka-message-scheduler schedule is delivered with its scheduler-target-key (or none),
// as that scheduler does.
func outgoingKey(key []byte, comp compat) []byte {
	if !comp.scheduler && !comp.hasKey {
		return key
	}
	if comp.hasKey {
		return []byte(comp.key)
	}
	return nil
}

// outgoingHeaders is the header list a message is parked (and delivered) with: h without
// the control headers, x-delay-hops counted up. For a NATS target it refuses headers NATS
// would alter, and a record key that cannot travel as x-kafka-key.
func outgoingHeaders(h headers.List, target Target, key []byte, hops int) (headers.List, error) {
	forward := h.Without(isDropped)
	if target.Broker == BrokerNATS {
		if err := checkNATSHeaders(forward); err != nil {
			return nil, err
		}
		if key != nil {
			if detail := natsValueProblem(string(key)); detail != "" {
				return nil, fmt.Errorf("%w: the Kafka key (sent as %s) %s", ErrInvalidHeaders, contract.HeaderKafkaKey, detail)
			}
		}
	}
	forward.Add(contract.HeaderHops, strconv.Itoa(hops+1))
	return forward, nil
}

// ErrorText is the x-delay-error value (and the reply's "error") for a rejected message:
// "<reason code>: <detail>".
func ErrorText(err error) string {
	var b strings.Builder
	b.WriteString(Reason(err))
	b.WriteString(": ")
	b.WriteString(err.Error())
	return b.String()
}
