package delaystore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Park stores the messages until they are due, in one round trip: one script call for
// all shards on one Redis node, one per shard pipelined on Redis Cluster (groups.go; with
// Config.MinReplicas > 0 one pipeline per master, each ending in WAIT; a shard whose
// write is not confirmed fails with an error wrapping ErrNotReplicated), and returns one
// Parked per request, in request order. A relative Delay is rounded up to the next
// millisecond (never early) and counted from the Redis time. A request whose
// Envelope.SourceID was delivered (or cancelled) within the tombstone TTL is not parked
// (Parked.Delivered), nor is one whose id has a remembered cancel at or after its
// Published time (Parked.Cancelled, see CancelAt); a request with Replace whose source id
// equals the parked entry's keeps that entry (a redelivery, not a new message). When Park
// returns an error, the Parked of every request whose shard call succeeded (and was
// confirmed) is still filled in (its ID set): the caller may acknowledge those and retry
// only the others (a request with an empty ID in the result). The failed shards may have
// been written too: calling Park again with the same requests is safe when Replace is
// false or the requests carry source ids (idempotent). A shard's part larger than
// pieceBytes goes in pieces, which succeed or fail each on its own as shards do. An empty
// batch does no I/O. Park blocks until Redis answered or ctx is done.
//
// Names new to a shard are interned first (internNew; the tables are names.go's); a shard
// that no longer holds a code this replica used (a failover lost it) has its codes
// forgotten and its messages parked once more with codes interned again. This file reads
// in the order Park calls: group by shard, intern, encode into groups (the names block,
// pieces, the quota block), run, read the results.
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
		if err := checkOrderingKey(r.Envelope); err != nil {
			return nil, fmt.Errorf("park %s: %w", r.ID, err)
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
		sh := s.ShardOfMessage(reqs[i].ID, reqs[i].Envelope.OrderingKey)
		if _, ok := byShard[sh]; !ok {
			order = append(order, sh)
		}
		byShard[sh] = append(byShard[sh], i)
	}
	return byShard, order
}

// internNew interns the targets and sources of reqs (byShard: shard -> their indexes)
// that their shard has no settled code for, in one round trip, and returns the error of
// each shard whose call failed. Settled names cost no allocation and no I/O. A failed
// shard's names stay unsettled and Park parks none of its messages (a Redis that refuses
// the call would refuse the park too), rather than park them whole into a shard that may
// have no '#' yet (intern.lua would then give that shard no code until it is empty); the
// other shards go on.
func (s *Store) internNew(ctx context.Context, reqs []ParkRequest, byShard map[int][]int) map[int]error {
	var want map[int][]string
	add := func(sh int, name string) {
		if !internable(name) {
			return
		}
		if _, _, settled := s.names.code(sh, name); settled || slices.Contains(want[sh], name) {
			return
		}
		if want == nil {
			want = map[int][]string{}
		}
		want[sh] = append(want[sh], name)
	}
	for sh, idx := range byShard {
		for _, i := range idx {
			add(sh, reqs[i].Envelope.Target)
			add(sh, reqs[i].Envelope.Source)
		}
	}
	return s.intern(ctx, want)
}

// internable reports whether name may get a code: a target or a source other than
// "http" (which a body holds in its flags), not beginning with codeMark.
func internable(name string) bool {
	return name != "" && name != sourceHTTP && name[0] != codeMark
}

