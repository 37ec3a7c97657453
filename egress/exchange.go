package egress

import (
	"context"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// due returns a claim for every owned shard that may be claimed now: started, due by the
// Redis clock estimate within lead (or head unknown), not backing off after an error,
// with room. Each claim also takes what is due within s.ahead (the holder keeps it).
func (s *scheduler) due() []delaystore.ClaimRequest {
	now := s.now()
	if !time.Now().Before(s.view.until) {
		return nil // the membership may have expired: another replica may own these shards
	}
	redisNow := s.clock.redisNow(now.Add(s.lead()))
	batch := s.cfg.BatchSize
	room := replicaCapacity*batch - s.total
	var claims []delaystore.ClaimRequest
	for _, sh := range s.sorted() {
		st := s.shards[sh]
		free := min(shardCapacity*batch-st.inflight, batch, room)
		if free <= 0 || !s.owns(sh) || now.Before(st.startAt) || now.Before(st.retryAt) {
			continue
		}
		if st.head != unknownHead && (st.head < 0 || st.head > redisNow) {
			continue
		}
		claims = append(claims, delaystore.ClaimRequest{Shard: sh, Max: free, Ahead: s.ahead})
		st.inflight += free // reserved; what is not claimed is given back
		s.total += free
		room -= free
	}
	return claims
}

// exchange makes one round trip: settlements and claims. fence is taken before the call:
// the lease runs from a moment after it. It becomes a context deadline, so it is read
// from the process clock, never from s.now (a test clock shifted by
// DELAYBRIDGE_TEST_CLOCK_OFFSET would put it in the past or future).
func (s *scheduler) exchange(ctx context.Context, acks []delaystore.Receipt, retries []delaystore.RetryRequest,
	claims []delaystore.ClaimRequest, settled map[int]int) {
	fence, sent := time.Now(), s.now()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
	x := s.store.Exchange(cctx, acks, retries, claims)
	cancel()
	got := s.now()
	if len(claims) > 0 {
		s.noteRoundTrip(got.Sub(sent))
	}
	s.released(ctx, x.Released, fence)
	s.settled(acks, retries, x, settled)
	for i, req := range claims {
		st := s.shards[req.Shard]
		st.offered = false
		cl, err := x.Claims[i], x.ClaimErrs[i]
		st.inflight -= req.Max - len(cl.Messages) - len(cl.Corrupt)
		s.total -= req.Max - len(cl.Messages) - len(cl.Corrupt)
		if err != nil {
			s.claimFailed(ctx, st, err)
			continue
		}
		st.errs.Reset()
		st.fails.Recovered(ctx, "claim recovered", "shard", st.shard)
		s.clock.observe(cl.Time, sent, got)
		st.head = cl.Next
		if len(cl.Messages)+len(cl.Corrupt) == req.Max {
			st.head = cl.Now // more may be due: claim again at once (capacity permitting)
		}
		s.take(ctx, st.shard, cl, fence)
	}
}

// take hands what a claim (or an ack's release) leased in shard to delivery; fence is
// when the round trip started.
func (s *scheduler) take(ctx context.Context, shard int, cl delaystore.Claim, fence time.Time) {
	if len(cl.Corrupt) > 0 {
		// Never published: delivery dead-letters them (reason corrupt), at once.
		s.metrics.claimed(len(cl.Corrupt))
		s.handed.Add(int64(len(cl.Corrupt)))
		s.deliver(ctx, batch{shard: shard, corrupt: cl.Corrupt, fence: fence}, s.returned)
	}
	if len(cl.Messages) > 0 {
		s.handOff(ctx, batch{shard: shard, claimed: cl.Messages, fence: fence})
	}
}

// released takes the next messages of ordering keys that the round trip's acks released
// and leased (Exchanged.Released): claimed like a claim's, counted in their shard's
// in-flight messages, whether or not the shard is still owned (the lease is this
// replica's either way).
func (s *scheduler) released(ctx context.Context, rel []delaystore.Claim, fence time.Time) {
	for _, cl := range rel {
		n := len(cl.Messages) + len(cl.Corrupt)
		sh := shardOfClaim(cl)
		if st := s.shards[sh]; st != nil { // it is: its acks were in flight
			st.inflight += n
		}
		s.total += n
		s.take(ctx, sh, cl, fence)
	}
}

// shardOfClaim is the shard of a non-empty claim's entries.
func shardOfClaim(cl delaystore.Claim) int {
	if len(cl.Messages) > 0 {
		return cl.Messages[0].Shard
	}
	return cl.Corrupt[0].Shard
}

// claimFailed backs the shard off after a failed claim (no claim of it before retryAt);
// a run of failures is logged once at Warn, then at Debug. This is the one retry with
// backoff that is not a backoff.Retry: the scheduler's goroutine serves every shard and
// never blocks on one, so the retry is a time in the shard's state.
func (s *scheduler) claimFailed(ctx context.Context, st *shardState, err error) {
	if ctx.Err() != nil {
		return
	}
	st.fails.Failed(ctx, "claim failed; retrying with backoff", "shard", st.shard, "err", err)
	st.retryAt = s.now().Add(st.errs.Next())
}

// settled applies the settlement part of an exchange: logs, heads, capacity.
func (s *scheduler) settled(acks []delaystore.Receipt, retries []delaystore.RetryRequest, x delaystore.Exchanged, n map[int]int) {
	if len(acks) > 0 {
		if x.AckErr != nil {
			// The lease expires and the messages are published again (same x-delay-id and
			// Nats-Msg-Id): a duplicate, never a loss.
			s.log.Error("ack after publish; messages will be published again after the lease", "count", len(acks), "err", x.AckErr)
		} else if stale := len(acks) - x.Acked.N; stale > 0 {
			// The lease expired before the target confirmed (a pause, a slow broker): another
			// replica claimed these messages and the store fenced this ack. The copy just
			// published is a duplicate with the same Nats-Msg-Id.
			s.log.Warn("acks fenced: the lease expired before the publish was confirmed; another replica owns these messages",
				"stale", stale, "acks", len(acks))
		}
		s.heads(x.Acked.Heads)
	}
	if len(retries) > 0 {
		if x.RetryErr != nil {
			s.log.Error("schedule retry; messages come back after the lease", "count", len(retries), "err", x.RetryErr)
		} else if stale := len(retries) - x.Retried.N; stale > 0 {
			// As with acks: the lease ran out first (a paused replica whose messages'
			// contexts ended meanwhile); another replica owns these messages.
			s.log.Warn("retries fenced: the lease expired before the publish failed; another replica owns these messages",
				"stale", stale, "retries", len(retries))
		}
		s.heads(x.Retried.Heads) // retries and put-backs may make a head earlier
	}
	for sh, k := range n {
		if st := s.shards[sh]; st != nil {
			st.inflight -= k
			if st.inflight == 0 && !s.owns(sh) {
				delete(s.shards, sh) // lost while its claims were in flight
			}
		}
		s.total -= k
		s.metrics.settled(k)
	}
}
