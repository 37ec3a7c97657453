package delaystore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
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
	var calls []scriptCall
	var ackOrder, retryOrder []int
	if len(acks) > 0 {
		c, order, err := s.ackCalls(acks)
		out.AckErr, ackOrder = err, order
		calls = appendCalls(calls, s.ack, c)
	}
	if len(retries) > 0 {
		c, order, err := s.retryCalls(retries)
		out.RetryErr, retryOrder = err, order
		calls = appendCalls(calls, s.retry, c)
	}
	claimAt := make([]int, len(claims)) // index of each claim request's call, -1: none
	for i, r := range claims {
		c, err := s.claimCall(r.Shard, r.Max)
		if err != nil {
			out.ClaimErrs[i], claimAt[i] = err, -1
			continue
		}
		claimAt[i] = len(calls)
		calls = append(calls, scriptCall{s.claim, c})
	}
	if len(calls) == 0 {
		return out
	}
	cmds := s.evalMixed(ctx, calls)
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

// scriptCall is one call of one script in a mixed pipeline.
type scriptCall struct {
	sc *script
	call
}

func appendCalls(to []scriptCall, sc *script, calls []call) []scriptCall {
	for _, c := range calls {
		to = append(to, scriptCall{sc, c})
	}
	return to
}

// evalMixed runs calls of several scripts in one pipeline by SHA; the ones answered
// NOSCRIPT did not run and are sent again with EVAL in a second pipeline. Errors are
// left in the returned commands.
func (s *Store) evalMixed(ctx context.Context, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := s.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.sc.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	var again []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds
	}
	pipe = s.rdb.Pipeline()
	for _, i := range again {
		cmds[i] = calls[i].sc.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}