// intern gives codes to the names of each shard (shard -> names not settled there) that
// the shard has none for yet, one intern.lua call per shard in one pipeline, and records
// the answers in the book. It returns the error of each shard whose call failed; a script
// error (a key of the wrong type) turns packing off for unpackFor, as a packed call's does
// (runList), so that the broken shard's claims do not take the others' with them. It
// blocks until Redis answered or ctx is done.
func (s *Store) intern(ctx context.Context, want map[int][]string) map[int]error {
	if len(want) == 0 {
		return nil
	}
	shards := make([]int, 0, len(want))
	priors := make([]*nameTable, 0, len(want))
	gens := make([]string, 0, len(want))
	calls := make([]call, 0, len(want))
	for sh, names := range want {
		prior, gen := s.names.table(sh), newGen()
		args := make([]any, 0, 5+len(names))
		args = append(args, maxNames, s.shards, sh, prior.gen, gen)
		for _, n := range names {
			args = append(args, n)
		}
		shards, priors, gens = append(shards, sh), append(priors, prior), append(gens, gen)
		calls = append(calls, call{keys: []string{s.keys[sh].nm, s.keys[sh].z}, args: args})
	}
	cmds := s.evalPipelined(ctx, s.scripts[scriptIntern], calls)
	var errs map[int]error
	for i, cmd := range cmds {
		sh := shards[i]
		res, err := cmd.Int64Slice()
		if err == nil && len(res) != len(want[sh])+1 {
			err = fmt.Errorf("%d codes for %d names", len(res)-1, len(want[sh]))
		}
		if err == nil {
			err = checkCodes(res[1:], s.shards, sh)
		}
		if err != nil {
			if errs == nil {
				errs = map[int]error{}
			}
			errs[sh] = fmt.Errorf("intern names: %w", err)
			if groupsFailed(err) { // the shard's keys refuse a script: keep its groups apart, as runList does
				s.unpackUntil.Store(time.Now().Add(unpackFor).UnixNano())
			}
			continue
		}
		gen := priors[i].gen // the call gave no code: the table is as it was
		if res[0]&2 != 0 {
			gen = gens[i]
		}
		s.names.interned(sh, priors[i], res[0]&1 == 1, gen, want[sh], res[1:])
	}
	return errs
}

// newGen returns a fresh random generation (16 hex digits).
func newGen() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// checkCodes checks intern.lua's codes for shard sh: each 0 or a code of the shard.
func checkCodes(codes []int64, shards, sh int) error {
	for _, c := range codes {
		if c < 0 || (c > 0 && c%int64(shards) != int64(sh)) {
			return fmt.Errorf("code %d is not one of shard %d", c, sh)
		}
	}
	return nil
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
			c := names.coded(r.Envelope)
			var sent int64 // stored only where a cancel may name the message: with Replace
			if r.Replace && knownPublished(r.Published) {
				sent = r.Published
			}
			bodies[k] = encodeBodySent(r.Envelope, r.ID, sent, c)
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

// namesBlock is what one park call writes of one shard's codes: the form each name got
// (decided at its first use, so that the quota block and the bodies agree), and the
// (code, name) pairs park.lua checks (docs/design.md "Interned names").
type namesBlock struct {
	book  *nameBook
	sh    int
	names []string   // names used, in first-use order
	codes []nameCode // their codes (zero: whole)
	pairs []any      // code, name of the coded ones
}

// newNamesBlock returns shard sh's block for one park call.
func (s *Store) newNamesBlock(sh int) *namesBlock {
	return &namesBlock{book: s.names, sh: sh}
}

// coded returns how e's body holds its target and source.
func (n *namesBlock) coded(e Envelope) coded {
	return coded{target: n.code(e.Target).form, source: n.code(e.Source).code}
}

// code returns the code of name in this block's bodies (zero: it is written whole),
// decided at its first use.
func (n *namesBlock) code(name string) nameCode {
	if !internable(name) {
		return nameCode{}
	}
	if k := slices.Index(n.names, name); k >= 0 {
		return n.codes[k]
	}
	nc, ok, _ := n.book.code(n.sh, name)
	n.names = append(n.names, name)
	n.codes = append(n.codes, nc)
	if ok {
		n.pairs = append(n.pairs, strconv.FormatUint(nc.code, 10), name)
	}
	return nc
}

// knownPublished reports whether ms is a source time Park passes on (publishedArg): after
// 1970 and exact as a Lua number.
func knownPublished(ms int64) bool { return ms > 0 && ms < 1<<53 }

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
// first, and every request of an ordering key in the piece of the key's first: pieces
// may then succeed and fail independently without a retried earlier message of an id
// replacing a later one that was parked (the last reschedule wins), or joining its key's
// chain after a later one. A piece may exceed limit by such requests.
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
		key := reqs[i].Envelope.OrderingKey
		p, ok := pieceOf[id]
		if !ok && key != "" {
			p, ok = pieceOf["\x00"+key] // not an id: ids have no control characters
		}
		if ok {
			out[p] = append(out[p], k)
			if key != "" {
				pieceOf["\x00"+key] = p
			}
			continue
		}
		if len(out) == 0 || (size+len(bodies[k]) > limit && len(out[len(out)-1]) > 0) {
			out = append(out, nil)
			size = 0
		}
		out[len(out)-1] = append(out[len(out)-1], k)
		pieceOf[id] = len(out) - 1
		if key != "" {
			pieceOf["\x00"+key] = len(out) - 1
		}
		size += len(bodies[k])
	}
	return out
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
	args = append(args, keysBlock(reqs, own)...)
	return group{shard: sh, keys: s.keys[sh].park, args: args}
}

