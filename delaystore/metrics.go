package delaystore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ShardGauge is one shard's figures in an Observation.
type ShardGauge struct {
	// Shard is the shard number.
	Shard int
	// Parked is the shard's ZCARD (pending, held and claimed).
	Parked int64
	// OldestOverdue is how long the shard's earliest entry has been due (Now minus its
	// score) when that score is at or before Now, else 0. A claimed message's score is its
	// lease expiry, so a message being delivered is not overdue until its lease ran out.
	// A message in retry (its last publish failed) counts from its due time as scheduled.
	OldestOverdue time.Duration
	// Overdue counts the entries whose score is at or before Now, plus the messages in
	// retry whose due time as scheduled is at or before Now (the retry set: their score is
	// the next attempt's time). A message in retry whose backoff has run out and that is
	// not claimed yet is in both counts for that moment.
	Overdue int64
	// DueWithin[i] counts the entries due after Now and at or before Now + horizons[i].
	DueWithin []int64
	// Held counts the entries held by their ordering key's predecessor (scored HELD:
	// docs/design.md "Ordering keys"); Parked counts them too.
	Held int64
}

// Observation is what Observe reads: per-shard gauges and the Redis time they refer to.
type Observation struct {
	// Now is the Redis server time, unix ms.
	Now int64
	// Shards are the observed shards, in the order Observe was asked for them.
	Shards []ShardGauge
}

// Observe reads the gauges an operator watches of the given shards, in two round trips:
// TIME, then one pipeline of ZCARD, ZRANGE 0 0 WITHSCORES and ZCOUNT (overdue, held, and
// once per horizon) per shard, and ZRANGE 0 0 WITHSCORES and ZCOUNT of the shard's retry set. The
// cost grows with len(shards) only, not with the store's shard count. It only reads sorted-set scores, never envelopes (O(log n) per command), so it is
// cheap enough for every scrape. Shards are not one atomic snapshot. It blocks until Redis
// answered or ctx is done.
func (s *Store) Observe(ctx context.Context, shards []int, horizons []time.Duration) (Observation, error) {
	for _, sh := range shards {
		if err := s.checkShard(sh); err != nil {
			return Observation{}, fmt.Errorf("observe: %w", err)
		}
	}
	tm, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return Observation{}, fmt.Errorf("observe: time: %w", err)
	}
	now := tm.UnixMilli()
	nowArg, heldArg := fmt.Sprint(now), strconv.FormatInt(heldScore, 10)
	type shardCmds struct {
		card    *redis.IntCmd
		head    *redis.ZSliceCmd
		overdue *redis.IntCmd
		held    *redis.IntCmd
		within  []*redis.IntCmd
		// retryHead and retryOverdue read the retry set ({P:s}:r, scored by due).
		retryHead    *redis.ZSliceCmd
		retryOverdue *redis.IntCmd
	}
	cmds := make([]shardCmds, len(shards))
	pipe := s.rdb.Pipeline()
	for i, sh := range shards {
		k := s.keys[sh]
		c := shardCmds{
			card:    pipe.ZCard(ctx, k.z),
			head:    pipe.ZRangeWithScores(ctx, k.z, 0, 0),
			overdue: pipe.ZCount(ctx, k.z, "-inf", nowArg),
			held:    pipe.ZCount(ctx, k.z, heldArg, "+inf"),

			retryHead:    pipe.ZRangeWithScores(ctx, k.r, 0, 0),
			retryOverdue: pipe.ZCount(ctx, k.r, "-inf", nowArg),
		}
		for _, h := range horizons {
			c.within = append(c.within, pipe.ZCount(ctx, k.z, "("+nowArg, fmt.Sprint(now+ceilMS(h))))
		}
		cmds[i] = c
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	obs := Observation{Now: now, Shards: make([]ShardGauge, len(shards))}
	for i, c := range cmds {
		g := ShardGauge{Shard: shards[i], DueWithin: make([]int64, len(horizons))}
		var err error
		if g.Parked, err = c.card.Result(); err != nil {
			return Observation{}, fmt.Errorf("observe shard %d: %w", shards[i], err)
		}
		if g.Held, err = c.held.Result(); err != nil {
			return Observation{}, fmt.Errorf("observe shard %d: %w", shards[i], err)
		}
		if err := overdueOf(&g, now, c.head, c.retryHead, c.overdue, c.retryOverdue); err != nil {
			return Observation{}, fmt.Errorf("observe shard %d: %w", shards[i], err)
		}
		for j, w := range c.within {
			if g.DueWithin[j], err = w.Result(); err != nil {
				return Observation{}, fmt.Errorf("observe shard %d: %w", shards[i], err)
			}
		}
		obs.Shards[i] = g
	}
	return obs, nil
}

