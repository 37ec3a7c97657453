package api

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/httpapi"
)

// quantiles interpolates within a bucket as histogram_quantile does: 100 observations
// spread evenly over (0, 10 ms] and 100 over (10, 100 ms] put p50 at 10 ms and p99 at
// 98.2 ms.
func TestQuantiles(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "delaybridge_delivery_lateness_seconds",
		Buckets: []float64{0.01, 0.1, 1}}, []string{"broker"})
	reg.MustRegister(h)
	for i := 1; i <= 100; i++ {
		h.WithLabelValues("nats").Observe(float64(i) / 10_000)        // (0, 10 ms]
		h.WithLabelValues("kafka").Observe(0.01 + float64(i)/1_111.2) // (10, 100 ms]
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	p50, p99, n := quantiles(mfs[0], nil)
	if n != 200 || p50 == nil || p99 == nil || math.Abs(*p50-10) > 0.01 || math.Abs(*p99-98.2) > 0.01 {
		t.Fatalf("p50 %v p99 %v n %d", deref(p50), deref(p99), n)
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// TestOverviewHonest: GET /v1/overview counts every dead letter (ingress's invalid input
// from the brokers, egress's undeliverable and expired messages; not the API's 400s),
// says since when it counts, and never puts a quantile above the largest lateness
// observed: 98 deliveries 10 ms late and 2 5.8 s late read p99 5,800 ms, where the (5 s,
// 10 s] bucket's interpolation alone says 7,550 ms.
func TestOverviewHonest(t *testing.T) {
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "delaybridge_messages_in_total"}, []string{"broker", "result", "reason"})
	out := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "delaybridge_messages_out_total"}, []string{"broker", "result"})
	late := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "delaybridge_delivery_lateness_seconds",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}})
	maxLate := prometheus.NewGauge(prometheus.GaugeOpts{Name: "delaybridge_delivery_lateness_max_seconds"})
	reg.MustRegister(in, out, late, maxLate)
	in.WithLabelValues("nats", "parked", "").Add(10)
	in.WithLabelValues("nats", "invalid", "invalid_delay").Add(2)
	in.WithLabelValues("kafka", "invalid", "missing_target").Add(1)
	in.WithLabelValues("http", "invalid", "invalid_request").Add(3)
	out.WithLabelValues("nats", "published").Add(100)
	out.WithLabelValues("nats", "dead_lettered").Add(1)
	out.WithLabelValues("nats", "expired").Add(4)
	for range 98 {
		late.Observe(0.010)
	}
	late.Observe(5.8)
	late.Observe(5.8)
	maxLate.Set(5.8)
	started := time.UnixMilli(1_800_000_000_000)
	srv := serveAPI(t, New(Config{Gatherer: reg, Started: started}, nil, nil, nil))
	resp, err := srv.Client.Get(srv.URL + "/v1/overview")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ov httpapi.OverviewResponse
	if err := json.NewDecoder(resp.Body).Decode(&ov); err != nil {
		t.Fatal(err)
	}
	if ov.DeadLettered != 8 || ov.Since != started.UnixMilli() || ov.Delivered != 100 {
		t.Fatalf("dead_lettered %v (want 8), since %d (want %d), delivered %d", ov.DeadLettered, ov.Since, started.UnixMilli(), ov.Delivered)
	}
	if ov.LatenessP99 == nil || ov.LatenessMax == nil || *ov.LatenessP99 != 5800 || *ov.LatenessMax != 5800 {
		t.Fatalf("p99 %v ms, max %v ms; want 5800 and 5800", deref(ov.LatenessP99), deref(ov.LatenessMax))
	}
}
