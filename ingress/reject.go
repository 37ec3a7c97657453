package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// reject sends msg to the dead-letter subject of its broker, with all its headers and
// x-delay-error, then acks it (with an error reply for a request). It does not wait for
// the publish: the dead letter is written by a goroutine of its own (deadLetters), so
// that a dead-letter subject that is missing or failing holds only this message, never
// the other messages, partitions or lanes of its source. Until its dead letter is
// written the message stays neither acked nor nacked: a Kafka partition's commit point
// stays before it (the records after it are parked and acked, and committed once it
// is), a JetStream message stays pending (reported in progress), a core NATS request
// waits for its reply. A redelivery of a message whose dead letter is still being
// retried (the same source id: JetStream after MaxProgress, Kafka after a rebalance)
// joins it and is settled with it, so that it is dead-lettered once. If the publish
// cannot be done before ctx ends, the message (and every copy that joined it) is nacked.
// reject blocks only while maxDeadLetters dead letters are under way (back-pressure).
func (in *Ingress) reject(ctx context.Context, src Source, msg *headers.Received, cause error) {
	if in.dead.join(msg) {
		return
	}
	in.dead.slots <- struct{}{}
	in.dead.wg.Go(func() {
		defer func() { <-in.dead.slots }()
		in.deadLetter(ctx, src, msg, cause)
	})
}

// maxDeadLetters bounds the dead letters of one Ingress under way at a time (published
// or waiting for their next attempt): beyond it, reading a source waits. The sources
// bound them first: a Kafka partition holds at most its MaxInFlight records past its
// commit point, a JetStream consumer MaxAckPending messages.
const maxDeadLetters = 4096

// deadLetters is the dead-letter writing of an Ingress: the goroutines that publish dead
// letters, the messages waiting for theirs by source id, and how their failures are
// logged. Safe for concurrent use.
type deadLetters struct {
	slots chan struct{} // a token per dead letter under way (maxDeadLetters)
	wg    sync.WaitGroup
	mu    sync.Mutex
	// held maps the source id of a message whose dead letter is under way to the copies
	// of it received meanwhile (the first included).
	held map[string][]*headers.Received
	// streak logs failed publishes per broker: Warn at the first of a run (and once a
	// minute while it lasts), Info at recovery; not once per message.
	streak map[string]*backoff.Streak
	log    *slog.Logger
}

func newDeadLetters(log *slog.Logger) *deadLetters {
	return &deadLetters{slots: make(chan struct{}, maxDeadLetters), held: map[string][]*headers.Received{},
		streak: map[string]*backoff.Streak{}, log: log}
}

// streakOf is broker's streak; d.mu is held.
func (d *deadLetters) streakOf(broker string) *backoff.Streak {
	s := d.streak[broker]
	if s == nil {
		s = &backoff.Streak{Log: d.log, Every: time.Minute}
		d.streak[broker] = s
	}
	return s
}

