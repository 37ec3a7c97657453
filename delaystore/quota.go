package delaystore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/glob"
)

// MaxTargetQuota is the largest n BRIDGE_TARGET_QUOTA accepts per pattern (Lua's doubles
// count it exactly).
const MaxTargetQuota = 1_000_000_000_000

// QuotaRule is one pattern of BRIDGE_TARGET_QUOTA: at most Limit messages parked, summed
// over the targets that match Pattern and no earlier rule (docs/design.md, "Quotas").
type QuotaRule struct {
	Pattern string
	Limit   int64
}

// ParseQuotaRules reads BRIDGE_TARGET_QUOTA: comma-separated "<glob>=<n>" (the grammar
// and globs of BRIDGE_TARGET_RATE, glob.ParseRules), for example "tenant-a.*=100000".
// Blank entries are ignored; "" is no rule. A pattern given twice is refused (the second
// could never apply).
func ParseQuotaRules(s string) ([]QuotaRule, error) {
	items, err := glob.ParseRules(s, "<n>", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > MaxTargetQuota {
			return fmt.Errorf("want a quota of 1 to %d messages", int64(MaxTargetQuota))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var rules []QuotaRule
	seen := map[string]bool{}
	for _, it := range items {
		if seen[it.Pattern] {
			return nil, fmt.Errorf("pattern %q given twice", it.Pattern)
		}
		if strings.ContainsAny(it.Pattern, "\n") {
			return nil, fmt.Errorf("pattern %q: no line breaks", it.Pattern)
		}
		seen[it.Pattern] = true
		n, _ := strconv.ParseInt(it.Value, 10, 64) // checked above
		rules = append(rules, QuotaRule{Pattern: it.Pattern, Limit: n})
	}
	return rules, nil
}

// quotas is a Store's BRIDGE_TARGET_QUOTA: the rules, compiled, and what the store counts
// of them. Read-only after New but for the counters: safe for concurrent use.
type quotas struct {
	rules []QuotaRule
	pats  []*glob.Pattern
	// mark is the pattern list, one per line: the counter hash's "#" field says which list
	// its targets were mapped by (quotacount.lua).
	mark string
	// perShard: Redis Cluster, where each shard counts against its share of a limit.
	perShard bool
	shards   int
	rejected []atomic.Uint64 // per rule: messages refused (Park)
}

// newQuotas compiles rules (already validated) for a store of shards shards.
func newQuotas(rules []QuotaRule, shards int, perShard bool) *quotas {
	q := &quotas{rules: rules, shards: shards, perShard: perShard, rejected: make([]atomic.Uint64, len(rules))}
	lines := make([]string, len(rules))
	for i, r := range rules {
		p, _ := glob.Compile(r.Pattern) // valid: ParseQuotaRules checked it
		q.pats = append(q.pats, p)
		lines[i] = r.Pattern
	}
	q.mark = strings.Join(lines, "\n")
	return q
}

// match returns the index of the rule that applies to target, -1 for none.
func (q *quotas) match(target string) int { return glob.FirstMatch(q.pats, target) }

// QuotaParked returns the parked messages counted against each BRIDGE_TARGET_QUOTA
// pattern the counts hold, fleet-wide: this replica's patterns and any other replica's
// (pattern -> count). One pipeline of HGETALL of the counter hash (Cluster: of every
// shard's), not one atomic snapshot on Cluster. It blocks until Redis answered or ctx is
// done.
func (s *Store) QuotaParked(ctx context.Context) (map[string]int64, error) {
	keys := s.quotaMarkKeys()
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, k)
	}
	_, _ = pipe.Exec(ctx)
	parked := map[string]int64{}
	for _, c := range cmds {
		m, err := c.Result()
		if err != nil {
			return nil, fmt.Errorf("quotas: %w", err)
		}
		for f, v := range m {
			if p, ok := strings.CutPrefix(f, "p:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				parked[p] += n
			}
		}
	}
	return parked, nil
}

// QuotaOf returns the BRIDGE_TARGET_QUOTA pattern target counts against (the first of the
// store's rules that matches it), "" for none. It does not block.
func (s *Store) QuotaOf(target string) string {
	if r := s.quota.match(target); r >= 0 {
		return s.quota.rules[r].Pattern
	}
	return ""
}

// QuotaRules returns the store's BRIDGE_TARGET_QUOTA rules, in order. It does not block.
func (s *Store) QuotaRules() []QuotaRule { return append([]QuotaRule(nil), s.quota.rules...) }

