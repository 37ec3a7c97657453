package delaystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Park stores the messages until they are due, in one round trip: one script call for
// all shards on one Redis node, one per shard pipelined on Redis Cluster (groups.go; with
// Config.MinReplicas > 0 one pipeline per master, each ending in WAIT; a shard whose write is not confirmed fails with an error wrapping
// ErrNotReplicated), and returns one Parked per request, in request order. A
// relative Delay is rounded up to the next millisecond (never early) and counted from the
// Redis time. A request whose Envelope.SourceID was delivered (or cancelled) within the
// tombstone TTL is not parked (Parked.Delivered), nor is one whose id has a remembered
// cancel at or after its Published time (Parked.Cancelled, see CancelAt); a request with
// Replace whose source id equals the parked entry's keeps that entry (a redelivery, not a new message). When Park
// returns an error, the Parked of every request whose shard call succeeded (and was
// confirmed) is still filled in (its ID set): the caller may acknowledge those and retry
// only the others (a request with an empty ID in the result). The failed shards may have
// been written too: calling Park again with the same requests is safe when Replace is
// false or the requests carry source ids (idempotent). A shard's part larger than
// pieceBytes goes in pieces, which succeed or fail each on its own as shards do. An empty
// batch does no I/O. Park blocks until Redis answered or ctx is done.
//
// Names new to a shard are interned first (names.go); a shard that no longer holds a code
// this replica used (a failover lost it) has its codes forgotten and its messages parked
// once more with codes interned again.
func (s *Store) Park(ctx context.Context, reqs []ParkRequest) ([]Parked, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := s.layoutErr(); err != nil {
		return nil, fmt.Errorf("park: %w", err)
	}
	todo := make([]int, len(reqs))
	for i, r := range reqs {
		if r.ID == "" {
			return nil, fmt.Errorf("park request %d: empty id", i)
		}
		if !r.Absolute && r.Delay < 0 {
			return nil, fmt.Errorf("park %s: negative delay %s", r.ID, r.Delay)
		}
		todo[i] = i
	}
	out := make([]Parked, len(reqs))
	var errs []error
	for attempt := 1; len(todo) > 0; attempt++ {
		byShard, order := s.byShard(reqs, todo)
		if attempt > 1 { // a shard refused codes it no longer holds: intern them again
			for _, sh := range order {
				s.names.forget(sh)
			}
		}
		failed := s.internNew(ctx, reqs, byShard)
		match := map[string]int{} // target -> quota rule, -1: none (quota.go)
		groups, pieces, err := s.parkGroups(reqs, order, byShard, failed, match)
		errs = append(errs, err)
		stale, err := s.runPark(ctx, reqs, groups, pieces, match, out)
		errs = append(errs, err)
		if todo = stale; len(stale) > 0 && attempt == 2 {
			errs = append(errs, fmt.Errorf("park: %d messages: the shard's names changed while parking", len(stale)))
			break
		}
	}
	return out, errors.Join(errs...)
}

// byShard groups the requests todo (indexes into reqs) by shard; order is the shards in
// first-seen order, for deterministic calls.
func (s *Store) byShard(reqs []ParkRequest, todo []int) (map[int][]int, []int) {
	byShard := make(map[int][]int)
	var order []int
	for _, i := range todo {
		sh := s.ShardOf(reqs[i].ID)
		if _, ok := byShard[sh]; !ok {
			order = append(order, sh)
		}
		byShard[sh] = append(byShard[sh], i)
	}
	return byShard, order
}

// parkGroups encodes the requests of each shard of order (byShard) into park groups, a
// shard's part in pieces of at most pieceBytes; pieces[g] are group g's requests, in
// request order. A shard whose names could not be interned (failed) gets no group: its
// requests stay unparked and its error is returned.
func (s *Store) parkGroups(reqs []ParkRequest, order []int, byShard map[int][]int, failed map[int]error,
	match map[string]int) (groups []group, pieces [][]int, err error) {
	var errs []error
	for _, sh := range order {
		if err := failed[sh]; err != nil {
			errs = append(errs, fmt.Errorf("park shard %d: %w", sh, err))
			continue
		}
		idx := byShard[sh]
		bodies := make([][]byte, len(idx))
		names := s.newNamesBlock(sh)
		for k, i := range idx {
			r := &reqs[i]
			var sent int64 // stored only where a cancel may name the message: with Replace
			if r.Replace && knownPublished(r.Published) {
				sent = r.Published
			}
			bodies[k] = encodeBodySent(r.Envelope, r.ID, sent, names.coded(r.Envelope))
		}
		parts := splitPieces(reqs, idx, bodies, pieceBytes)
		if parts == nil {
			parts = [][]int{nil}
		}
		for _, part := range parts {
			own, bs := idx, bodies
			if part != nil {
				own, bs = make([]int, len(part)), make([][]byte, len(part))
				for j, k := range part {
					own[j], bs[j] = idx[k], bodies[k]
				}
			}
			groups = append(groups, s.parkGroup(reqs, sh, own, bs, match, names))
			pieces = append(pieces, own)
		}
	}
	return groups, pieces, errors.Join(errs...)
}

