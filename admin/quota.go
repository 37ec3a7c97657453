package admin

import (
	"context"
	"sort"
)

// QuotaUsage is one BRIDGE_TARGET_QUOTA pattern's use (Quotas).
type QuotaUsage struct {
	Pattern string
	// Limit is the pattern's quota in this replica's configuration; 0 for a pattern the
	// counts hold that this replica has no rule for (another replica's configuration).
	Limit int64
	// Parked is the number of parked messages counted against the pattern, fleet-wide.
	Parked int64
	// Rejected counts the messages this replica's Park refused for the pattern since
	// start.
	Rejected uint64
}

// Quotas returns the use of every quota pattern (docs/design.md, "Quotas"): this
// replica's rules in their order, then patterns the counts hold that it has no rule for.
// One pipeline (delaystore.Store.QuotaParked); not one atomic snapshot on Cluster. It
// blocks until Redis answered or ctx is done.
func (a *Admin) Quotas(ctx context.Context) ([]QuotaUsage, error) {
	parked, err := a.store.QuotaParked(ctx)
	if err != nil {
		return nil, err
	}
	rules, rejected := a.store.QuotaRules(), a.store.QuotaRejected()
	out := make([]QuotaUsage, 0, len(rules))
	for i, r := range rules {
		out = append(out, QuotaUsage{Pattern: r.Pattern, Limit: r.Limit, Parked: parked[r.Pattern], Rejected: rejected[i]})
		delete(parked, r.Pattern)
	}
	var others []QuotaUsage
	for p, n := range parked {
		others = append(others, QuotaUsage{Pattern: p, Parked: n})
	}
	sort.Slice(others, func(i, j int) bool { return others[i].Pattern < others[j].Pattern })
	return append(out, others...), nil
}
