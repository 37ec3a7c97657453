package bridge

import (
	"github.com/prometheus/client_golang/prometheus"
)

// teeRegisterer registers every collector with both registries: ingress's and egress's
// metrics go into the bridge's registry (/metrics, GET /v1/overview) and into the small one
// the fleet-stats publisher gathers every few seconds (internal/fleetstats). Gathering the
// bridge's registry instead would run every collector, the store gauges' Redis reads too:
// tens of Redis commands per second on an idle replica.
type teeRegisterer [2]prometheus.Registerer

// Register registers c with both; when the second refuses it, c is taken out of the first.
func (t teeRegisterer) Register(c prometheus.Collector) error {
	if err := t[0].Register(c); err != nil {
		return err
	}
	if err := t[1].Register(c); err != nil {
		t[0].Unregister(c)
		return err
	}
	return nil
}

// MustRegister registers cs with both and panics on an error (as prometheus.Registry does).
func (t teeRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c from both; true when both had it.
func (t teeRegisterer) Unregister(c prometheus.Collector) bool {
	a, b := t[0].Unregister(c), t[1].Unregister(c)
	return a && b
}

var _ prometheus.Registerer = teeRegisterer{}