// overdueOf sets g's Overdue and OldestOverdue from the head and overdue count of the
// shard's ZSET and of its retry set.
func overdueOf(g *ShardGauge, now int64, head, retryHead *redis.ZSliceCmd, overdue, retryOverdue *redis.IntCmd) error {
	oldest := int64(-1)
	for _, c := range []*redis.ZSliceCmd{head, retryHead} {
		h, err := headOf(c)
		if err != nil {
			return err
		}
		if h >= 0 && h <= now && (oldest < 0 || h < oldest) {
			oldest = h
		}
	}
	if oldest >= 0 {
		g.OldestOverdue = time.Duration(now-oldest) * time.Millisecond
	}
	for _, c := range []*redis.IntCmd{overdue, retryOverdue} {
		n, err := c.Result()
		if err != nil {
			return err
		}
		g.Overdue += n
	}
	return nil
}

// ScriptTimer returns a go-redis hook that reports the round trip of every call of the
// store's scripts to observe, with the script's name: its file in lua/ without ".lua"
// (scriptDefs in scripts.go: park, claim, ack, retry, cancel, member for Heartbeat and
// Leave, ...).
// A pipeline (Park, Ack and Retry send one script call per shard in one) is one round
// trip, reported once; commands that are not the store's scripts are not reported. Add
// it to the client the store uses (AddHook) before the first call. observe must be safe
// for concurrent use. With Config.MinReplicas > 0 on Redis Cluster, park and cancel run on
// the masters' own clients, which do not run the cluster client's hooks: the store then
// reports their round trip (all masters in parallel, once) to observe itself.
func (s *Store) ScriptTimer(observe func(script string, d time.Duration)) redis.Hook {
	s.timer.Store(&observe)
	names := map[string]string{}   // SHA-1 of either form -> name, for EVALSHA
	sources := map[string]string{} // text of either form -> name, for EVAL
	for _, sc := range s.scripts {
		for _, h := range sc.hashes() {
			names[h] = sc.name
		}
		for _, src := range sc.srcs {
			sources[src] = sc.name
		}
	}
	return scriptTimer{name: func(c redis.Cmder) string {
		args := c.Args()
		if len(args) < 2 {
			return ""
		}
		a, _ := args[1].(string)
		switch c.Name() {
		case "evalsha":
			return names[a]
		case "eval":
			return sources[a]
		}
		return ""
	}, observe: observe}
}

type scriptTimer struct {
	name    func(redis.Cmder) string
	observe func(string, time.Duration)
}

func (scriptTimer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptTimer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := h.name(cmd)
		if name == "" {
			return next(ctx, cmd)
		}
		start := time.Now()
		err := next(ctx, cmd)
		h.observe(name, time.Since(start))
		return err
	}
}

func (h scriptTimer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		name := "" // a pipeline of several scripts (Exchange) is timed as "exchange"
		for _, c := range cmds {
			if n := h.name(c); n != "" && name == "" {
				name = n
			} else if n != "" && n != name {
				name = "exchange"
				break
			}
		}
		if name == "" {
			return next(ctx, cmds)
		}
		start := time.Now()
		err := next(ctx, cmds)
		h.observe(name, time.Since(start))
		return err
	}
}
