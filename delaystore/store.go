package delaystore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store is the Redis delay store. Create it with New and call Init once before use.
// All methods are safe for concurrent use; every method that talks to Redis blocks until
// Redis answered or ctx is done. The caller owns the Redis client and closes it.
type Store struct {
	rdb    redis.UniversalClient
	shards int
	// run: how many consecutive positions of a stream share a shard (layout.go); set by
	// Init from P:shards, newRun until then (what Init gives an empty store).
	run    atomic.Int64
	newRun int // Config.ShardRun, or its default for the topology
	// names: per shard, the interned names this replica knows (names.go).
	names *nameBook
	// layoutKnown: Init has read the layout; until then calls that address ids refuse.
	layoutKnown atomic.Bool
	// unpackUntil (unix ns): until then every group goes in a call of its own, as on
	// Cluster (groups.go: set when a packed call failed on one group's error).
	unpackUntil atomic.Int64
	leaseMS     int64
	tombMS      int64 // tombstone TTL in ms; 0: none
	cancelMS    int64 // how long a cancel is remembered (Config.CancelWindow), ms
	shardsKey   string
	keys        []shardKeys
	// The fleet (fleet.go): {P:fleet}:members, :version, :pending, :tokens, and channel
	// P:wake:fleet.
	fleetKeys    []string
	fleetChannel string
	// eventsChannel is P:events: the fleet's live events (events.go).
	eventsChannel string
	// statsPrefix is {P:fleet}:stats:, the fleet's counts by time bucket (stats.go).
	statsPrefix string
	// rateKey is {P:rate}:tat, the publish slots of rate-limited targets (rate.go).
	rateKey string
	// pauseKey is {P:pause}, the paused target globs (pause.go); pauseFence, {P:pause}:seq,
	// the WAIT fence of its writes (wait.go).
	pauseKey, pauseFence string
	// cursorKey is P:cursor, the key that seals the operator's cursors (cursorkey.go).
	cursorKey string
	// auditKeys are the audit log's records (audit.go): {P:audit}:z, :e, :s.
	auditKeys []string

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

	// scripts, by scriptID (scripts.go), keep only their SHA-1 (set at creation, rewritten
	// with the same value by Load) and which form the server takes, so sharing them is safe.
	scripts scriptSet
	mem     memoryState // what parks learned about Redis memory
	quota   *quotas     // BRIDGE_TARGET_QUOTA (quota.go)
}

// shardKeys are the keys of one shard; the slices are passed to go-redis, which only reads
// them. Each script's list keeps its keys' order; the tombstones' older set ({P:s}:to)
// comes last.
type shardKeys struct {
	z, m    string
	r       string   // {P:s}:r, the retry set (ids whose last publish failed, scored by due)
	epoch   string   // {P:s}:epoch, the shard's dataset epoch (epoch.go)
	zm      []string // z, m
	claim   []string // z, m, nm, ki: claim
	retry   []string // z, m, r, seq, ki: retry
	n       string   // {P:s}:n, parked count per target (the field "" marks it complete)
	nm      string   // {P:s}:nm, the shard's interned names (names.go)
	k, ki   string   // {P:s}:k, {P:s}:ki: the chains of ordering keys, the keyed entries (chain.lua)
	ack     []string // z, m, tn, r, n, qt, qc, to, k, ki, nm: ack
	bulk    []string // z, m, seq, tn, r, n, b, bx, qt, qc, to, k, ki: bulk
	b, bx   string   // {P:s}:b, {P:s}:bx: progress of resumable bulk operations (change.go)
	park    []string // z, m, seq, tn, r, n, c, cx, qt, qc, nm, to, k, ki: park
	cancel  []string // z, m, tn, r, n, c, cx, qt, qc, to, k, ki: cancel
	qt      string   // {P:s}:qt, the shard's targets mapped to quota patterns (quota.lua)
	qc      string   // the quota counter hash: {P:quota}, or {P:s}:q on Cluster (quota.lua)
	seq     string   // {P:s}:seq, also the key of the WAIT fence (wait.go)
	shardID string   // the shard number as a decimal string
	wake    string   // P:wake:<s>, the shard's wake channel (park publishes, Wakeups follows)
}

