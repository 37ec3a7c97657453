package ingress

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// counterValue is the value of the counter name{labels} in reg (label name, value pairs;
// the series' other labels empty), 0 when the series does not exist yet. The counters
// live in ingress/intake, so ingress's tests read them as a scrape would.
func counterValue(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() != want[l.GetName()] {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
