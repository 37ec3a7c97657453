package egress

import (
	"errors"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/schedule"
)

// fired adds the end of o's firing (published, or dead-lettered) to st: an ack, or for a
// recurring message (x-delay-every) its next occurrence, which the store parks in the
// script that fences the firing (delaystore.RetryRequest.Next): the message is never
// gone nor twice there. The next occurrence comes from the schedule, not from the late
// firing (internal/schedule: an interval counts from the firing's due time), so no
// occurrence is lost: those missed while nothing could fire (an outage, a takeover) fire
// late, one after the other, in order. Only a firing that expired (x-delay-expires) skips
// the occurrences that have expired too: the next one is the first still within its
// expiry at the time of this firing. A schedule that no longer parses or has no next
// occurrence ends the message with this firing (logged at Error).
func (e *Egress) fired(st *settlement, o *outgoing) {
	c := o.claimed
	if c.Envelope.Every == "" {
		st.acks = append(st.acks, c.Receipt)
		return
	}
	after := c.Due
	if exp := (*expiredError)(nil); errors.As(o.err, &exp) {
		after = max(c.Due, exp.at-c.Envelope.Expires.Milliseconds())
	}
	next, err := nextFiring(c, after)
	if err != nil || next <= c.Due {
		e.log.Error("recurring message has no next occurrence: this was its last firing", "id", c.ID,
			"every", c.Envelope.Every, "err", err)
		st.acks = append(st.acks, c.Receipt)
		return
	}
	st.retries = append(st.retries, delaystore.RetryRequest{Receipt: c.Receipt, Next: next})
}

// nextFiring is the due time (unix ms) of the first occurrence of c's schedule after its
// due time and after (unix ms), 0 when there is none.
func nextFiring(c delaystore.Claimed, after int64) (int64, error) {
	every, err := schedule.Parse(c.Envelope.Every, time.UnixMilli(after))
	if err != nil {
		return 0, err
	}
	next := every.Next(time.UnixMilli(c.Due), time.UnixMilli(after))
	if next.IsZero() {
		return 0, nil
	}
	return next.UnixMilli(), nil
}
