package delaystore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Get returns the parked message with this id (pending or claimed), or an error wrapping
// ErrNotFound. It blocks until Redis answered or ctx is done.
func (s *Store) Get(ctx context.Context, id string) (Message, error) {
	return s.GetKey(ctx, id, "")
}

// GetKey is Get of the message with this id and ordering key (docs/design.md "Ordering
// keys": a keyed message is named by both; "" is a message without key).
func (s *Store) GetKey(ctx context.Context, id, key string) (Message, error) {
	if err := s.layoutErr(); err != nil {
		return Message{}, fmt.Errorf("get %s: %w", id, err)
	}
	if err := checkOrderingKey(Envelope{OrderingKey: key}); err != nil {
		return Message{}, fmt.Errorf("get %s: %w", id, err)
	}
	sh := s.ShardOfMessage(id, key)
	var raw, kv string
	var held bool
	var m Message
	err := s.readNamed(ctx, sh, func() (string, error) {
		read := s.rdb.TxPipeline() // the entry and the generation of the names it was written against
		entry := read.HGet(ctx, s.keys[sh].m, id)
		gen := read.HGet(ctx, s.keys[sh].nm, genField)
		var chain *redis.StringCmd
		var score *redis.FloatCmd
		if key != "" { // its place in the key's chain: held or not
			chain, score = read.HGet(ctx, s.keys[sh].ki, id), read.ZScore(ctx, s.keys[sh].z, id)
		}
		_, _ = read.Exec(ctx)
		var err error
		if raw, err = entry.Result(); err != nil {
			return "", err
		}
		if chain != nil {
			kv, _ = chain.Result()
			sc, _ := score.Result()
			held = sc >= heldScore
		}
		return genOf(gen)
	}, func(names *nameTable) error {
		st, env, err := decodeStored(raw, id, names)
		m = Message{ID: id, Shard: sh, Due: st.due, Attempts: st.attempts, Version: st.version, Envelope: env}
		return err
	})
	if errors.Is(err, redis.Nil) {
		return Message{}, fmt.Errorf("get %s: %w", id, ErrNotFound)
	}
	if err == nil && held {
		m.HeldBy, err = s.heldBy(ctx, sh, kv)
	}
	if err != nil {
		return Message{}, fmt.Errorf("get %s: %w", id, err)
	}
	return m, nil
}

// heldBy returns the id of the member before the chain member of kv (a value of shard
// sh's :ki, "<release ms>,<member>") in its key's chain, "" when none (lua/scan.lua's
// heldBy).
func (s *Store) heldBy(ctx context.Context, sh int, kv string) (string, error) {
	_, member, ok := strings.Cut(kv, ",")
	n, w := binary.Uvarint([]byte(member))
	if !ok || w <= 0 || uint64(len(member)-w) < n+8 {
		return "", fmt.Errorf("%w: chain member %q", ErrCorrupt, kv)
	}
	prefix := member[:w+int(n)]
	prev, err := s.rdb.ZRevRangeByLex(ctx, s.keys[sh].k, &redis.ZRangeBy{Max: "(" + member, Min: "[" + prefix, Count: 1}).Result()
	if err != nil || len(prev) == 0 {
		return "", err
	}
	if len(prev[0]) < len(prefix)+8 {
		return "", fmt.Errorf("%w: chain member %q", ErrCorrupt, prev[0])
	}
	return prev[0][len(prefix)+8:], nil
}

// Stats counts the parked messages per shard and finds the earliest score, in one
// pipelined round trip (ZCARD and ZRANGE 0 0 per shard, plus TIME). The counts are not
// one atomic snapshot across shards. It blocks until Redis answered or ctx is done.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	pipe := s.rdb.Pipeline()
	cards := make([]*redis.IntCmd, s.shards)
	heads := make([]*redis.ZSliceCmd, s.shards)
	for i := range s.keys {
		cards[i] = pipe.ZCard(ctx, s.keys[i].z)
		heads[i] = pipe.ZRangeWithScores(ctx, s.keys[i].z, 0, 0)
	}
	tm := pipe.Time(ctx)
	_, _ = pipe.Exec(ctx) // errors are read per command below
	st := Stats{PerShard: make([]int64, s.shards), NextDue: -1}
	for i := range s.keys {
		n, err := cards[i].Result()
		if err != nil {
			return Stats{}, fmt.Errorf("stats shard %d: %w", i, err)
		}
		st.PerShard[i] = n
		st.Parked += n
		h, err := headOf(heads[i])
		if err != nil {
			return Stats{}, fmt.Errorf("stats shard %d: %w", i, err)
		}
		if h >= 0 && (st.NextDue < 0 || h < st.NextDue) {
			st.NextDue = h
		}
	}
	now, err := tm.Result()
	if err != nil {
		return Stats{}, fmt.Errorf("stats time: %w", err)
	}
	st.Now = now.UnixMilli()
	return st, nil
}

