package api

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/ingress"
	"github.com/delaybridge/delaybridge/ingress/intake"
)

// TestPostCountsLookalikes: a headers object with x-dealy is parked due now (the header
// means nothing to the bridge), and the API warns and counts it as ingress does.
func TestPostCountsLookalikes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := ingress.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	h := New(Config{
		Rules: intake.Rules{MaxDelay: 24 * time.Hour, MaxPayload: 64, Targets: intake.TargetPolicy{
			Brokers: map[string]bool{"nats": true}, Allow: []string{"*"}}},
		DefaultBroker: "nats", Metrics: m,
		Lookalikes: intake.NewLookalikes(slog.New(slog.NewTextHandler(&logs, nil)), m, nil),
	}, storetest.New(t, time.Second), nil, nil)
	srv := serveAPI(t, h)
	c := &client.Client{Base: srv.URL, HTTP: srv.Client}
	before := time.Now()
	res, err := c.Send(context.Background(), httpapi.PostRequest{Target: "a.b", Headers: map[string]string{"x-dealy": "30s", "tenant": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if due := time.UnixMilli(res.Due); due.After(before.Add(5 * time.Second)) {
		t.Fatalf("due %s after sending: x-dealy was taken for x-delay", due.Sub(before))
	}
	if n := lookalikes(t, reg, "x-delay"); n != 1 {
		t.Fatalf(`delaybridge_lookalike_headers_total{header="x-delay"} = %v, want 1`, n)
	}
	if !strings.Contains(logs.String(), "header=x-dealy resembles=x-delay source=http") {
		t.Fatalf("no warning:\n%s", logs.String())
	}
}

// lookalikes is delaybridge_lookalike_headers_total{header} in reg.
func lookalikes(t *testing.T, reg prometheus.Gatherer, header string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "delaybridge_lookalike_headers_total" && m.GetLabel()[0].GetValue() == header {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no delaybridge_lookalike_headers_total{header=%q}", header)
	return 0
}
