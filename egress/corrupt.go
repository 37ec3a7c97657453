package egress

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// deadLetterCorrupt dead-letters the corrupt entries of one claim (delaystore.Corrupt:
// the bridge cannot tell their target for sure, so they are never published; docs/contract.md
// section 3, "Only its own target") with reason corrupt, and returns their settlement: an ack
// for each whose dead letter was confirmed (the fenced ack, so a cancel or replace since
// the claim is respected), a retry BackoffMax ahead for the others, logged at Error and
// counted as dead_letter_failed (one whose stored header is unreadable, version 0,
// cannot be re-scored: it comes back after its lease). Nothing is dead-lettered before
// the batch's entries are all eligible (claimed ahead: their due time), nor past the
// claim's fence (4/5 of the lease, as publish). Its context is detached from ctx and
// bounded as runGroup's. It blocks on the dead-letter publishes.
func (d *delivery) deadLetterCorrupt(ctx context.Context, b batch) *settlement {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.DrainTimeout)
	defer cancel()
	mctx := dctx
	if d.cfg.Lease > 0 {
		var mcancel context.CancelFunc
		mctx, mcancel = context.WithDeadline(dctx, b.fence.Add(d.cfg.Lease*4/5))
		defer mcancel()
	}
	d.waitEligible(mctx, b.corrupt)
	st := &settlement{shard: b.shard, n: len(b.corrupt), fence: b.fence}
	var failed []string
	var firstErr, why error // the first failed dead letter's error; why the first dead-lettered entry is corrupt
	for _, c := range b.corrupt {
		broker := d.corruptBroker(c.Envelope)
		err := mctx.Err()
		if err != nil {
			// Past the claim's fence, as publish: the entry may be claimed again or
			// cancelled by now.
			err = fmt.Errorf("dead letter of %s after the claim's fence: %w", c.ID, err)
		} else {
			err = d.publishCorrupt(mctx, broker, c)
		}
		if err != nil {
			d.metrics.out(broker, "dead_letter_failed")
			failed = append(failed, c.ID)
			if firstErr == nil {
				firstErr = err
			}
			if c.Version != 0 {
				st.retries = append(st.retries, delaystore.RetryRequest{Receipt: c.Receipt, Backoff: d.cfg.BackoffMax})
			}
			continue
		}
		d.metrics.deadLettered(broker, contract.ReasonCorrupt)
		if why == nil {
			why = c.Err
		}
		st.acks = append(st.acks, c.Receipt)
	}
	if n := len(st.acks); n > 0 {
		d.log.Error("corrupt entries in the delay store (their target cannot be told for sure): dead-lettered, not published",
			"reason", contract.ReasonCorrupt, "count", n, "shard", b.shard, "first_id", st.acks[0].ID, "err", why)
	}
	if len(failed) > 0 {
		d.log.Error("dead letter of corrupt entries failed; they stay in the store and are tried again after the maximum backoff",
			"count", len(failed), "shard", b.shard, "first_id", failed[0], "backoff", d.cfg.BackoffMax, "err", firstErr)
	}
	return st
}

// waitEligible waits until the Redis clock estimate reaches the latest Eligible of cs
// (the holder's rule for claimed messages), or ctx ends.
func (d *delivery) waitEligible(ctx context.Context, cs []delaystore.Corrupt) {
	var at int64
	for _, c := range cs {
		at = max(at, c.Eligible)
	}
	wait := d.clock.local(at).Sub(d.now())
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// corruptBroker is the broker whose dead-letter subject takes a corrupt entry: its
// source's when the source survived and its broker is configured, else its target's on
// the same terms, else the first configured of nats and kafka (then any other, by name:
// New refuses no publishers).
func (d *delivery) corruptBroker(env delaystore.Envelope) string {
	for _, name := range []string{env.Source, env.Target} {
		if b, _, ok := strings.Cut(name, ":"); ok && d.publishers[b] != nil {
			return b
		}
	}
	for _, b := range []string{"nats", "kafka"} {
		if d.publishers[b] != nil {
			return b
		}
	}
	first := ""
	for b := range d.publishers {
		if first == "" || b < first {
			first = b
		}
	}
	return first
}

// publishCorrupt publishes the dead letter of c to broker's dead-letter subject; one the
// subject refuses as too large is sent again without its payload (as deadLetter does).
func (d *delivery) publishCorrupt(ctx context.Context, broker string, c delaystore.Corrupt) error {
	pub := d.publishers[broker]
	err := pub.Publish(d.cfg.DLQSubject, corruptMessage(ctx, broker, c, true))
	if r, ok := rejected(err); ok && r == contract.ReasonTooLarge && len(c.Envelope.Payload) > 0 {
		err = pub.Publish(d.cfg.DLQSubject, corruptMessage(ctx, broker, c, false))
	}
	if err != nil {
		return fmt.Errorf("dead-letter corrupt entry %s: %w", c.ID, err)
	}
	return nil
}

// corruptMessage is the dead letter of corrupt entry c on broker: its salvaged headers
// (reserved ones left out), x-delay-id (the message id), x-delay-source and x-target
// when they survived, x-delay-error "corrupt: <why>", and the salvaged payload
// (withPayload) or instead x-delay-original-size; the key and tombstone mark as
// outputHeaders carries them to that broker. Its id is "<id>:<version>:dlq".
func corruptMessage(ctx context.Context, broker string, c delaystore.Corrupt, withPayload bool) *message.Message {
	env := c.Envelope
	hs := make(headers.List, 0, len(env.Headers)+6)
	for _, h := range env.Headers {
		if !headers.IsReserved(h.Key) {
			hs = append(hs, h)
		}
	}
	hs.Add(contract.HeaderID, c.ID)
	if env.Source != "" {
		hs.Add(contract.HeaderSource, env.Source)
	}
	if env.Target != "" {
		hs.Add(contract.HeaderTarget, env.Target)
	}
	hs.Add(contract.HeaderError, fmt.Sprintf("%s: %v", contract.ReasonCorrupt, c.Err))
	out := headers.Message{ID: c.ID + ":" + strconv.FormatInt(c.Version, 10) + ":dlq"}
	if withPayload {
		out.Payload = env.Payload
	} else {
		hs.Add(contract.HeaderOriginalSize, strconv.Itoa(len(env.Payload)))
	}
	toKafka := broker == "kafka"
	switch {
	case env.Key != nil && toKafka:
		out.Key = env.Key
	case env.Key != nil:
		if _, ok := env.Headers.Get(contract.HeaderKafkaKey); !ok {
			hs.Add(contract.HeaderKafkaKey, string(env.Key))
		}
	}
	switch {
	case env.Tombstone && toKafka:
		out.Tombstone = true
	case env.Tombstone && !contract.Tombstone(env.Headers.Values(contract.HeaderKafkaTombstone)):
		hs.Add(contract.HeaderKafkaTombstone, "true")
	}
	out.Headers = hs
	msg := toMessage(out)
	msg.SetContext(ctx)
	return msg
}
