package egress

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/schedule"
)

// fired adds the end of o's firing (published, or dead-lettered) to st: an ack, or for a
// recurring message (x-delay-every) its next occurrence, which the store parks in the
// script that fences the firing (delaystore.RetryRequest.Next): the message is never
// gone nor twice there. The next occurrence is the schedule's first after the firing's
// due time (internal/schedule: an interval counts from it, so a late firing does not
// shift the ones after it). Occurrences missed while nothing could fire (an outage, a
// failing target, a takeover, a first occurrence in the past) were dealt with when the
// firing was taken (misfires, by x-delay-misfire): with once the firing's due time is
// the latest missed occurrence, so the next one lies after the claim; with all it is the
// oldest of at most schedule.MaxCatchUp, and the ones after it follow at once, in order.
// Only a firing that expired (x-delay-expires) skips the occurrences that have expired
// too: the next one is the first still within its expiry at the time of this firing. A
// schedule that no longer parses or has no next occurrence ends the message with this
// firing (logged at Error), and so does one whose next occurrence lies more than
// BRIDGE_MAX_DELAY (Config.MaxDelay) after now, the Redis time of the settlement (a cron
// expression's gap: 29 February, then four years): every due time the bridge parks is
// bounded, as ingress bounds the first (schedule.Every.Within). Both count as
// delaybridge_messages_out_total{result="schedule_ended"}. With a spread window
// (x-delay-window) the next firing is the time drawn in the next occurrence's window
// (nextFiring).
func (d *delivery) fired(st *settlement, o *outgoing, now int64) {
	c := o.claimed
	if c.Envelope.Every == "" {
		st.acks = append(st.acks, c.Receipt)
		st.release = st.release || c.Envelope.OrderingKey != ""
		return
	}
	after := c.Due
	if exp := (*expiredError)(nil); errors.As(o.err, &exp) {
		after = max(c.Due, exp.at-c.Envelope.Expires.Milliseconds())
	}
	next, err := nextFiring(c, after)
	switch {
	case err != nil || next <= c.Due:
		d.log.Error("recurring message has no next occurrence: this was its last firing", "id", c.ID,
			"every", c.Envelope.Every, "err", err)
	case !d.withinMaxDelay(next, now):
		d.log.Error("recurring message's next occurrence lies beyond BRIDGE_MAX_DELAY: this was its last firing", "id", c.ID,
			"every", c.Envelope.Every, "next", time.UnixMilli(next).UTC().Format(time.RFC3339), "max_delay", d.cfg.MaxDelay)
	default:
		st.retries = append(st.retries, delaystore.RetryRequest{Receipt: c.Receipt, Next: next})
		return
	}
	d.metrics.out(o.broker, "schedule_ended")
	st.acks = append(st.acks, c.Receipt)
}

// withinMaxDelay reports whether a next occurrence at next (unix ms) lies at most
// Config.MaxDelay after now (unix ms, the Redis clock): contract.Horizon, as every due
// time computed from input. MaxDelay <= 0: always.
func (d *delivery) withinMaxDelay(next, now int64) bool {
	if d.cfg.MaxDelay <= 0 {
		return true
	}
	_, err := contract.Horizon{Now: now, MaxDelay: d.cfg.MaxDelay}.At(next)
	return err == nil
}

// nextFiring is the due time (unix ms) of the first occurrence of c's schedule after its
// due time and after (unix ms), 0 when there is none. With a spread window
// (x-delay-window) it is the time drawn in that occurrence's window
// (schedule.Every.NextSpread: the occurrences stay on the schedule, an interval counting
// from the message's Envelope.Anchor, so the spread never accumulates).
func nextFiring(c delaystore.Claimed, after int64) (int64, error) {
	every, err := schedule.Parse(c.Envelope.Every, time.UnixMilli(after))
	if err != nil {
		return 0, err
	}
	if c.Envelope.Window > 0 {
		return every.NextSpread(c.ID, c.Due, c.Envelope.Anchor, after, c.Envelope.Window), nil
	}
	next := every.Next(time.UnixMilli(c.Due), time.UnixMilli(after))
	if next.IsZero() {
		return 0, nil
	}
	return next.UnixMilli(), nil
}

// misfires applies x-delay-misfire to the recurring messages of a claimed group taken
// for delivery at now (Redis clock, unix ms), before anything else looks at them. A
// firing whose occurrence was missed (schedule.Every.Missed: taken at or after the next
// occurrence, or a minute late) fires as the occurrence its policy names
// (schedule.Every.CatchUp: its Due, so its x-delay-due and its expiry, become that one)
// or, under skip, not at all: it is returned in skipped, parked for the schedule's first
// occurrence after now in the same fenced script as any next firing. The others are
// returned in fire unchanged; a schedule that no longer parses is left to fired.
func (d *delivery) misfires(claimed []delaystore.Claimed, now int64) (fire []delaystore.Claimed, skipped []delaystore.RetryRequest) {
	if !slices.ContainsFunc(claimed, func(c delaystore.Claimed) bool { return c.Envelope.Every != "" }) {
		return claimed, nil // no recurring message: nothing to copy (the usual group)
	}
	fire = make([]delaystore.Claimed, 0, len(claimed))
	for _, c := range claimed {
		if c.Envelope.Every == "" {
			fire = append(fire, c)
			continue
		}
		every, err := schedule.Parse(c.Envelope.Every, time.UnixMilli(now))
		if err != nil {
			fire = append(fire, c)
			continue
		}
		policy, err := schedule.ParseMisfire(c.Envelope.Misfire)
		if err != nil {
			d.log.Warn("recurring message with an unknown misfire policy: fired as once", "id", c.ID, "err", err)
		}
		due := time.UnixMilli(c.Due)
		at, ok := every.CatchUp(due, time.UnixMilli(now), policy)
		if !ok {
			if next, _ := nextFiring(c, now); next > 0 && d.withinMaxDelay(next, now) {
				skipped = append(skipped, delaystore.RetryRequest{Receipt: c.Receipt, Next: next})
				d.log.Debug("missed occurrences skipped", "id", c.ID, "due", c.Due, "next", next)
				continue
			}
		}
		if ok && !at.Equal(due) {
			d.log.Debug("missed occurrences fire as one", "id", c.ID, "misfire", policy.String(), "due", c.Due, "as", at.UnixMilli())
			c.Due = at.UnixMilli()
		}
		fire = append(fire, c)
	}
	if len(skipped) > 0 {
		broker, _, _ := strings.Cut(claimed[0].Envelope.Target, ":")
		d.metrics.count(broker, "misfire_skipped", len(skipped))
	}
	return fire, skipped
}
