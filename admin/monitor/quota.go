package monitor

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/delaystore"
)

// QuotaCollector exports BRIDGE_TARGET_QUOTA's use (docs/operating.md, "Quotas"):
// delaybridge_quota_parked{pattern} (the fleet's parked messages counted against the
// pattern; every replica exports the same value: aggregate with max, not sum),
// delaybridge_quota_limit{pattern} (this replica's limit) and
// delaybridge_quota_rejected_total{pattern} (messages this replica refused for it). A
// scrape costs one HGETALL (one per shard on Redis Cluster), bounded by
// storeScrapeTimeout; a failed read leaves the parked gauges out of that scrape (the
// store collector's delaybridge_store_scrape_error tells Redis failures). Safe for
// concurrent use.
type QuotaCollector struct {
	store                   *delaystore.Store
	admin                   *admin.Admin
	parked, limit, rejected *prometheus.Desc
}

// NewQuotaCollector returns the quota metrics of s, whose fleet-wide use a (the
// operator's side of s) reads; register it only when s has quota rules (s.QuotaRules),
// so a bridge without quotas pays nothing per scrape.
func NewQuotaCollector(s *delaystore.Store, a *admin.Admin) *QuotaCollector {
	return &QuotaCollector{
		store: s,
		admin: a,
		parked: prometheus.NewDesc("delaybridge_quota_parked",
			"Parked messages counted against a BRIDGE_TARGET_QUOTA pattern, fleet-wide (every replica reports the same count).", []string{"pattern"}, nil),
		limit: prometheus.NewDesc("delaybridge_quota_limit",
			"The BRIDGE_TARGET_QUOTA limit of a pattern, as this replica is configured.", []string{"pattern"}, nil),
		rejected: prometheus.NewDesc("delaybridge_quota_rejected_total",
			"Messages this replica did not park because their BRIDGE_TARGET_QUOTA pattern was full (dead-lettered quota_exceeded, or API 429).", []string{"pattern"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *QuotaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.parked
	ch <- c.limit
	ch <- c.rejected
}

// Collect implements prometheus.Collector; it blocks at most storeScrapeTimeout.
func (c *QuotaCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), storeScrapeTimeout)
	defer cancel()
	// The limits and rejections are this replica's own: exported even when Redis fails.
	rejected := c.store.QuotaRejected()
	for i, r := range c.store.QuotaRules() {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(r.Limit), r.Pattern)
		ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(rejected[i]), r.Pattern)
	}
	us, err := c.admin.Quotas(ctx)
	if err != nil {
		return
	}
	for _, u := range us {
		ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(u.Parked), u.Pattern)
	}
}
