package fleetstats

import (
	"context"
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// replica is one replica's metrics, registered under the bridge's names (the real
// registrations are unexported helpers of egress and intake).
type replica struct {
	reg  *prometheus.Registry
	in   *prometheus.CounterVec
	out  *prometheus.CounterVec
	dead *prometheus.CounterVec
	late prometheus.Histogram
}

func newReplica(t *testing.T) *replica {
	r := &replica{reg: prometheus.NewRegistry(),
		in:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricIn}, []string{"broker", "result", "reason"}),
		out:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricOut}, []string{"broker", "result"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricDeadOut}, []string{"broker", "reason"}),
		late: prometheus.NewHistogram(prometheus.HistogramOpts{Name: metricLateness, Buckets: []float64{.01, .1, 1}}),
	}
	r.reg.MustRegister(r.in, r.out, r.dead, r.late, prometheus.NewGauge(prometheus.GaugeOpts{Name: "unrelated"}))
	return r
}

// Snapshot reads the counters as bucket fields: in and out by result over brokers, dead
// letters by reason (the brokers' invalid messages, not the API's 400s, and egress's),
// lateness by bucket, not cumulative (the +Inf bucket too).
func TestSnapshot(t *testing.T) {
	r := newReplica(t)
	r.in.WithLabelValues("nats", "parked", "").Add(10)
	r.in.WithLabelValues("kafka", "parked", "").Add(5)
	r.in.WithLabelValues("nats", "invalid", "invalid_delay").Add(2)
	r.in.WithLabelValues("http", "invalid", "invalid_delay").Add(3)
	r.out.WithLabelValues("nats", "published").Add(7)
	r.out.WithLabelValues("nats", "expired").Add(1)
	r.dead.WithLabelValues("nats", "expired").Add(1)
	r.dead.WithLabelValues("kafka", "too_large").Add(4)
	r.in.WithLabelValues("nats", "nacked", "") // at 0: no field
	for _, s := range []float64{.005, .05, .05, 5} {
		r.late.Observe(s)
	}
	got, err := Snapshot(r.reg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"in:parked": 15, "in:invalid": 5, "dead:invalid_delay": 2, "out:published": 7, "out:expired": 1,
		"dead:expired": 1, "dead:too_large": 4, "late:0.01": 1, "late:0.1": 2, "late:+Inf": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("snapshot %v\nwant     %v", got, want)
	}
	c := Decode(got)
	if c.Delivered() != 4 || c.In["parked"] != 15 || c.Dead["too_large"] != 4 || c.Late[math.Inf(1)] != 1 {
		t.Fatalf("decoded %+v", c)
	}
}

// Quantiles from summed buckets: replica A's 100 deliveries spread over (0, 10 ms] and
// B's 100 over (10, 100 ms] put the fleet's p50 at 10 ms and p99 at 98.2 ms (no replica's
// own quantiles say that); no delivery, no quantile.
func TestCountsQuantiles(t *testing.T) {
	a := Decode(map[string]int64{"late:0.01": 100})
	b := Decode(map[string]int64{"late:0.1": 100, "junk": 3, "late:NaN": 1, "late:x": 1})
	fleet := Sum([]Counts{a, b})
	p50, p99 := fleet.Quantiles()
	if p50 == nil || p99 == nil || math.Abs(*p50-10) > 0.01 || math.Abs(*p99-98.2) > 0.01 || fleet.Delivered() != 200 {
		t.Fatalf("p50 %v p99 %v delivered %d", p50, p99, fleet.Delivered())
	}
	if p50, p99 := Sum(nil).Quantiles(); p50 != nil || p99 != nil {
		t.Fatal("quantiles without a delivery")
	}
}

// scriptCalls is how many EVALSHA and EVAL the Redis server ran so far.
func scriptCalls(t *testing.T, rdb *redis.Client) int64 {
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := int64(0)
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
		if rest, ok := strings.CutPrefix(line, "cmdstat_eval:calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
	}
	return n
}

// Two replicas' publishers add what they counted since their last flush, each in one
// script call; a flush with nothing new sends nothing to Redis; the buckets hold the sum
// of both replicas; a flush that failed keeps its counts for the next one.
func TestPublisherAddsDeltas(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 4, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour).Truncate(time.Hour).Add(10 * time.Minute)
	now := func() time.Time { return at }
	a, b := newReplica(t), newReplica(t)
	adm := admin.New(st)
	pa := New(Config{Now: now}, a.reg, adm, nil)
	pb := New(Config{Now: now}, b.reg, adm, nil)
	ctx := t.Context()
	flush := func(p *Publisher) {
		t.Helper()
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	before := scriptCalls(t, rdb)
	flush(pa) // nothing counted yet
	a.out.WithLabelValues("nats", "published").Add(3)
	a.late.Observe(0.005)
	flush(pa)
	flush(pa) // nothing new
	flush(pa)
	if n := scriptCalls(t, rdb) - before; n != 1 {
		t.Fatalf("%d script calls for one flush with counts and three without, want 1", n)
	}
	a.out.WithLabelValues("nats", "published").Add(2)
	b.out.WithLabelValues("kafka", "published").Add(10)
	b.in.WithLabelValues("kafka", "parked", "").Add(4)
	flush(pa)
	flush(pb)
	// A flush that cannot reach Redis keeps its counts.
	b.in.WithLabelValues("kafka", "parked", "").Add(1)
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if err := pb.Flush(dead); err == nil {
		t.Fatal("flush with a done context: no error")
	}
	flush(pb)

	want := map[string]int64{"out:published": 15, "in:parked": 5, "late:0.01": 1}
	for _, step := range []time.Duration{time.Minute, time.Hour} {
		got, err := adm.ReadStats(ctx, step, at, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got[0], want) {
			t.Errorf("%s bucket %v, want %v", step, got[0], want)
		}
	}
}

// Quota refusals are counted by where they came from: a broker's (dead-lettered
// quota_exceeded, also a dead letter) and the API's 429s (not one); two replicas' sum.
func TestSnapshotQuota(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	a.in.WithLabelValues("nats", "invalid", "quota_exceeded").Add(4)
	a.in.WithLabelValues("http", "invalid", "quota_exceeded").Add(11)
	b.in.WithLabelValues("kafka", "invalid", "quota_exceeded").Add(2)
	b.in.WithLabelValues("http", "invalid", "quota_exceeded").Add(1)
	var cs []Counts
	for _, r := range []*replica{a, b} {
		got, err := Snapshot(r.reg)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, Decode(got))
	}
	sum := Sum(cs)
	if want := map[string]int64{"nats": 4, "kafka": 2, "http": 12}; !maps.Equal(sum.Quota, want) {
		t.Fatalf("fleet's quota refusals %v, want %v", sum.Quota, want)
	}
	if sum.Dead["quota_exceeded"] != 6 {
		t.Fatalf("dead-lettered quota_exceeded: %d, want the brokers' 6", sum.Dead["quota_exceeded"])
	}
}
