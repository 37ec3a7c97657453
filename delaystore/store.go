package delaystore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/park.lua
	parkSrc string
	//go:embed lua/claim.lua
	claimSrc string
	//go:embed lua/ack.lua
	ackSrc string
	//go:embed lua/retry.lua
	retrySrc string
	//go:embed lua/cancel.lua
	cancelSrc string
)

// MaxShards is the largest accepted Config.Shards.
const MaxShards = 4096

// Store is the Redis delay store. Create it with New and call Init once before use.
// All methods are safe for concurrent use; every method that talks to Redis blocks until
// Redis answered or ctx is done. The caller owns the Redis client and closes it.
type Store struct {
	rdb       redis.UniversalClient
	shards    int
	leaseMS   int64
	tombMS    int64 // tombstone TTL in ms; 0: none
	shardsKey string
	keys      []shardKeys
	// The fleet (fleet.go): {P:fleet}:members, :version, :pending, :tokens, and channel
	// P:wake:fleet.
	fleetKeys    []string
	fleetChannel string

	epochMu sync.Mutex
	epochs  []string // per shard, the dataset epoch this replica has seen (epoch.go)
	// epochTurn counts CheckDataset calls: it picks each master's shard to read (epoch.go).
	epochTurn int

	// Replicated durability (wait.go): WAIT minReplicas waitTimeout after every confirmed
	// write; 0 replicas: none.
	minReplicas int
	waitTimeout time.Duration
	log         *slog.Logger
	shortfalls  atomic.Uint64
	inShortfall atomic.Bool
	// timer, when set by ScriptTimer, also times the per-master pipelines that bypass the
	// cluster client's hooks (wait.go).
	timer atomic.Pointer[func(string, time.Duration)]

	// Scripts keep only their SHA-1 (set at creation, rewritten with the same value by
	// Load) and which form the server takes (scripts.go), so sharing them is safe.
	park, claim, ack, retry, cancel, member *script
	mem                                     memoryState // what parks learned about Redis memory
}

// shardKeys are the keys of one shard; the slices are passed to go-redis, which only reads
// them.
type shardKeys struct {
	z, m    string
	r       string   // {P:s}:r, the retry set (ids whose last publish failed, scored by due)
	epoch   string   // {P:s}:epoch, the shard's dataset epoch (epoch.go)
	zm      []string // z, m
	zmR     []string // z, m, r: retry
	zmtR    []string // z, m, t, r: ack, cancel
	zmSeqTR []string // z, m, seq, t, r: park
	seq     string   // {P:s}:seq, also the key of the WAIT fence (wait.go)
	shardID string   // the shard number as a decimal string
	wake    string   // P:wake:<s>, the shard's wake channel (park publishes, Wakeups follows)
}

// Applied is the outcome of Ack or Retry.
type Applied struct {
	// N counts the receipts that were applied; stale receipts (fenced) are not counted.
	N int
	// Heads maps every shard the call touched to its earliest score after the call (unix
	// ms, Redis clock), or -1 when the shard is empty.
	Heads map[int]int64
}

