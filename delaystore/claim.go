package delaystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// headNotRead is ack.lua's head when it was not read (a claim of the shard followed).
const headNotRead = -2

// Applied is the outcome of Ack or Retry.
type Applied struct {
	// N counts the receipts that were applied; stale receipts (fenced) are not counted.
	N int
	// Heads maps every shard the call touched to its earliest score after the call (unix
	// ms, Redis clock), or -1 when the shard is empty; in Exchange, the shards also claimed
	// are left out (Claim.Next is their head after both).
	Heads map[int]int64
}

// Claim leases up to limit due messages of one shard (score <= Redis time): each is
// re-scored to Now + Lease, the token of its Receipt. Nothing is ever returned before its
// due time. Entries whose envelope cannot be decoded are leased too and reported in
// Claim.Corrupt instead of Messages, with what survives of each (Corrupt). Claim blocks
// until Redis answered or ctx is done; concurrent claims on one shard never return the
// same message under the same lease.
func (s *Store) Claim(ctx context.Context, shard, limit int) (Claim, error) {
	g, names, err := s.claimGroup(shard, limit, 0)
	if err != nil {
		return Claim{}, err
	}
	c := packedCall([]group{g})
	reply := splitReply(s.scripts[scriptClaim].Run(ctx, s.rdb, c.keys, c.args...), 1)[0]
	res, err := reply.slice()
	if err != nil {
		return Claim{}, fmt.Errorf("claim shard %d: %w", shard, err)
	}
	return s.parseClaim(shard, names, res)
}

// claimGroup is the claim script's group for one shard: up to limit messages due by
// Redis time + ahead (<= 0: due now). It returns the table of the shard's names whose
// generation the group names: parseClaim decodes with it when the script answers that
// the shard's names are still at that generation.
func (s *Store) claimGroup(shard, limit int, ahead time.Duration) (group, *nameTable, error) {
	if err := s.checkShard(shard); err != nil {
		return group{}, nil, fmt.Errorf("claim: %w", err)
	}
	if limit < 1 {
		return group{}, nil, fmt.Errorf("claim shard %d: limit %d < 1", shard, limit)
	}
	names := s.names.table(shard)
	return group{shard: shard, keys: s.keys[shard].claim, args: []any{s.leaseMS, limit, max(ahead.Milliseconds(), 0), names.gen}}, names, nil
}

// parseClaim reads the claim script's answer for shard, decoding the bodies with names
// (the table the call named) or, when the script answered the shard's names whole, with
// those (which then become the book's table of the shard). A code the table the entries
// were read with does not hold is a corrupt entry. It does not block.
func (s *Store) parseClaim(shard int, names *nameTable, res []any) (Claim, error) {
	const head = 5 // now, token, next, names, now's microseconds
	if len(res) < head || (len(res)-head)%3 == 2 {
		return Claim{}, fmt.Errorf("claim shard %d: unexpected reply of %d values", shard, len(res))
	}
	rel, res, err := releasesOf(res, head)
	if err != nil {
		return Claim{}, fmt.Errorf("claim shard %d: %w", shard, err)
	}
	if all, ok := res[3].([]any); ok {
		names = parseTable(pairsOf(all), shard, s.shards)
		s.names.adopt(shard, names)
	}
	now, err1 := toInt64(res[0])
	token, err2 := toInt64(res[1])
	next, err3 := toInt64(res[2])
	us, err4 := toInt64(res[4])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Claim{}, fmt.Errorf("claim shard %d: %w", shard, err)
	}
	c := Claim{Now: now, Next: next, Time: time.UnixMicro(now*1000 + us)}
	err = c.entries(shard, token, names, res[head:], func(k int, at int64) (int64, int64) { return max(at, now), rel[k] })
	if err != nil {
		return Claim{}, fmt.Errorf("claim shard %d: %w", shard, err)
	}
	return c, nil
}

// entries decodes the leased entries of a claim or an ack reply (in threes: id, stored
// body, v) into c.Messages and c.Corrupt, under token, with names; times(k, v) returns
// the k-th entry's Eligible and Released.
func (c *Claim) entries(shard int, token int64, names *nameTable, res []any, times func(k int, v int64) (eligible, released int64)) error {
	if n := len(res) / 3; n > 0 {
		c.Messages = make([]Claimed, 0, n)
	}
	for i := 0; i+2 < len(res); i += 3 {
		id, ok1 := res[i].(string)
		raw, ok2 := res[i+1].(string)
		v, ok3 := res[i+2].(int64)
		if !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("unexpected reply types %T, %T, %T", res[i], res[i+1], res[i+2])
		}
		rc := Receipt{ID: id, Shard: shard, Token: token}
		st, env, err := decodeStored(raw, id, names)
		rc.Version = st.version
		eligible, released := times(i/3, v)
		if err != nil {
			c.Corrupt = append(c.Corrupt, Corrupt{Receipt: rc, Eligible: eligible, Envelope: salvageStored(raw, id, names), Err: err})
			continue
		}
		c.Messages = append(c.Messages, Claimed{Receipt: rc, Due: st.due, Eligible: eligible, Attempts: st.attempts,
			Released: released, Envelope: env})
	}
	return nil
}

