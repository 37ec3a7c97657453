package monitor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
)

// storeScrapeTimeout bounds the Redis reads of one scrape, well below a scraper's timeout.
const storeScrapeTimeout = 500 * time.Millisecond

// dueHorizons are the windows of delaybridge_due_messages, with their label values.
var dueHorizons = []struct {
	label string
	d     time.Duration
}{{"1m", time.Minute}, {"1h", time.Hour}, {"24h", 24 * time.Hour}}

// storeScrapeShards is the most shards one scrape reads from Redis.
const storeScrapeShards = 16

// StoreCollector exports the delay store's gauges of the shards this replica owns (owned),
// read from Redis at scrape time (delaystore.Observe: TIME, then ZCARD, ZRANGE 0 0 and
// ZCOUNTs per shard in one pipeline). A scrape reads at most storeScrapeShards of them, the
// least recently read first, and reports the others from their last reading (an owned shard
// never read yet is left out until it is), so its Redis cost does not grow with the shard
// count. A read that fails or takes longer than storeScrapeTimeout never fails the scrape:
// the store gauges are left out and delaybridge_store_scrape_error is 1.
type StoreCollector struct {
	store *delaystore.Store
	// owned returns the shards this replica owns (egress); safe for concurrent use.
	owned func() []int
	// redisErr, when set and returning an error other than errNotPinged, tells that Redis
	// is known to be unreachable (the Redis monitor): the scrape does not try it.
	redisErr func() error
	timeout  time.Duration

	mu    sync.Mutex           // one scrape at a time: the cache below
	cache map[int]shardReading // owned shards read so far
	turn  uint64               // scrapes that read Redis

	parked, parkedAll, overdue, held, oldest, due, scrapeErr *prometheus.Desc
}

// shardReading is a shard's last reading and the scrape that made it.
type shardReading struct {
	g    delaystore.ShardGauge
	turn uint64
}

// NewStoreCollector returns the store gauges of s for the shards owned returns;
// redisErr is the Redis monitor's Err (a scrape while Redis is down reads nothing). Register
// it with a prometheus.Registerer.
func NewStoreCollector(s *delaystore.Store, owned func() []int, redisErr func() error) *StoreCollector {
	return &StoreCollector{
		store: s, owned: owned, redisErr: redisErr, timeout: storeScrapeTimeout, cache: map[int]shardReading{},
		parked: prometheus.NewDesc("delaybridge_parked_messages",
			"Messages in the delay store (pending and claimed), by shard, for the shards this replica owns (ZCARD; up to 16 shards read per scrape, the others as last read).", []string{"shard"}, nil),
		parkedAll: prometheus.NewDesc("delaybridge_parked_messages_all",
			"Messages in the delay store (pending and claimed), sum over the shards this replica owns (sum over replicas for the store).", nil, nil),
		overdue: prometheus.NewDesc("delaybridge_overdue_messages",
			"Messages past their due time and not being delivered (score at or before the Redis time), plus messages in retry past their due time (retry set), sum over the shards this replica owns.", nil, nil),
		held: prometheus.NewDesc("delaybridge_held_messages",
			"Messages held by the message parked before them with the same ordering key (not claimable until it leaves the store), sum over the shards this replica owns.", nil, nil),
		oldest: prometheus.NewDesc("delaybridge_oldest_overdue_seconds",
			"How long the shard's earliest message has been due and not delivered (Redis clock); 0 when none is overdue; shards this replica owns, as last read.",
			[]string{"shard"}, nil),
		due: prometheus.NewDesc("delaybridge_due_messages",
			"Messages that fall due within the next 1m, 1h or 24h (not counting overdue ones), sum over the shards this replica owns.",
			[]string{"within"}, nil),
		scrapeErr: prometheus.NewDesc("delaybridge_store_scrape_error",
			"1 when this scrape could not read the delay store (Redis unreachable or slower than 500ms): the store gauges are missing.",
			nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StoreCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.parked, c.parkedAll, c.overdue, c.held, c.oldest, c.due, c.scrapeErr} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads at most storeScrapeShards shards,
// bounded by storeScrapeTimeout; it never blocks longer.
func (c *StoreCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	owned := slices.Clone(c.owned())
	slices.Sort(owned)
	owned = slices.Compact(owned) // a shard listed twice is one series
	err := c.refresh(owned)
	failed := 0.0
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeErr, prometheus.GaugeValue, failed)
	if err != nil {
		return
	}
	var all, overdue, held int64
	within := make([]int64, len(dueHorizons))
	for _, sh := range owned {
		r, ok := c.cache[sh]
		if !ok {
			continue // not read yet
		}
		g := r.g
		shard := strconv.Itoa(sh)
		all += g.Parked
		overdue += g.Overdue
		held += g.Held
		for j, n := range g.DueWithin {
			within[j] += n
		}
		ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(g.Parked), shard)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, g.OldestOverdue.Seconds(), shard)
	}
	ch <- prometheus.MustNewConstMetric(c.parkedAll, prometheus.GaugeValue, float64(all))
	ch <- prometheus.MustNewConstMetric(c.overdue, prometheus.GaugeValue, float64(overdue))
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(held))
	for j, h := range dueHorizons {
		ch <- prometheus.MustNewConstMetric(c.due, prometheus.GaugeValue, float64(within[j]), h.label)
	}
}