// New validates cfg and returns a Store over rdb (a *redis.Client, *redis.ClusterClient,
// ...), adjusted by opts. It does no I/O; call Init before use.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Store, error) {
	var errs []error
	if rdb == nil {
		errs = append(errs, errors.New("redis client is nil"))
	}
	if cfg.KeyPrefix == "" {
		errs = append(errs, errors.New("key prefix is empty"))
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		errs = append(errs, fmt.Errorf("key prefix %q contains { or } (reserved for hash tags)", cfg.KeyPrefix))
	}
	if cfg.Shards < 1 || cfg.Shards > MaxShards {
		errs = append(errs, fmt.Errorf("shards %d not in 1..%d", cfg.Shards, MaxShards))
	}
	if cfg.Lease < time.Millisecond {
		errs = append(errs, fmt.Errorf("lease %s is shorter than 1ms", cfg.Lease))
	}
	if cfg.MinReplicas < 0 {
		errs = append(errs, fmt.Errorf("min replicas %d is negative", cfg.MinReplicas))
	}
	if cfg.MinReplicas > 0 && cfg.WaitTimeout < MinWaitTimeout {
		errs = append(errs, fmt.Errorf("wait timeout %s is shorter than %s", cfg.WaitTimeout, MinWaitTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("delaystore config: %w", err)
	}
	p := cfg.KeyPrefix
	tomb := cfg.TombstoneTTL
	switch {
	case tomb == 0:
		tomb = DefaultTombstoneTTL
	case tomb < 0:
		tomb = 0
	}
	s := &Store{
		rdb:       rdb,
		shards:    cfg.Shards,
		leaseMS:   ceilMS(cfg.Lease),
		tombMS:    ceilMS(tomb),
		shardsKey: p + ":shards",
		keys:      make([]shardKeys, cfg.Shards),
		fleetKeys: []string{"{" + p + ":fleet}:members", "{" + p + ":fleet}:version",
			"{" + p + ":fleet}:pending", "{" + p + ":fleet}:tokens"},
		fleetChannel: p + ":wake:fleet",
		park:         newScript(redis.NewScript(withLibs(parkSrc)), nil), // no flags: refused when Redis is full
		claim:        newScript(redis.NewScript(claimSrc), redis.NewScript(unflagged(claimSrc))),
		ack:          newScript(redis.NewScript(withLibs(ackSrc)), redis.NewScript(unflagged(withLibs(ackSrc)))),
		retry:        newScript(redis.NewScript(retrySrc), redis.NewScript(unflagged(retrySrc))),
		cancel:       newScript(redis.NewScript(withLibs(cancelSrc)), redis.NewScript(unflagged(withLibs(cancelSrc)))),
		member:       newScript(redis.NewScript(memberSrc), redis.NewScript(unflagged(memberSrc))),
		minReplicas:  cfg.MinReplicas,
		waitTimeout:  time.Duration(ceilMS(cfg.WaitTimeout)) * time.Millisecond,
		log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for i := range s.keys {
		tag := "{" + p + ":" + strconv.Itoa(i) + "}"
		z, m, seq, t, r := tag+":z", tag+":m", tag+":seq", tag+":t", tag+":r"
		s.keys[i] = shardKeys{
			z: z, m: m, r: r, epoch: tag + ":epoch",
			zm:      []string{z, m},
			zmR:     []string{z, m, r},
			zmtR:    []string{z, m, t, r},
			zmSeqTR: []string{z, m, seq, t, r},
			seq:     seq,
			shardID: strconv.Itoa(i),
			wake:    p + ":wake:" + strconv.Itoa(i),
		}
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Init checks that Redis will not evict parked messages: an allkeys-* maxmemory-policy is
// an error wrapping ErrEvictionPolicy (noeviction, the default, is right; volatile-* only
// evicts keys with a TTL, and the store sets none; a server that refuses INFO memory, as
// with an ACL user without it, is not checked). It records the shard count in Redis (SET NX on "<prefix>:shards") and checks
// it: a different recorded count is an error wrapping ErrShardMismatch. It creates or reads
// every shard's dataset epoch, which CheckDataset compares against. It also loads the
// scripts (SCRIPT LOAD) so the first calls run by SHA. Call it once at start; it blocks
// until Redis answered, and is safe to call concurrently and repeatedly.
//
// It also reads INFO replication of every master (Cluster: each; otherwise the one the
// client writes to) and logs its connected replicas; with Config.MinReplicas > 0 a master
// with fewer, or one that refuses INFO, is an error wrapping ErrTooFewReplicas.
func (s *Store) Init(ctx context.Context) error {
	if err := s.checkEviction(ctx); err != nil {
		return err
	}
	if err := s.checkReplicas(ctx); err != nil {
		return err
	}
	// A full Redis refuses SET even for a key that exists: what counts is the GET below.
	if err := s.rdb.SetNX(ctx, s.shardsKey, s.shards, 0).Err(); err != nil && !IsOOM(err) {
		return fmt.Errorf("init: record shard count: %w", err)
	}
	v, err := s.rdb.Get(ctx, s.shardsKey).Result()
	if err != nil {
		return fmt.Errorf("init: read shard count: %w", err)
	}
	recorded, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("init: redis key %s holds %q, not a shard count: %w", s.shardsKey, v, ErrShardMismatch)
	}
	if recorded != s.shards {
		return fmt.Errorf("init: redis key %s records %d shards but BRIDGE_SHARDS is %d: %w",
			s.shardsKey, recorded, s.shards, ErrShardMismatch)
	}
	if err := s.initEpochs(ctx); err != nil {
		return err
	}
	for name, sc := range map[string]*script{
		"park": s.park, "claim": s.claim, "ack": s.ack, "retry": s.retry, "cancel": s.cancel, "member": s.member,
	} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("init: load script %s: %w", name, err)
		}
	}
	return nil
}

// checkEviction reads maxmemory_policy from INFO memory on every master.
func (s *Store) checkEviction(ctx context.Context) error {
	check := func(ctx context.Context, c redis.Cmdable) error {
		info, err := c.Info(ctx, "memory").Result()
		var refused redis.Error
		if errors.As(err, &refused) {
			return nil // the server does not let us (ACL) or cannot say (miniredis)
		}
		if err != nil {
			return fmt.Errorf("init: read maxmemory-policy: %w", err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok && strings.HasPrefix(v, "allkeys-") {
				return fmt.Errorf("init: redis maxmemory-policy is %s, which evicts parked messages when memory is full; "+
					"set maxmemory-policy noeviction: %w", v, ErrEvictionPolicy)
			}
		}
		return nil
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c) })
	}
	return check(ctx, s.rdb)
}

