package api

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
	p50, p99, n := quantiles(mfs[0])
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