// refresh drops the cached shards no longer owned and reads up to storeScrapeShards of
// the owned ones, never read or least recently read first (ties: the lower shard).
// Called with c.mu held.
func (c *StoreCollector) refresh(owned []int) error {
	keep := make(map[int]bool, len(owned))
	for _, sh := range owned {
		keep[sh] = true
	}
	for sh := range c.cache {
		if !keep[sh] {
			delete(c.cache, sh)
		}
	}
	pick := slices.Clone(owned)
	slices.SortFunc(pick, func(a, b int) int {
		ra, oka := c.cache[a]
		rb, okb := c.cache[b]
		switch {
		case oka != okb && !oka:
			return -1
		case oka != okb:
			return 1
		case ra.turn != rb.turn:
			return cmp.Compare(ra.turn, rb.turn)
		}
		return cmp.Compare(a, b)
	})
	if len(pick) > storeScrapeShards {
		pick = pick[:storeScrapeShards]
	}
	obs, err := c.observe(pick)
	if err != nil {
		return err
	}
	c.turn++
	for _, g := range obs.Shards {
		c.cache[g.Shard] = shardReading{g: g, turn: c.turn}
	}
	return nil
}

// observe reads the gauges of shards within c.timeout. The read runs in its own goroutine,
// so the scrape returns at the timeout even when the client does not honour context
// deadlines (the goroutine ends with the client's own read timeout). No shard: no read.
func (c *StoreCollector) observe(shards []int) (delaystore.Observation, error) {
	if c.redisErr != nil {
		// Before the monitor's first PING (errNotPinged) the read is tried, bounded.
		if err := c.redisErr(); err != nil && !errors.Is(err, errNotPinged) {
			return delaystore.Observation{}, err
		}
	}
	if len(shards) == 0 {
		return delaystore.Observation{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	type result struct {
		obs delaystore.Observation
		err error
	}
	done := make(chan result, 1)
	horizons := make([]time.Duration, len(dueHorizons))
	for i, h := range dueHorizons {
		horizons[i] = h.d
	}
	go func() {
		obs, err := c.store.Observe(ctx, shards, horizons)
		done <- result{obs, err}
	}()
	select {
	case r := <-done:
		return r.obs, r.err
	case <-ctx.Done():
		return delaystore.Observation{}, fmt.Errorf("store gauges: %w", ctx.Err())
	}
}

// RegisterScriptTimer registers delaybridge_redis_duration_seconds{script} and hooks it
// into rdb: the round trip of every call of the store's Lua scripts (a pipelined call over
// several shards counts once). Call it before the store's first call.
func RegisterScriptTimer(reg prometheus.Registerer, rdb redis.UniversalClient, store *delaystore.Store) error {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "delaybridge_redis_duration_seconds",
		Help:    "Round trip of the delay store's Redis scripts (park, claim, ack, retry, cancel, member; exchange: egress's pipeline of acks, retries and claims), pipelined calls counted once.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"script"})
	if err := reg.Register(h); err != nil {
		return fmt.Errorf("register delaybridge_redis_duration_seconds: %w", err)
	}
	for _, s := range []string{"park", "claim", "ack", "retry", "cancel", "member", "exchange"} {
		h.WithLabelValues(s) // present from the start, at 0
	}
	rdb.AddHook(store.ScriptTimer(func(script string, d time.Duration) { h.WithLabelValues(script).Observe(d.Seconds()) }))
	return nil
}

// RegisterWaitShortfalls registers delaybridge_redis_wait_shortfall_total: the WAITs that
// confirmed fewer replicas than BRIDGE_REDIS_MIN_REPLICAS (each failed a park or cancel,
// which is then retried and its source not acked meanwhile).
func RegisterWaitShortfalls(reg prometheus.Registerer, store *delaystore.Store) error {
	c := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "delaybridge_redis_wait_shortfall_total",
		Help: "Redis WAITs that confirmed fewer replicas than BRIDGE_REDIS_MIN_REPLICAS in time; each failed a park or cancel (retried, source not acked).",
	}, func() float64 { return float64(store.WaitShortfalls()) })
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("register delaybridge_redis_wait_shortfall_total: %w", err)
	}
	return nil
}