// parseReleased reads the released messages an ack group of shard leased (ack.lua: the
// values after the group's count and head: token, now, then id, body, release time per
// message), decoded with names, the table the group named; a reply without them is an
// empty Claim. Only Now, Time, Messages and Corrupt are set: each is eligible now.
func (s *Store) parseReleased(shard int, names *nameTable, res []any) (Claim, error) {
	if len(res) <= 2 {
		return Claim{}, nil
	}
	if len(res) < 4 || (len(res)-4)%3 != 0 {
		return Claim{}, fmt.Errorf("ack shard %d: unexpected reply of %d values", shard, len(res))
	}
	token, err1 := toInt64(res[2])
	now, err2 := toInt64(res[3])
	if err := errors.Join(err1, err2); err != nil {
		return Claim{}, fmt.Errorf("ack shard %d: %w", shard, err)
	}
	c := Claim{Now: now, Next: -1, Time: time.UnixMilli(now)}
	err := c.entries(shard, token, names, res[4:], func(_ int, released int64) (int64, int64) { return now, released })
	if err != nil {
		return Claim{}, fmt.Errorf("ack shard %d: %w", shard, err)
	}
	return c, nil
}

// releasesOf splits the claim script's optional last value, the releases ({place,
// release ms, ...}), from a group's reply res (head values, then the entries in threes):
// it returns the release ms by place (nil when the reply has none: every entry 0) and the
// reply without them.
func releasesOf(res []any, head int) (map[int]int64, []any, error) {
	if (len(res)-head)%3 != 1 {
		return nil, res, nil
	}
	last := len(res) - 1
	pairs, ok := res[last].([]any)
	if !ok || len(pairs)%2 != 0 {
		return nil, nil, fmt.Errorf("unexpected releases %T of %d values", res[last], len(pairs))
	}
	rel := make(map[int]int64, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		place, ok1 := pairs[i].(int64)
		at, ok2 := pairs[i+1].(int64)
		if !ok1 || !ok2 || place < 0 || place >= int64(last-head)/3 {
			return nil, nil, fmt.Errorf("unexpected release %v at %v", pairs[i+1], pairs[i])
		}
		rel[int(place)] = at
	}
	return rel, res[:last], nil
}

// Ack deletes delivered messages. A receipt applies only while its claim is current (same
// token and version); a stale or repeated one changes nothing and is not counted. A deleted
// message with a source id leaves a tombstone for Config.TombstoneTTL (see Park). It sends
// one script call per shard in one pipelined round trip and blocks until Redis answered or
// ctx is done. On error, Applied still reports the shards that succeeded; acking the same
// receipts again is harmless.
func (s *Store) Ack(ctx context.Context, rs []Receipt) (Applied, error) {
	if len(rs) == 0 {
		return Applied{}, nil
	}
	groups, _, err := s.ackGroups(rs, nil, false)
	if err != nil {
		return Applied{}, err
	}
	return s.runFenced(ctx, "ack", s.scripts[scriptAck], groups)
}

// runFenced runs the groups of ack or retry (sc) in one round trip and reads their
// answers.
func (s *Store) runFenced(ctx context.Context, op string, sc *script, groups []group) (Applied, error) {
	var list callList
	at := list.add(s, sc, groups)
	return readApplied(op, s.runList(ctx, &list, false).pick(at), groups)
}