// Heads returns the earliest score (unix ms, -1 when the shard is empty) of each of shards,
// aligned with it, and the Redis time (to the microsecond), in one pipelined round trip (ZRANGE 0 0 WITHSCORES
// per shard, plus TIME). It blocks until Redis answered or ctx is done.
func (s *Store) Heads(ctx context.Context, shards []int) (heads []int64, now time.Time, err error) {
	for _, sh := range shards {
		if err := s.checkShard(sh); err != nil {
			return nil, time.Time{}, fmt.Errorf("heads: %w", err)
		}
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(shards))
	for i, sh := range shards {
		cmds[i] = pipe.ZRangeWithScores(ctx, s.keys[sh].z, 0, 0)
	}
	tm := pipe.Time(ctx)
	_, _ = pipe.Exec(ctx) // errors are read per command below
	heads = make([]int64, len(shards))
	for i, c := range cmds {
		h, err := headOf(c)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("heads shard %d: %w", shards[i], err)
		}
		heads[i] = h
	}
	t, err := tm.Result()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("heads time: %w", err)
	}
	return heads, t, nil
}

func headOf(c *redis.ZSliceCmd) (int64, error) {
	zs, err := c.Result()
	if err != nil {
		return 0, err
	}
	if len(zs) == 0 || zs[0].Score >= heldScore {
		return -1, nil
	}
	return int64(zs[0].Score), nil
}

// heldScore is the score of a held entry of an ordering key (lua/chain.lua HELD: 2^50 + 1,
// odd, above every time): a shard whose head scores it has nothing eligible.
const heldScore = 1<<50 + 1

// Forecast counts the parked messages by scheduled time (the z score, unix ms): overdue
// (at or before from) and then n buckets of step ms each after from, in one pipeline of
// ZCOUNTs (n + 1 per shard). The counts are not one atomic snapshot across shards. It
// blocks until Redis answered or ctx is done.
func (s *Store) Forecast(ctx context.Context, from, step int64, n int) (overdue int64, counts []int64, err error) {
	if step < 1 || n < 1 {
		return 0, nil, fmt.Errorf("forecast: step %d and buckets %d must be positive", step, n)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([][]*redis.IntCmd, len(s.keys))
	for sh, k := range s.keys {
		cmds[sh] = append(cmds[sh], pipe.ZCount(ctx, k.z, "-inf", strconv.FormatInt(from, 10)))
		for i := range n {
			lo, hi := from+int64(i)*step, from+int64(i+1)*step
			cmds[sh] = append(cmds[sh], pipe.ZCount(ctx, k.z, "("+strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10)))
		}
	}
	_, _ = pipe.Exec(ctx)
	counts = make([]int64, n)
	for sh := range cmds {
		for i, c := range cmds[sh] {
			v, err := c.Result()
			if err != nil {
				return 0, nil, fmt.Errorf("forecast: shard %d: %w", sh, err)
			}
			if i == 0 {
				overdue += v
			} else {
				counts[i-1] += v
			}
		}
	}
	return overdue, counts, nil
}

// CountScheduled counts the parked messages whose scheduled time (the z score, unix ms)
// lies in [from, to] (both inclusive), over all shards: one ZCOUNT per shard in one
// pipeline, not one atomic snapshot across shards. It blocks until Redis answered or ctx
// is done.
func (s *Store) CountScheduled(ctx context.Context, from, to int64) (int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(s.keys))
	lo, hi := strconv.FormatInt(from, 10), strconv.FormatInt(to, 10)
	for sh, k := range s.keys {
		cmds[sh] = pipe.ZCount(ctx, k.z, lo, hi)
	}
	_, _ = pipe.Exec(ctx)
	var n int64
	for sh, c := range cmds {
		v, err := c.Result()
		if err != nil {
			return 0, fmt.Errorf("count scheduled: shard %d: %w", sh, err)
		}
		n += v
	}
	return n, nil
}
