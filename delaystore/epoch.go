package delaystore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The dataset epoch detects a Redis that came back empty (FLUSHALL, a restart without
// persistence, a new pod without its volume): the bridge cannot prevent that loss, only
// report it. Every shard has a key {P:s}:epoch, under the shard's hash tag so that on
// Redis Cluster each master holds the epochs of its own shards and the loss of any one
// master's data is seen. Init creates the missing ones (SET NX, a random value) and
// remembers what it read; CheckDataset reads them again: a key that is gone or holds
// another value means the shard's data was reset under this replica.

// newEpoch returns a random epoch value.
func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// initEpochs creates the missing epoch keys and remembers every shard's epoch.
func (s *Store) initEpochs(ctx context.Context) error {
	shards := make([]int, s.shards)
	for i := range shards {
		shards[i] = i
	}
	seen, err := s.establishEpochs(ctx, shards)
	if err != nil {
		return fmt.Errorf("init: dataset epoch: %w", err)
	}
	s.epochMu.Lock()
	s.epochs = seen
	s.epochMu.Unlock()
	return nil
}

// establishEpochs sets each listed shard's epoch key unless it exists (SET NX) and returns
// the values then stored, in the order of shards. One pipeline. What counts is that each
// key exists after it: a SET refused (a full Redis refuses it even for an existing key)
// fails only through its GET.
func (s *Store) establishEpochs(ctx context.Context, shards []int) ([]string, error) {
	epoch := newEpoch()
	sets := make([]*redis.BoolCmd, len(shards))
	gets := make([]*redis.StringCmd, len(shards))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sh := range shards {
			sets[i] = p.SetNX(ctx, s.keys[sh].epoch, epoch, 0)
			gets[i] = p.Get(ctx, s.keys[sh].epoch)
		}
		return nil
	}) // errors are read per command
	out := make([]string, len(shards))
	for i, g := range gets {
		v, err := g.Result()
		if err != nil {
			if serr := sets[i].Err(); serr != nil {
				err = fmt.Errorf("%w (set: %v)", err, serr)
			}
			return nil, fmt.Errorf("shard %d: %w", shards[i], err)
		}
		out[i] = v
	}
	return out, nil
}

// CheckDataset detects a reset of the Redis dataset: it reads the epoch of one shard per
// Redis master (Cluster: the shards grouped by the master serving their slot; standalone
// and Sentinel: one), a different shard of each master from call to call, so a call costs
// O(masters) commands whatever the shard count, and the loss of a master's data (FLUSHALL, a
// restart without persistence...) is seen at the next call. When one of them is gone or
// holds another value than this replica saw, it reads every shard's epoch (one pipeline)
// and reports every shard whose key is gone or changed: their parked messages were lost in
// Redis. It then re-creates their epochs (and the shard-count record), so a reset is
// reported once per replica. A shard whose keys alone vanished (not its master's whole
// dataset) is found when the rotation reaches it. On error it reports no shard and
// remembers the old epochs, so a later call sees the reset again. Init must have succeeded
// first. It blocks until Redis answered or ctx is done; safe for concurrent use.
func (s *Store) CheckDataset(ctx context.Context) (reset []int, err error) {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	if len(s.epochs) != s.shards {
		return nil, errors.New("check dataset: store not initialised")
	}
	sample := s.epochSample(ctx)
	s.epochTurn++
	changed, err := s.changedEpochs(ctx, sample)
	if err != nil || len(changed) == 0 {
		return nil, err
	}
	all := make([]int, s.shards)
	for i := range all {
		all[i] = i
	}
	if reset, err = s.changedEpochs(ctx, all); err != nil || len(reset) == 0 {
		return nil, err
	}
	if err := s.rdb.SetNX(ctx, s.shardsKey, s.shardsValue(), 0).Err(); err != nil {
		return nil, fmt.Errorf("check dataset: record shard count: %w", err)
	}
	seen, err := s.establishEpochs(ctx, reset)
	if err != nil {
		return nil, fmt.Errorf("check dataset: re-create epoch: %w", err)
	}
	for i, sh := range reset {
		s.epochs[sh] = seen[i]
	}
	return reset, nil
}

// epochSample picks the shards whose epochs this check reads: per Redis master (Cluster:
// by the slot map, no I/O unless the client reloads it; else one master) the next of its
// shards in turn. A shard whose master is unknown (slot map not loaded) is read too. Called
// with epochMu held.
func (s *Store) epochSample(ctx context.Context) []int {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return []int{s.epochTurn % s.shards}
	}
	groups := map[*redis.Client][]int{}
	var order []*redis.Client
	var sample []int
	for sh := range s.shards {
		node, err := cc.MasterForKey(ctx, s.keys[sh].epoch)
		if err != nil {
			sample = append(sample, sh)
			continue
		}
		if _, ok := groups[node]; !ok {
			order = append(order, node)
		}
		groups[node] = append(groups[node], sh)
	}
	if len(sample) > 0 {
		return sample // no slot map: read them all, as a full check would
	}
	for _, node := range order {
		g := groups[node]
		sample = append(sample, g[s.epochTurn%len(g)])
	}
	return sample
}

// changedEpochs reads the epochs of shards in one pipeline and returns those that are gone
// or differ from the remembered ones, in the order of shards. Called with epochMu held.
func (s *Store) changedEpochs(ctx context.Context, shards []int) ([]int, error) {
	gets := make([]*redis.StringCmd, len(shards))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sh := range shards {
			gets[i] = p.Get(ctx, s.keys[sh].epoch)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("check dataset: %w", err)
	}
	var changed []int
	for i, g := range gets {
		if err := g.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("check dataset: %w", err)
		}
		if g.Val() != s.epochs[shards[i]] {
			changed = append(changed, shards[i])
		}
	}
	return changed, nil
}