// ackGroups builds Ack's script groups, one per shard; the shards in claimed are claimed
// in the same round trip, after the acks: their heads are read by the claim, not the ack.
// With lease, the acks lease the next messages of ordering keys they release that are due
// (Exchanged.Released); names holds the table of the shard's names each group named.
func (s *Store) ackGroups(rs []Receipt, claimed map[int]bool, lease bool) (groups []group, names []*nameTable, err error) {
	leaseMS := "0"
	if lease {
		leaseMS = strconv.FormatInt(s.leaseMS, 10)
	}
	lead := func(sh int) []any {
		head := "1"
		if claimed[sh] {
			head = "0"
		}
		t := s.names.table(sh)
		names = append(names, t)
		return []any{strconv.FormatInt(s.tombMS, 10), head, leaseMS, t.gen}
	}
	groups, err = s.fencedGroups("ack", func(k shardKeys) []string { return k.ack }, lead, len(rs), func(i int) (Receipt, []any, error) {
		r := rs[i]
		return r, []any{r.ID, strconv.FormatInt(r.Version, 10), strconv.FormatInt(r.Token, 10)}, nil
	})
	return groups, names, err
}

// Retry reschedules claimed messages after a failed delivery: attempts + 1, the id enters
// the shard's retry set (counted as overdue once its due time passed, until it is acked,
// cancelled or replaced), next claim at Redis time + Backoff, rounded up to the millisecond
// and at least 1ms (so the next claim's token is always larger than the retried one's). A
// request with PutBack only moves the next claim (no attempt, no retry set). A request
// with Next parks a recurring message for its next occurrence instead (RetryRequest.Next).
// Same fence, batching, blocking and partial results as Ack.
func (s *Store) Retry(ctx context.Context, rs []RetryRequest) (Applied, error) {
	if len(rs) == 0 {
		return Applied{}, nil
	}
	groups, err := s.retryGroups(rs)
	if err != nil {
		return Applied{}, err
	}
	return s.runFenced(ctx, "retry", s.scripts[scriptRetry], groups)
}

// retryGroups builds Retry's script groups, one per shard.
func (s *Store) retryGroups(rs []RetryRequest) ([]group, error) {
	return s.fencedGroups("retry", func(k shardKeys) []string { return k.retry }, func(int) []any { return nil }, len(rs), func(i int) (Receipt, []any, error) {
		r := rs[i]
		head := []any{r.ID, strconv.FormatInt(r.Version, 10), strconv.FormatInt(r.Token, 10)}
		switch {
		case r.Next > 0:
			return r.Receipt, append(head, strconv.FormatInt(r.Next, 10), "n"), nil
		case r.Backoff < 0:
			return r.Receipt, nil, fmt.Errorf("negative backoff %s", r.Backoff)
		}
		return r.Receipt, append(head, strconv.FormatInt(max(ceilMS(r.Backoff), 1), 10), modeArg(r.PutBack)), nil
	})
}

// modeArg is retry.lua's mode of a retry: "0" for a put-back, "1" for a failed attempt.
func modeArg(putBack bool) string {
	if putBack {
		return "0"
	}
	return "1"
}

// fencedGroups builds the groups of ack or retry, one per shard, in first-seen order:
// keysOf picks the script's keys of a shard, lead its arguments before the per-entry
// ones, item(i) returns the receipt and script arguments of entry i.
func (s *Store) fencedGroups(op string, keysOf func(shardKeys) []string, lead func(shard int) []any, n int,
	item func(i int) (Receipt, []any, error)) ([]group, error) {
	args := make(map[int][]any)
	var order []int
	for i := range n {
		r, a, err := item(i)
		if err == nil {
			err = s.checkShard(r.Shard)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", op, r.ID, err)
		}
		if _, ok := args[r.Shard]; !ok {
			order = append(order, r.Shard)
			args[r.Shard] = lead(r.Shard)
		}
		args[r.Shard] = append(args[r.Shard], a...)
	}
	groups := make([]group, len(order))
	for gi, sh := range order {
		groups[gi] = group{shard: sh, keys: keysOf(s.keys[sh]), args: args[sh]}
	}
	return groups, nil
}

// readApplied reads the answers of fenced groups ({applied, next head} each), replies
// aligned with groups.
func readApplied(op string, replies []groupReply, groups []group) (Applied, error) {
	out := Applied{Heads: make(map[int]int64, len(groups))}
	var errs []error
	for gi, g := range groups {
		sh := g.shard
		res, err := replies[gi].slice()
		if err == nil && len(res) < 2 { // ack's may carry released messages after the two
			err = fmt.Errorf("unexpected reply of %d values", len(res))
		}
		var applied, head int64
		if err == nil {
			var err1, err2 error
			applied, err1 = toInt64(res[0])
			head, err2 = toInt64(res[1])
			err = errors.Join(err1, err2)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s shard %d: %w", op, sh, err))
			continue
		}
		out.N += int(applied)
		if head != headNotRead {
			out.Heads[sh] = head
		}
	}
	// Shards that succeeded are reported even when others failed.
	return out, errors.Join(errs...)
}