// Shards returns the configured shard count. It does not block.
func (s *Store) Shards() int { return s.shards }

// ShardOf returns the shard of a message id in this store. It does not block.
func (s *Store) ShardOf(id string) int { return ShardOf(id, s.shards) }

// ShardOf returns fnv32a(id) mod shards, the shard of a message id; shards < 1 yields 0.
// This mapping must never change: entries of existing ids would become unreachable by
// Cancel and Get. It is a pure function.
func ShardOf(id string, shards int) int {
	if shards < 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(shards))
}

// Park stores the messages until they are due. It sends one script call per shard, all
// in one pipelined round trip (with Config.MinReplicas > 0: one per master, each ending in
// WAIT; a shard whose write is not confirmed fails with an error wrapping
// ErrNotReplicated), and returns one Parked per request, in request order. A
// relative Delay is rounded up to the next millisecond (never early) and counted from the
// Redis time. A request whose Envelope.SourceID was delivered (or cancelled) within the
// tombstone TTL is not parked (Parked.Delivered); a request with Replace whose source id
// equals the parked entry's keeps that entry (a redelivery, not a new message). When Park
// returns an error, the Parked of every request whose shard call succeeded (and was
// confirmed) is still filled in (its ID set): the caller may acknowledge those and retry
// only the others (a request with an empty ID in the result). The failed shards may have
// been written too: calling Park again with the same requests is safe when Replace is
// false or the requests carry source ids (idempotent). An empty batch does no I/O. Park blocks until Redis answered or ctx is done.
func (s *Store) Park(ctx context.Context, reqs []ParkRequest) ([]Parked, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	byShard := make(map[int][]int)
	var order []int // shards in first-seen order, for deterministic calls
	for i, r := range reqs {
		if r.ID == "" {
			return nil, fmt.Errorf("park request %d: empty id", i)
		}
		if !r.Absolute && r.Delay < 0 {
			return nil, fmt.Errorf("park %s: negative delay %s", r.ID, r.Delay)
		}
		sh := s.ShardOf(r.ID)
		if _, ok := byShard[sh]; !ok {
			order = append(order, sh)
		}
		byShard[sh] = append(byShard[sh], i)
	}
	calls := make([]call, len(order))
	for ci, sh := range order {
		idx := byShard[sh]
		args := make([]any, 0, 2+5*len(idx))
		args = append(args, s.keys[sh].wake, s.keys[sh].shardID)
		for _, i := range idx {
			r := &reqs[i]
			mode, when := "r", ceilMS(r.Delay)
			if r.Absolute {
				mode, when = "a", r.At
			}
			replace := "0"
			if r.Replace {
				replace = "1"
			}
			args = append(args, r.ID, mode, replace, strconv.FormatInt(when, 10), encodeBody(r.Envelope, r.ID))
		}
		calls[ci] = call{keys: s.keys[sh].zmSeqTR, args: args, fence: s.keys[sh].seq}
	}
	cmds := s.evalConfirmed(ctx, s.park, calls)
	s.mem.note(cmds)
	out := make([]Parked, len(reqs))
	var errs []error
	for ci, sh := range order {
		if err := parkResults(cmds[ci], reqs, byShard[sh], out); err != nil {
			errs = append(errs, fmt.Errorf("park shard %d: %w", sh, err))
		}
	}
	return out, errors.Join(errs...)
}