// runPark runs the park groups in one round trip and fills out[i] for every request whose
// group succeeded; it returns the requests a shard refused for a code it does not hold
// (left zero) and the errors of the groups that failed.
func (s *Store) runPark(ctx context.Context, reqs []ParkRequest, groups []group, pieces [][]int,
	match map[string]int, out []Parked) ([]int, error) {
	var list callList
	at := list.add(s, s.scripts[scriptPark], groups)
	replies := s.runList(ctx, &list, true).pick(at)
	s.mem.note(replies)
	var stale []int
	var errs []error
	for gi, own := range pieces {
		refused, err := parkResults(replies[gi], reqs, own, out)
		if err != nil {
			errs = append(errs, fmt.Errorf("park shard %d: %w", groups[gi].shard, err))
			continue
		}
		stale = append(stale, refused...)
		for _, i := range own {
			if out[i].OverQuota {
				if r := match[reqs[i].Envelope.Target]; r >= 0 {
					s.quota.rejected[r].Add(1)
				}
			}
		}
	}
	return stale, errors.Join(errs...)
}

// parkGroup is the park group of the requests own (indexes into reqs, one shard sh,
// encoded as bodies) with its quota block: per message id, mode (with the source time),
// replace, delay-or-at, body, then the names block (names: the codes the shard's bodies
// hold).
func (s *Store) parkGroup(reqs []ParkRequest, sh int, own []int, bodies [][]byte, match map[string]int, names *namesBlock) group {
	args := make([]any, 0, 2+5*len(own))
	args = append(args, s.keys[sh].wake, s.keys[sh].shardID)
	for k, i := range own {
		r := &reqs[i]
		mode, when := "r", ceilMS(r.Delay)
		if r.Absolute {
			mode, when = "a", r.At
		}
		if pub := publishedArg(r.Published); pub != "0" {
			mode += pub // the source time rides on the mode: no ARGV value of its own
		}
		replace := "0"
		if r.Replace {
			replace = "1"
		}
		args = append(args, r.ID, mode, replace, strconv.FormatInt(when, 10), bodies[k])
	}
	args = append(args, s.quota.block(reqs, own, sh, match, names)...)
	args = append(args, names.args()...)
	return group{shard: sh, keys: s.keys[sh].park, args: args}
}

// pieceBytes bounds the bodies of one park group. A group is one script run that Redis
// takes whole or not at all, and its arguments count against maxmemory when it starts: a
// full Redis takes a small group as soon as deliveries freed that much, while a lane's
// whole batch in one shard (256 messages of 1 KB: runs of positions longer than a batch)
// would wait until a batch's worth was freed, its retries backing off meanwhile (fault row
// B9). Half a packed call's bound (groups.go), so that pieces share calls and a piece
// never makes a call of its own.
const pieceBytes = packBytes / 2

// splitPieces splits one shard's requests (reqs[idx[k]], encoded as bodies[k]) into
// pieces of at most limit body bytes (or one request), as positions into idx in request
// order; nil when all of them fit in one. Every request of an id goes in the piece of its
// first: pieces may then succeed and fail independently without a retried earlier
// message of an id replacing a later one that was parked (the last reschedule wins). A
// piece may exceed limit by such requests.
func splitPieces(reqs []ParkRequest, idx []int, bodies [][]byte, limit int) [][]int {
	total := 0
	for _, b := range bodies {
		total += len(b)
	}
	if total <= limit {
		return nil
	}
	var out [][]int
	pieceOf := make(map[string]int, len(idx))
	size := 0
	for k, i := range idx {
		id := reqs[i].ID
		if p, ok := pieceOf[id]; ok {
			out[p] = append(out[p], k)
			continue
		}
		if len(out) == 0 || (size+len(bodies[k]) > limit && len(out[len(out)-1]) > 0) {
			out = append(out, nil)
			size = 0
		}
		out[len(out)-1] = append(out[len(out)-1], k)
		pieceOf[id] = len(out) - 1
		size += len(bodies[k])
	}
	return out
}

