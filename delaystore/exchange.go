package delaystore

import (
	"context"
	"errors"
	"fmt"
)

// ClaimRequest asks Exchange to claim up to Max due messages of Shard.
type ClaimRequest struct {
	Shard, Max int
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
}

// Exchange is egress's round trip: it settles (acks, then retries and put-backs) and
// claims, all in one pipeline (one script call per shard and kind, in that order, so a
// claim sees the shard as settled). It is Ack, Retry and one Claim per request at the cost
// of one round trip: under steady load the acks of one batch ride with the next claims.
// On Redis Cluster the pipeline is split per node by the client. It blocks until Redis
// answered or ctx is done; errors are reported per part in Exchanged.
func (s *Store) Exchange(ctx context.Context, acks []Receipt, retries []RetryRequest, claims []ClaimRequest) Exchanged {
	out := Exchanged{Claims: make([]Claim, len(claims)), ClaimErrs: make([]error, len(claims))}
	var calls []call // each with its own script
	var ackOrder, retryOrder []int
	if len(acks) > 0 {
		c, order, err := s.ackCalls(acks)
		out.AckErr, ackOrder = err, order
		calls = withScript(calls, s.ack, c)
	}
	if len(retries) > 0 {
		c, order, err := s.retryCalls(retries)
		out.RetryErr, retryOrder = err, order
		calls = withScript(calls, s.retry, c)
	}
	claimAt := make([]int, len(claims)) // index of each claim request's call, -1: none
	for i, r := range claims {
		c, err := s.claimCall(r.Shard, r.Max)
		if err != nil {
			out.ClaimErrs[i], claimAt[i] = err, -1
			continue
		}
		claimAt[i] = len(calls)
		calls = withScript(calls, s.claim, []call{c})
	}
	if len(calls) == 0 {
		return out
	}
	cmds := s.evalOn(ctx, s.rdb, "", nil, calls, false) // NOSCRIPT answers resent with EVAL
	next := 0
	if len(ackOrder) > 0 {
		out.Acked, out.AckErr = readApplied("ack", cmds[next:next+len(ackOrder)], ackOrder)
		next += len(ackOrder)
	}
	if len(retryOrder) > 0 {
		out.Retried, out.RetryErr = readApplied("retry", cmds[next:next+len(retryOrder)], retryOrder)
	}
	for i, at := range claimAt {
		if at < 0 {
			continue
		}
		res, err := cmds[at].Slice()
		if err != nil {
			out.ClaimErrs[i] = fmt.Errorf("claim shard %d: %w", claims[i].Shard, err)
			continue
		}
		out.Claims[i], out.ClaimErrs[i] = parseClaim(claims[i].Shard, res)
	}
	return out
}

// Err joins every error of x.
func (x Exchanged) Err() error {
	return errors.Join(append([]error{x.AckErr, x.RetryErr}, x.ClaimErrs...)...)
}

// withScript sets sc as the script of each of calls and appends them to to.
func withScript(to []call, sc *script, calls []call) []call {
	for _, c := range calls {
		c.sc = sc
		to = append(to, c)
	}
	return to
}