// QuotaRejected returns, per rule of QuotaRules, the messages Park refused for it since
// the store was made (no Redis call). It does not block.
func (s *Store) QuotaRejected() []uint64 {
	out := make([]uint64, len(s.quota.rejected))
	for i := range s.quota.rejected {
		out[i] = s.quota.rejected[i].Load()
	}
	return out
}

// countQuotas maps the shards' targets to the quota patterns again and counts them
// (quotacount.lua) when the counter hash was mapped by another pattern list, or always
// with force: one call for the whole store on one Redis node, one per shard on Cluster.
// The targets are read first and classified here (the globs are Go's); the script refuses
// targets parked since then, which are classified and sent again (a few rounds at most).
// A store that never had a quota and has none is left alone.
func (s *Store) countQuotas(ctx context.Context, force bool) error {
	if s.quota.mark == "" && !force {
		// No rule: only a mark left by an earlier configuration needs a count (to drop
		// its mappings); an absent hash has none.
		pipe := s.rdb.Pipeline() // one HEXISTS per key (the ACL grants no EXISTS)
		var cmds []*redis.BoolCmd
		for _, k := range s.quotaMarkKeys() {
			cmds = append(cmds, pipe.HExists(ctx, k, "#"))
		}
		_, _ = pipe.Exec(ctx)
		found := false
		for _, c := range cmds {
			n, err := c.Result()
			if err != nil {
				return fmt.Errorf("quota counts: %w", err)
			}
			found = found || n
		}
		if !found {
			return nil
		}
	}
	if !s.quota.perShard {
		all := make([]int, s.shards)
		for i := range all {
			all[i] = i
		}
		return s.countQuotaShards(ctx, all, force)
	}
	for sh := range s.keys {
		if err := s.countQuotaShards(ctx, []int{sh}, force); err != nil {
			return err
		}
	}
	return nil
}

// quotaMarkKeys are the counter hashes: one on one Redis node, every shard's on Cluster.
func (s *Store) quotaMarkKeys() []string {
	if !s.quota.perShard {
		return []string{s.keys[0].qc}
	}
	out := make([]string, len(s.keys))
	for i, k := range s.keys {
		out[i] = k.qc
	}
	return out
}

// shardOfField returns the shard whose names resolve the target field t of one of shards'
// {P:s}:n (a code names its shard: code mod shards); shards[0] for a name, which needs
// none.
func shardOfField(t string, shards []int, n int) int {
	if len(t) > 1 && t[0] == codeMark {
		if code, k := binary.Uvarint([]byte(t[1:])); k > 0 {
			return int(code % uint64(n))
		}
	}
	return shards[0]
}

// countQuotaShards runs quotacount.lua over shards (whose counter hash is one key).
func (s *Store) countQuotaShards(ctx context.Context, shards []int, force bool) error {
	class := map[string]string{}
	read := s.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(shards))
	for i, sh := range shards {
		cmds[i] = read.HKeys(ctx, s.keys[sh].n)
	}
	_, _ = read.Exec(ctx)
	var fresh []string
	for _, c := range cmds {
		ts, err := c.Result()
		if err != nil {
			return fmt.Errorf("quota counts: %w", err)
		}
		fresh = append(fresh, ts...)
	}
	keys := make([]string, 0, 2*len(shards)+1)
	for _, sh := range shards {
		keys = append(keys, s.keys[sh].n, s.keys[sh].qt)
	}
	keys = append(keys, s.keys[shards[0]].qc)
	for round := 0; round < 10; round++ {
		for _, t := range fresh {
			if t == "" {
				continue
			}
			name, err := s.nameOf(ctx, shardOfField(t, shards, s.shards), t) // a field of {P:s}:n: a name or a code
			if errors.Is(err, ErrCorrupt) {
				name, err = "", nil // its names were lost (deleted by hand): no pattern's
			}
			if err != nil {
				return fmt.Errorf("quota counts: %w", err)
			}
			class[t] = ""
			if r := s.quota.match(name); r >= 0 {
				class[t] = s.quota.rules[r].Pattern
			}
		}
		args := []any{s.quota.mark, boolArg(force)}
		for t, p := range class {
			args = append(args, t, p)
		}
		res, err := s.evalPipelined(ctx, s.scripts[scriptQuotaCount], []call{{keys: keys, args: args}})[0].StringSlice()
		if err != nil {
			return fmt.Errorf("quota counts: %w", err)
		}
		if len(res) == 0 || res[0] != "2" {
			return nil
		}
		fresh = res[1:]
	}
	return errors.New("quota counts: targets kept appearing while counting; try again")
}