// join adds msg to the copies of its source message whose dead letter is under way and
// reports true, or, when there is none (or msg has no source id), registers msg as the
// first and reports false.
func (d *deadLetters) join(msg *headers.Received) bool {
	if msg.SourceID == "" {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if copies, ok := d.held[msg.SourceID]; ok {
		d.held[msg.SourceID] = append(copies, msg)
		return true
	}
	d.held[msg.SourceID] = []*headers.Received{msg}
	return false
}

// done returns the copies of msg's source message (msg alone when it has no source id)
// and forgets them: a later copy starts a dead letter of its own.
func (d *deadLetters) done(msg *headers.Received) []*headers.Received {
	if msg.SourceID == "" {
		return []*headers.Received{msg}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	copies := d.held[msg.SourceID]
	delete(d.held, msg.SourceID)
	return copies
}

// failed logs a failed dead-letter publish on broker's streak.
func (d *deadLetters) failed(ctx context.Context, broker string, msg *headers.Received, subject string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	waiting := len(d.held)
	d.streakOf(broker).Failed(ctx, "dead-letter publish failed; retrying: the message waits unacked (its Kafka partition is not committed past it, its JetStream message stays pending), the others go on",
		"broker", broker, "dlq", subject, "id", logID(msg), "source_id", msg.SourceID, "waiting", waiting, "error", err)
}

// recovered ends broker's streak of failures (logged at Info when there was one).
func (d *deadLetters) recovered(ctx context.Context, broker, subject string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.streakOf(broker).Recovered(ctx, "dead-letter publish recovered", "broker", broker, "dlq", subject)
}

// deadLetter publishes the dead letter of msg, retrying with backoff (RetryMin to
// RetryMax) until it is written or ctx ends, then acks msg and the copies that joined it
// (nacks them when ctx ended first).
func (in *Ingress) deadLetter(ctx context.Context, src Source, msg *headers.Received, cause error) {
	text := intake.ErrorText(cause)
	dead := deadLetter(msg)
	if src.Broker == intake.BrokerNATS {
		dead.Metadata = disarmNATSHeaders(dead.Metadata)
	}
	dead.Metadata.Set(contract.HeaderError, text)
	wait := backoff.Backoff{Min: in.cfg.RetryMin, Max: in.cfg.RetryMax}
	var err error
	for {
		err = in.publishDeadLetter(ctx, src, msg, &dead)
		if err == nil {
			if wait.Failing() {
				in.dead.recovered(ctx, src.Broker, in.cfg.DLQSubject)
			}
			break
		}
		if ctx.Err() != nil {
			break
		}
		in.dead.failed(ctx, src.Broker, msg, in.cfg.DLQSubject, err)
		if !backoff.Sleep(ctx, wait.Next()) {
			break
		}
	}
	copies := in.dead.done(msg)
	if err != nil {
		for _, c := range copies {
			c.Nack()
		}
		in.metrics.Count(src.Broker, "nacked", len(copies))
		return
	}
	reply := replyJSON(struct {
		Error string `json:"error"`
	}{text})
	for _, c := range copies {
		c.Ack(reply)
	}
	in.log.Debug("rejected", "id", logID(msg), "broker", src.Broker, "topic", src.Topic, "reason", intake.Reason(cause), "copies", len(copies))
	in.metrics.Invalid(src.Broker, intake.Reason(cause))
}

// publishDeadLetter makes one attempt to publish *dead (bounded by opTimeout, not
// cancelled with ctx, so that a message read before shutdown is still dead-lettered
// during the drain). A dead letter the broker refuses as too large is sent without its
// payload instead, and *dead becomes that one.
func (in *Ingress) publishDeadLetter(ctx context.Context, src Source, msg *headers.Received, dead **message.Message) error {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	(*dead).SetContext(opCtx)
	err := in.dlq[src.Broker].Publish(in.cfg.DLQSubject, *dead)
	if tooLarge(err) && len((*dead).Payload) > 0 {
		// The dead letter (the message plus x-delay-error) is more than the broker
		// takes: send it without its payload rather than retry it forever.
		in.log.Warn("dead letter too large; dead-lettering it without its payload", "id", logID(msg), "size", len((*dead).Payload))
		*dead = withoutPayload(*dead)
		(*dead).SetContext(opCtx)
		err = in.dlq[src.Broker].Publish(in.cfg.DLQSubject, *dead)
	}
	return err
}

// deadLetter is the watermill message of msg's dead letter, before x-delay-error: its id
// (a new one when it has none), payload, headers, and the reserved metadata that
// publishers read (the Kafka key and tombstone) with its source time.
func deadLetter(msg *headers.Received) *message.Message {
	id := msg.ID
	if id == "" {
		id = watermill.NewULID()
	}
	extra := map[string]string{}
	if msg.SourceTime != "" {
		extra[headers.MetaSourceTime] = msg.SourceTime
	}
	if msg.Key != nil {
		extra[headers.MetaKafkaKey] = string(msg.Key)
	}
	if msg.Tombstone {
		extra[headers.MetaKafkaTombstone] = "1"
	}
	if msg.Request {
		extra[headers.MetaRequest] = "1"
	}
	dead := message.NewMessage(id, msg.Payload)
	dead.Metadata = headers.ToMetadata(msg.Headers, extra)
	return dead
}

// tooLarge reports whether err is (or wraps) a broker's permanent refusal of a message
// as too large (an error with RejectReason() "too_large", as the adapters make).
func tooLarge(err error) bool {
	var r interface{ RejectReason() string }
	return errors.As(err, &r) && r.RejectReason() == "too_large"
}

// withoutPayload is a copy of dead with an empty payload and contract.HeaderOriginalSize.
func withoutPayload(dead *message.Message) *message.Message {
	out := message.NewMessage(dead.UUID, nil)
	for k, v := range dead.Metadata {
		out.Metadata.Set(k, v)
	}
	list := headers.FromMetadata(out.Metadata)
	list.Add(contract.HeaderOriginalSize, strconv.Itoa(len(dead.Payload)))
	extra := map[string]string{}
	for k, v := range out.Metadata {
		if headers.IsReserved(k) && k != headers.MetaHeaders {
			extra[k] = v
		}
	}
	out.Metadata = headers.ToMetadata(list, extra)
	return out
}

// replyJSON encodes a reply body without HTML escaping (error texts quote subjects such
// as orders.> verbatim). The reply structs always encode.
func replyJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}