// keysBlock is the keys block of park's arguments for the requests own: pairs message
// number in the group (1-based), ordering key, of the requests with one, then their count
// (docs/design.md "Ordering keys").
func keysBlock(reqs []ParkRequest, own []int) []any {
	var out []any
	for k, i := range own {
		if key := reqs[i].Envelope.OrderingKey; key != "" {
			out = append(out, strconv.Itoa(k+1), key)
		}
	}
	return append(out, strconv.Itoa(len(out)/2))
}

// ceilMS converts d to whole milliseconds, rounding up: a relative delay is never early
// (the store's other durations are rounded so too).
func ceilMS(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// publishedArg is a source time as the scripts take it: unix ms, "0" (unknown: park checks
// no remembered cancel, cancel takes the Redis time) when <= 0 or beyond what Lua's doubles
// hold exactly.
func publishedArg(ms int64) string {
	if !knownPublished(ms) {
		return "0"
	}
	return strconv.FormatInt(ms, 10)
}

// block is the quota block of park's arguments for the requests idx of shard sh
// (quota.lua quotaGate; the rules are quota.go's): a triple target (as the bodies hold
// it: names.key), pattern, limit per target that a rule applies to, then their count.
// match memoizes the rule of each target over one Park call.
func (q *quotas) block(reqs []ParkRequest, idx []int, sh int, match map[string]int, names *namesBlock) []any {
	var out []any
	var seen map[string]bool
	for _, i := range idx {
		t := reqs[i].Envelope.Target
		r, ok := match[t]
		if !ok {
			r = -1
			if len(q.rules) > 0 {
				r = q.match(t)
			}
			match[t] = r
		}
		if r < 0 || seen[t] {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[t] = true
		out = append(out, names.key(t), q.rules[r].Pattern, strconv.FormatInt(q.limit(r, sh), 10))
	}
	return append(out, strconv.Itoa(len(out)))
}

// limit is what rule i allows in the counter hash of shard sh: the whole limit on one
// Redis node, the shard's share on Cluster (limit / shards, the first limit % shards
// shards one more), so that the shares sum to the limit.
func (q *quotas) limit(i, sh int) int64 {
	l := q.rules[i].Limit
	if !q.perShard {
		return l
	}
	share := l / int64(q.shards)
	if int64(sh) < l%int64(q.shards) {
		share++
	}
	return share
}

// key returns name as park.lua's targetOf reads it from this block's bodies: its code's
// field, or the name.
func (n *namesBlock) key(name string) string {
	return cmp.Or(n.code(name).form, name)
}

// args is the names block of park's ARGV: the pairs, then their count.
func (n *namesBlock) args() []any {
	out := make([]any, 0, len(n.pairs)+1)
	return append(append(out, n.pairs...), strconv.Itoa(len(n.pairs)/2))
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