// newShardKeys are the keys of shard i under prefix p, all with the hash tag {p:i} but
// the quota counter hash {p:quota} of a store on one Redis node (perShard false: every
// shard's scripts count against it; on Cluster each shard has its own, {p:i}:q).
func newShardKeys(p string, i int, perShard bool) shardKeys {
	tag := "{" + p + ":" + strconv.Itoa(i) + "}"
	z, m, seq, r, n, nm := tag+":z", tag+":m", tag+":seq", tag+":r", tag+":n", tag+":nm"
	tn, to := tag+":tn", tag+":to" // tombstones, newer and older set (tombs.lua)
	c, cx := tag+":c", tag+":cx"   // remembered cancels and their expiry index
	b, bx := tag+":b", tag+":bx"   // bulk operations' progress and its expiry index
	k, ki := tag+":k", tag+":ki"   // the chains of ordering keys and the keyed entries (chain.lua)
	qt, qc := tag+":qt", "{"+p+":quota}"
	if perShard {
		qc = tag + ":q"
	}
	return shardKeys{
		z: z, m: m, r: r, epoch: tag + ":epoch",
		zm:    []string{z, m},
		claim: []string{z, m, nm, ki},
		retry: []string{z, m, r, seq, ki},
		n:     n,
		nm:    nm,
		ack:   []string{z, m, tn, r, n, qt, qc, to, k, ki, nm},
		bulk:  []string{z, m, seq, tn, r, n, b, bx, qt, qc, to, k, ki},
		b:     b, bx: bx,
		k: k, ki: ki,
		park:    []string{z, m, seq, tn, r, n, c, cx, qt, qc, nm, to, k, ki},
		cancel:  []string{z, m, tn, r, n, c, cx, qt, qc, to, k, ki},
		qt:      qt,
		qc:      qc,
		seq:     seq,
		shardID: strconv.Itoa(i),
		wake:    p + ":wake:" + strconv.Itoa(i),
	}
}

// New validates cfg and returns a Store over rdb (a *redis.Client, *redis.ClusterClient,
// ...), adjusted by opts. It does no I/O; call Init before use.
func New(rdb redis.UniversalClient, cfg Config, opts ...Option) (*Store, error) {
	if err := checkNew(rdb, cfg); err != nil {
		return nil, err
	}
	scripts, err := newScripts()
	if err != nil {
		return nil, fmt.Errorf("delaystore: %w", err)
	}
	_, perShard := rdb.(*redis.ClusterClient)
	s := &Store{
		rdb:         rdb,
		shards:      cfg.Shards,
		leaseMS:     ceilMS(cfg.Lease),
		tombMS:      ceilMS(tombstoneTTL(cfg.TombstoneTTL)),
		cancelMS:    ceilMS(cmp.Or(cfg.CancelWindow, DefaultCancelWindow)),
		scripts:     scripts,
		minReplicas: cfg.MinReplicas,
		waitTimeout: time.Duration(ceilMS(cfg.WaitTimeout)) * time.Millisecond,
		log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		names:       newNameBook(cfg.Shards),
		newRun:      newStoreRun(cfg.ShardRun, perShard),
	}
	s.nameKeys(cfg.KeyPrefix, perShard)
	rules, _ := ParseQuotaRules(cfg.TargetQuota) // validated by checkNew
	s.quota = newQuotas(rules, cfg.Shards, perShard)
	s.run.Store(int64(s.newRun))
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// checkNew reports every problem of New's arguments at once.
func checkNew(rdb redis.UniversalClient, cfg Config) error {
	var errs []error
	if rdb == nil {
		errs = append(errs, errors.New("redis client is nil"))
	}
	for _, p := range cfg.Validate() {
		errs = append(errs, p)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delaystore config: %w", err)
	}
	return nil
}

// tombstoneTTL is the tombstone TTL of Config.TombstoneTTL d: DefaultTombstoneTTL for 0,
// none (0) for a negative d.
func tombstoneTTL(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return DefaultTombstoneTTL
	case d < 0:
		return 0
	}
	return d
}

// newStoreRun is the run a store this replica creates gets (Config.ShardRun, or its
// default for the topology: perShard is Redis Cluster).
func newStoreRun(configured int, perShard bool) int {
	switch {
	case configured != 0:
		return configured
	case perShard:
		return ClusterShardRun
	}
	return DefaultShardRun
}

