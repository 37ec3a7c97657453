package delaystore

import (
	"fmt"

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

// groupReply is one group's answer: the script's value for it, or an error (its call's,
// or its own: a group that raised one in the script).
type groupReply struct {
	val any
	err error
}

// packGroups turns groups into script calls of the groups.lua convention. On one Redis
// node (standalone, Sentinel) the groups go in as few calls as packBytes allows: one
// script run for a batch of small messages, whatever the number of shards it touches. On Redis Cluster each group is a call
// of its own, since a call's keys must share a hash slot (a shard's keys do, two shards'
// do not); the client sends each to its master, one pipeline per node. A call's WAIT
// fence (wait.go) is the seq key of its first group's shard.
func (s *Store) packGroups(groups []group) ([]call, []groupAt) {
	at := make([]groupAt, len(groups))
	if len(groups) == 0 {
		return nil, at
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
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

// groupReplies splits the answers of packed calls (cmds, aligned with the calls) into one
// reply per group, located by at.
func groupReplies(cmds []*redis.Cmd, at []groupAt) []groupReply {
	out := make([]groupReply, len(at))
	for i, a := range at {
		res, err := cmds[a.call].Slice()
		switch {
		case err != nil:
			out[i].err = err
		case a.index >= len(res):
			out[i].err = fmt.Errorf("a reply of %d groups, group %d wanted", len(res), a.index+1)
		default:
			if e, ok := res[a.index].(error); ok {
				out[i].err = e
			} else {
				out[i].val = res[a.index]
			}
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