// parkResults fills out[i] for the requests idx of one shard's park call, or, when the
// call failed, leaves them zero and returns the error.
func parkResults(cmd *redis.Cmd, reqs []ParkRequest, idx []int, out []Parked) error {
	res, err := cmd.Slice()
	if err != nil {
		return err
	}
	if len(res) != len(idx) {
		return fmt.Errorf("%d results for %d messages", len(res), len(idx))
	}
	got := make([]Parked, len(idx))
	for k, i := range idx {
		pair, ok := res[k].([]any)
		if !ok || len(pair) != 2 {
			return fmt.Errorf("unexpected result %v", res[k])
		}
		due, err1 := toInt64(pair[0])
		existed, err2 := toInt64(pair[1])
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		got[k] = Parked{ID: reqs[i].ID, Due: due, Existed: existed >= 1, Delivered: existed == 2}
	}
	for k, i := range idx {
		out[i] = got[k]
	}
	return nil
}

// Claim leases up to limit due messages of one shard (score <= Redis time): each is
// re-scored to Now + Lease, the token of its Receipt. Nothing is ever returned before its
// due time. Entries whose envelope cannot be decoded are leased too and reported in
// Claim.Corrupt instead of Messages. Claim blocks until Redis answered or ctx is done;
// concurrent claims on one shard never return the same message under the same lease.
func (s *Store) Claim(ctx context.Context, shard, limit int) (Claim, error) {
	c, err := s.claimCall(shard, limit)
	if err != nil {
		return Claim{}, err
	}
	res, err := s.claim.Run(ctx, s.rdb, c.keys, c.args...).Slice()
	if err != nil {
		return Claim{}, fmt.Errorf("claim shard %d: %w", shard, err)
	}
	return parseClaim(shard, res)
}

// claimCall is the claim script's call for one shard.
func (s *Store) claimCall(shard, limit int) (call, error) {
	if err := s.checkShard(shard); err != nil {
		return call{}, fmt.Errorf("claim: %w", err)
	}
	if limit < 1 {
		return call{}, fmt.Errorf("claim shard %d: limit %d < 1", shard, limit)
	}
	return call{keys: s.keys[shard].zm, args: []any{s.leaseMS, limit}}, nil
}