// nameKeys sets the names of every key of the store under prefix p (docs/design.md,
// "Redis data layout"): P:shards, P:cursor, each shard's (newShardKeys), the fleet's
// {P:fleet}, the publish slots' {P:rate} and the audit log's {P:audit}.
func (s *Store) nameKeys(p string, perShard bool) {
	s.shardsKey, s.cursorKey = p+":shards", p+":cursor"
	s.keys = make([]shardKeys, s.shards)
	for i := range s.keys {
		s.keys[i] = newShardKeys(p, i, perShard)
	}
	fleet := "{" + p + ":fleet}"
	s.fleetKeys = []string{fleet + ":members", fleet + ":version", fleet + ":pending", fleet + ":tokens"}
	s.fleetChannel = p + ":wake:fleet"
	s.eventsChannel = p + ":events"
	s.statsPrefix = fleet + ":stats:"
	s.rateKey = "{" + p + ":rate}:tat"
	s.pauseKey = "{" + p + ":pause}"
	s.pauseFence = s.pauseKey + ":seq"
	audit := "{" + p + ":audit}"
	s.auditKeys = []string{audit + ":z", audit + ":e", audit + ":s"}
}

// Init checks that Redis will not evict parked messages: an allkeys-* maxmemory-policy is
// an error wrapping ErrEvictionPolicy (noeviction, the default, is right; volatile-* only
// evicts keys with a TTL, and the store sets none; a server that refuses INFO memory, as
// with an ACL user without it, is not checked). It records the shard count, the run and
// the store format in Redis (SET NX on "<prefix>:shards": layout.go) and checks them: a
// different recorded count is a ShardCountError, another format an error wrapping
// ErrShardMismatch that names the drain-and-recreate procedure; an existing store keeps
// its run. It creates or reads
// every shard's dataset epoch, which CheckDataset compares against. It also loads the
// scripts (SCRIPT LOAD) so the first calls run by SHA, and makes the parked counts per
// target complete (Targets; counts lost with a Redis dataset are counted again, a full
// Redis leaves that to Targets). Call it once at start; it blocks
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
	// An empty store gets this replica's run; a store that has P:shards keeps its own.
	if err := s.rdb.SetNX(ctx, s.shardsKey, shardsMark(s.shards, s.newRun), 0).Err(); err != nil && !IsOOM(err) {
		return fmt.Errorf("init: record shard count: %w", err)
	}
	v, err := s.rdb.Get(ctx, s.shardsKey).Result()
	if err != nil {
		return fmt.Errorf("init: read shard count: %w", err)
	}
	recorded, run, err := parseShardsValue(v)
	if err != nil {
		return fmt.Errorf("init: redis key %s: %w; drain the store and create it again (docs/operating.md, \"Store format\"): %w",
			s.shardsKey, err, ErrShardMismatch)
	}
	if recorded != s.shards {
		return &ShardCountError{Key: s.shardsKey, Recorded: recorded, Configured: s.shards}
	}
	if run != s.newRun {
		s.log.Info("the store records another shard run than this replica gives a new store (BRIDGE_SHARD_RUN, or its default); using the store's",
			"key", s.shardsKey, "store_run", run, "configured_run", s.newRun)
	}
	s.run.Store(int64(run))
	s.layoutKnown.Store(true)
	if err := s.initEpochs(ctx); err != nil {
		return err
	}
	if err := s.loadScripts(ctx); err != nil {
		return err
	}
	// Parked counts per target (Targets): a new store is marked complete at once; a shard
	// whose mark is gone (its dataset was lost) is counted now, once (~3 us per entry). Delivery
	// does not need them: a count that failed (a full Redis, a shard too large for the
	// read timeout) is left to the first Targets, which runs the same check.
	if err := s.completeCounts(ctx, false); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("init: parked counts per target: %w", err)
		}
		s.log.Warn("parked counts per target not complete yet: GET /v1/targets completes them", "err", err)
	}
	// Quota counts (quota.go): counted again from the parked counts per target when the
	// pattern list changed, so a new pattern counts what is parked already.
	if err := s.countQuotas(ctx, false); err != nil {
		return fmt.Errorf("init: %w", err)
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
			v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:")
			if ok && strings.HasPrefix(v, "allkeys-") {
				return fmt.Errorf("init: redis maxmemory-policy is %s, which evicts parked messages when memory is full; "+
					"set maxmemory-policy noeviction: %w", v, ErrEvictionPolicy)
			}
			if ok && strings.HasPrefix(v, "volatile-") {
				s.log.Warn("redis maxmemory-policy evicts keys with a TTL when memory is full: the tombstone sets "+
					"among them, so a redelivery within the tombstone TTL could be delivered twice; "+
					"set maxmemory-policy noeviction", "policy", v)
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

func (s *Store) checkShard(sh int) error {
	if sh < 0 || sh >= s.shards {
		return fmt.Errorf("shard %d not in 0..%d", sh, s.shards-1)
	}
	return nil
}
