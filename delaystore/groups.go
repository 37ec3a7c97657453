package delaystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// group is one shard's part of a park, claim, ack or retry call (lua/groups.lua): the
// shard's keys for the script and its arguments.
type group struct {
	shard int
	keys  []string
	args  []any
}

// groupAt locates one group's answer: the call it went in, and its place in that call's
// reply.
type groupAt struct{ call, index int }

// groupReply is one group's answer: the script's value for it, or its call's error.
type groupReply struct {
	val any
	err error
}

// packGroups turns groups into script calls of the groups.lua convention. On one Redis
// node (standalone, Sentinel), unless a packed call failed in the last unpackFor, the
// groups go in as few calls as packBytes allows: one script run for a batch of small
// messages, whatever the number of shards it touches. On Redis Cluster each group is a
// call of its own, since a call's keys must share a hash slot (a shard's keys do, two
// shards' do not); the client sends each to its master, one pipeline per node. A call's
// WAIT fence (wait.go) is the seq key of its first group's shard.
func (s *Store) packGroups(groups []group) ([]call, []groupAt) {
	at := make([]groupAt, len(groups))
	if len(groups) == 0 {
		return nil, at
	}
	_, cluster := s.rdb.(*redis.ClusterClient)
	if cluster || time.Now().UnixNano() < s.unpackUntil.Load() {
		calls := make([]call, len(groups))
		for i, g := range groups {
			calls[i] = packedCall(groups[i : i+1])
			calls[i].fence = s.keys[g.shard].seq
			at[i] = groupAt{call: i}
		}
		return calls, at
	}
	var calls []call
	start, size := 0, 0
	flush := func(end int) {
		c := packedCall(groups[start:end])
		c.fence = s.keys[groups[start].shard].seq
		for i := start; i < end; i++ {
			at[i] = groupAt{call: len(calls), index: i - start}
		}
		calls = append(calls, c)
		start, size = end, 0
	}
	for i, g := range groups {
		n := argBytes(g.args)
		if i > start && size+n > packBytes {
			flush(i)
		}
		size += n
	}
	flush(len(groups))
	return calls, at
}

// packBytes bounds the argument bytes of one packed call (a group is never split, so one
// large group makes a call of its own). A call's arguments sit in Redis' query buffer,
// which counts against maxmemory when the call starts: a full Redis with less room than
// one call refuses it however often it is sent (fault row B9 stalled at a park of a
// whole batch in one call), so a call stays as small as a shard's part of a batch was.
const packBytes = 32 << 10

// argBytes estimates the bytes a script's arguments take on the wire.
func argBytes(args []any) int {
	n := 0
	for _, a := range args {
		switch v := a.(type) {
		case string:
			n += len(v) + 16
		case []byte:
			n += len(v) + 16
		default:
			n += 24
		}
	}
	return n
}

// packedCall is the call of groups: their keys in order; ARGV = the group count, each
// group's argument count, then their arguments in order.
func packedCall(groups []group) call {
	nargs := 1 + len(groups)
	nkeys := 0
	for _, g := range groups {
		nargs += len(g.args)
		nkeys += len(g.keys)
	}
	keys := make([]string, 0, nkeys)
	args := make([]any, 0, nargs)
	args = append(args, len(groups))
	for _, g := range groups {
		keys = append(keys, g.keys...)
		args = append(args, len(g.args))
	}
	for _, g := range groups {
		args = append(args, g.args...)
	}
	return call{keys: keys, args: args}
}

// callList collects the packed calls of one or several scripts for one pipeline, with the
// groups of each call.
type callList struct {
	calls  []call
	groups [][]group
}

// add packs groups for sc (packGroups), appends their calls and returns where each
// group's answer will be among all the list's calls.
func (l *callList) add(s *Store, sc *script, groups []group) []groupAt {
	calls, at := s.packGroups(groups)
	base := len(l.calls)
	for _, c := range calls {
		c.sc = sc
		l.calls = append(l.calls, c)
		l.groups = append(l.groups, nil)
	}
	for k := range at {
		at[k].call += base
		l.groups[at[k].call] = append(l.groups[at[k].call], groups[k]) // in their places' order
	}
	return at
}

// listReplies are the answers of a callList's calls: per call, one reply per group.
type listReplies [][]groupReply

// pick returns the replies of the groups at at.
func (r listReplies) pick(at []groupAt) []groupReply {
	out := make([]groupReply, len(at))
	for i, a := range at {
		out[i] = r[a.call][a.index]
	}
	return out
}

// runList runs the list's calls in one pipeline (with confirm, each master's ending in
// the WAIT fence: evalConfirmed) and returns every group's reply. A group's error ends its
// run for all the groups of its call (groups.lua), so a packed call that failed with an
// error of the script (not a refusal for memory, which refuses every group alike, and not
// a lost connection) is sent again one call per group, in a second pipeline: one bad shard
// does not fail the others, as when every shard had a call of its own. The groups that
// ran before the error run again, which every script allows (park is idempotent by id and
// source id, acks and retries are fenced, a claim's leased messages come back after the
// lease). An empty list (every group failed before it was packed) does no I/O.
func (s *Store) runList(ctx context.Context, l *callList, confirm bool) listReplies {
	if len(l.calls) == 0 {
		return nil
	}
	eval := func(calls []call) []*redis.Cmd {
		if confirm {
			return s.evalConfirmed(ctx, nil, calls)
		}
		return s.evalOn(ctx, s.rdb, "", nil, calls, false)
	}
	cmds := eval(l.calls)
	out := make(listReplies, len(l.calls))
	var again []call
	var where [][2]int // call and group of each call in again
	for ci, c := range cmds {
		out[ci] = splitReply(c, len(l.groups[ci]))
		if len(l.groups[ci]) > 1 && groupsFailed(c.Err()) {
			s.unpackUntil.Store(time.Now().Add(unpackFor).UnixNano())
			for gi, g := range l.groups[ci] {
				one := packedCall([]group{g})
				one.sc, one.fence = l.calls[ci].sc, s.keys[g.shard].seq
				again = append(again, one)
				where = append(where, [2]int{ci, gi})
			}
		}
	}
	if len(again) > 0 {
		for k, c := range eval(again) {
			out[where[k][0]][where[k][1]] = splitReply(c, 1)[0]
		}
	}
	return out
}

// unpackFor is how long groups go in calls of their own after a packed call failed on one
// group's error. The groups of the failed call that ran before the error keep what they
// did: a claim's leased messages come back after the lease, and while packing is off the
// failing shard cannot hold the others' messages back again (packed, every claim round
// would lease them and then fail).
const unpackFor = time.Minute

// groupsFailed reports whether err is a script's error that may belong to one group only.
func groupsFailed(err error) bool {
	var rerr redis.Error
	return err != nil && errors.As(err, &rerr) && !IsOOM(err) && !isNoScript(err) && !errors.Is(err, ErrNotReplicated)
}

// splitReply is the answer of one packed call of n groups: one reply per group.
func splitReply(c *redis.Cmd, n int) []groupReply {
	out := make([]groupReply, n)
	res, err := c.Slice()
	if err == nil && len(res) != n {
		err = fmt.Errorf("a reply of %d groups for %d", len(res), n)
	}
	for i := range out {
		if err != nil {
			out[i].err = err
		} else {
			out[i].val = res[i]
		}
	}
	return out
}

// slice is the reply as a list, or its error.
func (r groupReply) slice() ([]any, error) {
	if r.err != nil {
		return nil, r.err
	}
	v, ok := r.val.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %T", r.val)
	}
	return v, nil
}