// parseClaim reads the claim script's answer for shard.
func parseClaim(shard int, res []any) (Claim, error) {
	if len(res) < 3 || len(res)%2 != 1 {
		return Claim{}, fmt.Errorf("claim shard %d: unexpected reply of %d values", shard, len(res))
	}
	now, err1 := toInt64(res[0])
	token, err2 := toInt64(res[1])
	next, err3 := toInt64(res[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return Claim{}, fmt.Errorf("claim shard %d: %w", shard, err)
	}
	c := Claim{Now: now, Next: next}
	if n := (len(res) - 3) / 2; n > 0 {
		c.Messages = make([]Claimed, 0, n)
	}
	for i := 3; i < len(res); i += 2 {
		id, ok1 := res[i].(string)
		raw, ok2 := res[i+1].(string)
		if !ok1 || !ok2 {
			return Claim{}, fmt.Errorf("claim shard %d: unexpected reply types %T, %T", shard, res[i], res[i+1])
		}
		rc := Receipt{ID: id, Shard: shard, Token: token}
		st, env, err := decodeStored(raw, id)
		rc.Version = st.version
		if err != nil {
			c.Corrupt = append(c.Corrupt, rc)
			continue
		}
		c.Messages = append(c.Messages, Claimed{Receipt: rc, Due: st.due, Attempts: st.attempts, Envelope: env})
	}
	return c, nil
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
	calls, order, err := s.ackCalls(rs)
	if err != nil {
		return Applied{}, err
	}
	return readApplied("ack", s.evalPipelined(ctx, s.ack, calls), order)
}

// ackCalls builds Ack's script calls, one per shard, and the shard of each.
func (s *Store) ackCalls(rs []Receipt) ([]call, []int, error) {
	lead := []any{strconv.FormatInt(s.tombMS, 10)}
	return s.fencedCalls("ack", func(k shardKeys) []string { return k.zmtR }, lead, len(rs), func(i int) (Receipt, []any, error) {
		r := rs[i]
		return r, []any{r.ID, strconv.FormatInt(r.Version, 10), strconv.FormatInt(r.Token, 10)}, nil
	})
}

// Retry reschedules claimed messages after a failed delivery: attempts + 1, the id enters
// the shard's retry set (counted as overdue once its due time passed, until it is acked,
// cancelled or replaced), next claim at Redis time + Backoff, rounded up to the millisecond
// and at least 1ms (so the next claim's token is always larger than the retried one's). A
// request with PutBack only moves the next claim (no attempt, no retry set). Same fence,
// batching, blocking and partial results as Ack.
func (s *Store) Retry(ctx context.Context, rs []RetryRequest) (Applied, error) {
	if len(rs) == 0 {
		return Applied{}, nil
	}
	calls, order, err := s.retryCalls(rs)
	if err != nil {
		return Applied{}, err
	}
	return readApplied("retry", s.evalPipelined(ctx, s.retry, calls), order)
}

// retryCalls builds Retry's script calls, one per shard, and the shard of each.
func (s *Store) retryCalls(rs []RetryRequest) ([]call, []int, error) {
	return s.fencedCalls("retry", func(k shardKeys) []string { return k.zmR }, nil, len(rs), func(i int) (Receipt, []any, error) {
		r := rs[i]
		if r.Backoff < 0 {
			return r.Receipt, nil, fmt.Errorf("negative backoff %s", r.Backoff)
		}
		return r.Receipt, []any{
			r.ID, strconv.FormatInt(r.Version, 10), strconv.FormatInt(r.Token, 10),
			strconv.FormatInt(max(ceilMS(r.Backoff), 1), 10), countArg(r.PutBack),
		}, nil
	})
}

// countArg is retry.lua's count flag: "0" for a put-back, "1" for a failed attempt.
func countArg(putBack bool) string {
	if putBack {
		return "0"
	}
	return "1"
}

// fencedCalls builds the calls of ack or retry, one per shard, and the shard of each call:
// keysOf picks the script's keys of a shard, lead are the arguments before the per-entry
// ones, item(i) returns the receipt and script arguments of entry i.
func (s *Store) fencedCalls(op string, keysOf func(shardKeys) []string, lead []any, n int,
	item func(i int) (Receipt, []any, error)) ([]call, []int, error) {
	args := make(map[int][]any)
	var order []int
	for i := range n {
		r, a, err := item(i)
		if err == nil {
			err = s.checkShard(r.Shard)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", op, r.ID, err)
		}
		if _, ok := args[r.Shard]; !ok {
			order = append(order, r.Shard)
			args[r.Shard] = append([]any(nil), lead...)
		}
		args[r.Shard] = append(args[r.Shard], a...)
	}
	calls := make([]call, len(order))
	for ci, sh := range order {
		calls[ci] = call{keys: keysOf(s.keys[sh]), args: args[sh]}
	}
	return calls, order, nil
}

// readApplied reads the answers of fenced calls ({applied, next head} each).
func readApplied(op string, cmds []*redis.Cmd, order []int) (Applied, error) {
	out := Applied{Heads: make(map[int]int64, len(order))}
	var errs []error
	for ci, sh := range order {
		res, err := cmds[ci].Slice()
		if err == nil && len(res) != 2 {
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
		out.Heads[sh] = head
	}
	// Shards that succeeded are reported even when others failed.
	return out, errors.Join(errs...)
}

// Cancel deletes the message with this id, pending or claimed (a claimer's later Ack is
// then fenced); a message with a source id leaves a tombstone, as in Ack, so that a
// redelivery of the cancelled source message is not parked again. It reports whether the
// message existed, and blocks until Redis answered or ctx is done. With Config.MinReplicas > 0
// the deletion is confirmed by WAIT; fewer replicas is an error wrapping ErrNotReplicated
// (the deletion may still have happened on the master: cancelling again is safe, but may
// then report false).
func (s *Store) Cancel(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, errors.New("cancel: empty id")
	}
	sh := s.ShardOf(id)
	cmds := s.evalConfirmed(ctx, s.cancel, []call{{keys: s.keys[sh].zmtR, args: []any{id, s.tombMS}, fence: s.keys[sh].seq}})
	n, err := cmds[0].Int64()
	if err != nil {
		return false, fmt.Errorf("cancel %s: %w", id, err)
	}
	return n == 1, nil
}

// Get returns the parked message with this id (pending or claimed), or an error wrapping
// ErrNotFound. It blocks until Redis answered or ctx is done.
func (s *Store) Get(ctx context.Context, id string) (Message, error) {
	sh := s.ShardOf(id)
	raw, err := s.rdb.HGet(ctx, s.keys[sh].m, id).Result()
	if errors.Is(err, redis.Nil) {
		return Message{}, fmt.Errorf("get %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Message{}, fmt.Errorf("get %s: %w", id, err)
	}
	st, env, err := decodeStored(raw, id)
	if err != nil {
		return Message{}, fmt.Errorf("get %s: %w", id, err)
	}
	return Message{ID: id, Shard: sh, Due: st.due, Attempts: st.attempts, Version: st.version, Envelope: env}, nil
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
// aligned with it, and the Redis time, in one pipelined round trip (ZRANGE 0 0 WITHSCORES
// per shard, plus TIME). It blocks until Redis answered or ctx is done.
func (s *Store) Heads(ctx context.Context, shards []int) (heads []int64, now int64, err error) {
	for _, sh := range shards {
		if err := s.checkShard(sh); err != nil {
			return nil, 0, fmt.Errorf("heads: %w", err)
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
			return nil, 0, fmt.Errorf("heads shard %d: %w", shards[i], err)
		}
		heads[i] = h
	}
	t, err := tm.Result()
	if err != nil {
		return nil, 0, fmt.Errorf("heads time: %w", err)
	}
	return heads, t.UnixMilli(), nil
}

func headOf(c *redis.ZSliceCmd) (int64, error) {
	zs, err := c.Result()
	if err != nil {
		return 0, err
	}
	if len(zs) == 0 {
		return -1, nil
	}
	return int64(zs[0].Score), nil
}

func (s *Store) checkShard(sh int) error {
	if sh < 0 || sh >= s.shards {
		return fmt.Errorf("shard %d not in 0..%d", sh, s.shards-1)
	}
	return nil
}

// call is one script invocation.
type call struct {
	keys []string
	args []any
	// fence is a string key of the call's shard (its seq key) that evalConfirmed writes
	// with INCRBY 0 before WAIT (wait.go); empty for calls that are never confirmed.
	fence string
	// sc, when set, is the call's own script, overriding evalOn's (a pipeline of several
	// scripts: Exchange).
	sc *script
}

// script returns the call's script: its own, else def.
func (c call) script(def *script) *script {
	if c.sc != nil {
		return c.sc
	}
	return def
}

// evalPipelined runs sc once per call, all in one pipeline, without WAIT (for writes
// whose loss in a failover only costs a duplicate: claim leases, acks, retries). Errors
// are left in the returned commands.
func (s *Store) evalPipelined(ctx context.Context, sc *script, calls []call) []*redis.Cmd {
	return s.evalOn(ctx, s.rdb, "", sc, calls, false)
}

// evalOn runs sc (or a call's own script) once per call, all in one pipeline on c, by SHA; the calls that got
// NOSCRIPT (script cache flushed, or a node that never saw SCRIPT LOAD) did not run and are
// sent again with EVAL in a second pipeline. With confirm, each pipeline ends with the WAIT
// fence (confirmPipeline), so the EVAL resend is confirmed too; master names c in errors.
// Errors are left in the returned commands.
func (s *Store) evalOn(ctx context.Context, c pipeliner, master string, sc *script, calls []call, confirm bool) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	s.sendPipeline(ctx, c, master, calls, all, cmds, confirm, func(p redis.Pipeliner, c call) *redis.Cmd {
		return c.script(sc).EvalSha(ctx, p, c.keys, c.args...)
	})
	var again []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds
	}
	s.sendPipeline(ctx, c, master, calls, again, cmds, confirm, func(p redis.Pipeliner, c call) *redis.Cmd {
		return c.script(sc).Eval(ctx, p, c.keys, c.args...)
	})
	return cmds
}

// sendPipeline sends calls[i] for every i in idx in one pipeline on c, storing their
// commands in cmds[i]; with confirm the pipeline ends with the WAIT fence, and the
// commands that succeeded get an error when WAIT does not confirm them.
func (s *Store) sendPipeline(ctx context.Context, c pipeliner, master string, calls []call, idx []int,
	cmds []*redis.Cmd, confirm bool, send func(redis.Pipeliner, call) *redis.Cmd) {
	pipe := c.Pipeline()
	for _, i := range idx {
		cmds[i] = send(pipe, calls[i])
	}
	var wait *redis.IntCmd
	if confirm {
		wait = s.appendWait(ctx, pipe, calls[idx[0]].fence)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	if wait != nil {
		s.confirmed(wait, master, cmds, idx)
	}
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// ceilMS converts d to whole milliseconds, rounding up.
func ceilMS(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

func toInt64(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case string:
		return strconv.ParseInt(n, 10, 64)
	default:
		return 0, fmt.Errorf("unexpected reply type %T", v)
	}
}