// parkResults fills out[i] for the requests idx of one shard's park group, or, when the
// group failed, leaves them zero and returns the error. It returns the requests the group
// refused for a code the shard does not hold (left zero).
func parkResults(reply groupReply, reqs []ParkRequest, idx []int, out []Parked) ([]int, error) {
	res, err := reply.slice()
	if err != nil {
		return nil, err
	}
	if len(res) != len(idx) {
		return nil, fmt.Errorf("%d results for %d messages", len(res), len(idx))
	}
	var stale []int
	got := make([]Parked, len(idx))
	for k, i := range idx {
		pair, ok := res[k].([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("unexpected result %v", res[k])
		}
		due, err1 := toInt64(pair[0])
		existed, err2 := toInt64(pair[1])
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if existed == parkedNamesStale {
			stale = append(stale, i)
			continue
		}
		got[k] = Parked{ID: reqs[i].ID, Due: due, Existed: existed >= 1 && existed <= 3 || existed == parkedInDelivery,
			Delivered: existed == 2, Cancelled: existed == 3, OverQuota: existed == 4, InDelivery: existed == parkedInDelivery}
	}
	for k, i := range idx {
		out[i] = got[k]
	}
	return stale, nil
}

// parkedNamesStale is park.lua's answer for a message of a group whose names block names a
// code the shard does not hold: nothing of the group was written.
const parkedNamesStale = 5

// parkedInDelivery is park.lua's answer for a message that replaced an entry in delivery
// (Parked.InDelivery).
const parkedInDelivery = 6

// Cancel is CancelAt with the Redis time as the cancel's time.
func (s *Store) Cancel(ctx context.Context, id string) (bool, error) {
	return s.CancelAt(ctx, id, 0)
}

// CancelAt deletes the message with this id unless it is in delivery; a message with a
// source id leaves a tombstone, as in Ack, so that a
// redelivery of the cancelled source message is not parked again. Found or not, the
// cancel is remembered for Config.CancelWindow: a later Park of the id whose Published
// time is at or before at is not parked (Parked.Cancelled). at is the cancel's time by its
// source, unix ms (<= 0: an operator's cancel, the Redis time); of two cancels of one id
// the later at counts. A parked message whose source published it after at (its
// Published, stored when it was parked with Replace) is kept: the cancel was read late;
// an operator's cancel (at <= 0: Cancel, the message API's DELETE) deletes what is parked
// whatever its source time (a producer clock ahead of Redis's). It reports whether a message was
// deleted: true means it will never be delivered. A message in delivery (claimed by a
// replica whose lease runs, which may hold it until its due time) is not deleted: false
// and an *InDeliveryError (errors.Is ErrInDelivery), the cancel still remembered; for a
// recurring message the entry is deleted all the same (no later firing: Stopped), the
// firing in delivery may still be published. It blocks until Redis answered or ctx is done.
// With Config.MinReplicas > 0 the deletion is confirmed by WAIT; fewer replicas is an
// error wrapping ErrNotReplicated (the deletion may still have happened on the master:
// cancelling again is safe, but may then report false).
func (s *Store) CancelAt(ctx context.Context, id string, at int64) (bool, error) {
	if id == "" {
		return false, errors.New("cancel: empty id")
	}
	if err := s.layoutErr(); err != nil {
		return false, fmt.Errorf("cancel %s: %w", id, err)
	}
	sh := s.ShardOf(id)
	args := []any{id, s.tombMS, publishedArg(at), s.cancelMS, s.keys[sh].wake, s.keys[sh].shardID}
	cmds := s.evalConfirmed(ctx, s.scripts[scriptCancel], []call{{keys: s.keys[sh].cancel, args: args, fence: s.keys[sh].seq}})
	n, err := cmds[0].Int64()
	if err != nil {
		return false, fmt.Errorf("cancel %s: %w", id, err)
	}
	switch n {
	case cancelInDelivery:
		return false, &InDeliveryError{ID: id}
	case cancelFiringInDelivery:
		return false, &InDeliveryError{ID: id, Stopped: true}
	}
	return n == 1, nil
}

// cancel.lua's answers other than 1 (deleted) and 0 (not found).
const (
	cancelInDelivery       = 2 // in delivery: kept
	cancelFiringInDelivery = 3 // a recurring message in delivery: deleted, its firing may be published
)

// publishedArg is a source time as the scripts take it: unix ms, "0" (unknown: park checks
// no remembered cancel, cancel takes the Redis time) when <= 0 or beyond what Lua's doubles
// hold exactly.
func publishedArg(ms int64) string {
	if !knownPublished(ms) {
		return "0"
	}
	return strconv.FormatInt(ms, 10)
}

// knownPublished reports whether ms is a source time Park passes on (publishedArg): after
// 1970 and exact as a Lua number.
func knownPublished(ms int64) bool { return ms > 0 && ms < 1<<53 }
