package delaystore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ClaimRequest asks Exchange to claim up to Max due messages of Shard.
type ClaimRequest struct {
	Shard, Max int
	// Ahead also claims the messages due within Ahead after the Redis time of the claim
	// (score <= now + Ahead), leased like the due ones: the caller holds each until its
	// Claimed.Eligible. Zero (or negative): only what is due.
	Ahead time.Duration
}

// Exchanged is the outcome of Exchange. Each part has its own error: one failed part
// (or one failed shard of a part) does not fail the others.
type Exchanged struct {
	// Acked and AckErr are as Ack's results; Retried and RetryErr as Retry's.
	Acked    Applied
	AckErr   error
	Retried  Applied
	RetryErr error
	// Claims and ClaimErrs are aligned with the claim requests: ClaimErrs[i] != nil means
	// request i claimed nothing (Claims[i] is then empty).
	Claims    []Claim
	ClaimErrs []error
	// Released are the next messages of ordering keys that the acks released and leased
	// at once because they were due (docs/design.md "Ordering keys"): the caller delivers
	// them as claimed messages, one Claim per shard that had some (Now, Time, Messages and
	// Corrupt set; each is eligible at Now). They count in no claim request.
	Released []Claim
}

// Exchange is egress's round trip: it settles (acks, then retries and put-backs) and
// claims, all in one pipeline (one script call per kind on one Redis node, one per shard
// and kind on Redis Cluster: groups.go; in that order, so a claim sees the shard as
// settled). It is Ack, Retry and one Claim per request at the cost of one round trip:
// under steady load the acks of one batch ride with the next claims. On Redis Cluster the
// pipeline is split per node by the client. It blocks until Redis answered or ctx is done;
// errors are reported per part in Exchanged.
func (s *Store) Exchange(ctx context.Context, acks []Receipt, retries []RetryRequest, claims []ClaimRequest) Exchanged {
	out := Exchanged{Claims: make([]Claim, len(claims)), ClaimErrs: make([]error, len(claims))}
	var list callList
	var ackGroups, retryGroups []group
	var ackNames []*nameTable
	var ackAt, retryAt []groupAt
	if len(acks) > 0 {
		claimed := make(map[int]bool, len(claims))
		for _, r := range claims {
			claimed[r.Shard] = true
		}
		ackGroups, ackNames, out.AckErr = s.ackGroups(acks, claimed, true)
		ackAt = list.add(s, s.scripts[scriptAck], ackGroups)
	}
	if len(retries) > 0 {
		retryGroups, out.RetryErr = s.retryGroups(retries)
		retryAt = list.add(s, s.scripts[scriptRetry], retryGroups)
	}
	var claimGroups []group
	var claimReq []int          // the request of each claim group
	var claimNames []*nameTable // the names table each claim group named
	for i, r := range claims {
		g, names, err := s.claimGroup(r.Shard, r.Max, r.Ahead)
		if err != nil {
			out.ClaimErrs[i] = err
			continue
		}
		claimGroups, claimReq, claimNames = append(claimGroups, g), append(claimReq, i), append(claimNames, names)
	}
	claimAt := list.add(s, s.scripts[scriptClaim], claimGroups)
	if len(list.calls) == 0 {
		return out
	}
	res := s.runList(ctx, &list, false)
	if len(ackGroups) > 0 {
		replies := res.pick(ackAt)
		out.Acked, out.AckErr = readApplied("ack", replies, ackGroups)
		released, err := s.readReleased(replies, ackGroups, ackNames)
		out.Released, out.AckErr = released, errors.Join(out.AckErr, err)
	}
	if len(retryGroups) > 0 {
		out.Retried, out.RetryErr = readApplied("retry", res.pick(retryAt), retryGroups)
	}
	for k, reply := range res.pick(claimAt) {
		i := claimReq[k]
		res, err := reply.slice()
		if err != nil {
			out.ClaimErrs[i] = fmt.Errorf("claim shard %d: %w", claims[i].Shard, err)
			continue
		}
		out.Claims[i], out.ClaimErrs[i] = s.parseClaim(claims[i].Shard, claimNames[k], res)
	}
	return out
}

// readReleased reads the released messages the ack groups leased, replies aligned with
// groups and names (the tables they named); a failed group has none.
func (s *Store) readReleased(replies []groupReply, groups []group, names []*nameTable) ([]Claim, error) {
	var out []Claim
	var errs []error
	for gi, g := range groups {
		res, err := replies[gi].slice()
		if err != nil {
			continue // readApplied reported it
		}
		c, err := s.parseReleased(g.shard, names[gi], res)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(c.Messages)+len(c.Corrupt) > 0 {
			out = append(out, c)
		}
	}
	return out, errors.Join(errs...)
}

// Err joins every error of x.
func (x Exchanged) Err() error {
	return errors.Join(append([]error{x.AckErr, x.RetryErr}, x.ClaimErrs...)...)
}
