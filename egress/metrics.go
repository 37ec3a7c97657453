package egress

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
)

// Metrics are the egress metrics. A nil *Metrics records nothing.
type Metrics struct {
	messages *prometheus.CounterVec
	dead     *prometheus.CounterVec
	lateness prometheus.Histogram
	// held: delaybridge_held_by_order_seconds, the time a published message waited past its
	// due time for its ordering key's predecessor (not in lateness).
	held prometheus.Histogram
	// latest is the largest lateness observed since start, in ms (a histogram's bucket
	// bound is not it): delaybridge_delivery_lateness_max_seconds.
	latest   atomic.Int64
	inflight prometheus.Gauge
	owns     prometheus.Gauge
	paused   *prometheus.GaugeVec // delaybridge_target_paused{target}
}

// NewMetrics registers the egress metrics with reg:
// delaybridge_messages_out_total{broker, result} (published, retried, dead_lettered;
// expired: dead-lettered because it could not be published before due + x-delay-expires;
// dead_letter_failed: a dead letter that could not be published, the message is retried;
// put_back: claimed while its target was at its in-flight limit, put back unpublished;
// rate_limited: claimed before its BRIDGE_TARGET_RATE slot, put back to it;
// misfire_skipped: a recurring message's firing that missed its time, not published
// under x-delay-misfire: skip; schedule_ended: a recurring message's last firing, its
// schedule having no next occurrence within BRIDGE_MAX_DELAY) and
// delaybridge_delivery_lateness_seconds (broker confirmation time minus due time, both on
// the Redis clock; for a message held past its due time by its ordering key's predecessor,
// minus its release time), delaybridge_held_by_order_seconds (that release time minus the
// due time, when positive), delaybridge_delivery_lateness_max_seconds (the largest of them since
// start: a quantile read from the histogram never exceeds it), delaybridge_inflight_messages (claimed, not yet settled) and
// delaybridge_owned_shards (the shards this replica claims), and
// delaybridge_dead_letters_out_total{broker, reason} (the dead letters egress published, by
// reason: publish_failed, expired, or the target's rejection, forbidden or too_large: the
// fleet view's dead letters by reason, docs/design.md "Fleet-wide view").
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	buckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600} // lateness and held
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delaybridge_messages_out_total",
			Help: "Messages sent to targets, by target broker and result (published, retried, dead_lettered, expired, dead_letter_failed, put_back, paused, rate_limited, misfire_skipped, schedule_ended).",
		}, []string{"broker", "result"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delaybridge_dead_letters_out_total",
			Help: "Dead letters published by egress, by the message's broker and reason (publish_failed, expired, forbidden, too_large).",
		}, []string{"broker", "reason"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "delaybridge_delivery_lateness_seconds",
			Help:    "Time from a message's due time (or, when its ordering key held it past that, its release) to its target's publish confirmation.",
			Buckets: buckets,
		}),
		held: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "delaybridge_held_by_order_seconds",
			Help:    "Time a published message waited past its due time for the message parked before it with the same ordering key to leave the store (not counted in delaybridge_delivery_lateness_seconds).",
			Buckets: buckets,
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "delaybridge_inflight_messages",
			Help: "Messages this replica claimed and has not yet settled (being published, acked, retried or dead-lettered).",
		}),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "delaybridge_target_paused",
			Help: "1 for each target glob paused (POST /v1/targets/pause), as this replica read the fleet's pause set last.",
		}, []string{"target"}),
		owns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "delaybridge_owned_shards",
			Help: "Shards this replica claims (shard ownership over the fleet's live members; 0: ingress only).",
		}),
	}
	maxLate := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "delaybridge_delivery_lateness_max_seconds",
		Help: "The largest delivery lateness observed since this replica started.",
	}, func() float64 { return float64(m.latest.Load()) / 1000 })
	for _, c := range []prometheus.Collector{m.messages, m.dead, m.lateness, m.held, maxLate, m.inflight, m.owns, m.paused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register egress metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) out(broker, result string) {
	m.count(broker, result, 1)
}

// count adds n to delaybridge_messages_out_total{broker, result}.
func (m *Metrics) count(broker, result string, n int) {
	if m != nil {
		m.messages.WithLabelValues(broker, result).Add(float64(n))
	}
}

// deadLettered counts a dead letter egress published, in
// delaybridge_messages_out_total{broker, result} (result expired for reason expired, else
// dead_lettered) and delaybridge_dead_letters_out_total{broker, reason}.
func (m *Metrics) deadLettered(broker, reason string) {
	if m == nil {
		return
	}
	result := "dead_lettered"
	if reason == contract.ReasonExpired {
		result = "expired"
	}
	m.messages.WithLabelValues(broker, result).Inc()
	m.dead.WithLabelValues(broker, reason).Inc()
}

// observeLateness observes the lateness of one published message confirmed at
// confirmedAt (unix ms, Redis clock), as its own schedule has it (lateness), and the time
// its ordering key held it past its due time apart (the published count is added per
// group: count).
func (m *Metrics) observeLateness(c delaystore.Claimed, confirmedAt int64) {
	if m == nil {
		return
	}
	ms := max(lateness(c, confirmedAt), 0)
	m.lateness.Observe(float64(ms) / 1000)
	m.raise(ms)
	if held := c.Released - c.Due; c.Released > 0 && held > 0 {
		m.held.Observe(float64(held) / 1000)
	}
}

// lateness is how late c was confirmed at confirmedAt (unix ms) by its own schedule: from
// its due time or, when its ordering key held it past that, from its release.
func lateness(c delaystore.Claimed, confirmedAt int64) int64 {
	return confirmedAt - max(c.Due, c.Released)
}

// raise makes ms the largest lateness observed when it is larger.
func (m *Metrics) raise(ms int64) {
	for old := m.latest.Load(); ms > old; old = m.latest.Load() {
		if m.latest.CompareAndSwap(old, ms) {
			return
		}
	}
}

// claimed adds n messages to the in-flight gauge; settled takes them off.
func (m *Metrics) claimed(n int) {
	if m != nil {
		m.inflight.Add(float64(n))
	}
}

func (m *Metrics) settled(n int) {
	if m != nil {
		m.inflight.Sub(float64(n))
	}
}

func (m *Metrics) owned(n int) {
	if m == nil {
		return
	}
	m.owns.Set(float64(n))
}

// setPaused makes delaybridge_target_paused show the paused globs of set.
func (m *Metrics) setPaused(set []delaystore.Pause) {
	if m == nil {
		return
	}
	m.paused.Reset()
	for _, p := range set {
		if p.Resumed == 0 {
			m.paused.WithLabelValues(p.Glob).Set(1)
		}
	}
}
