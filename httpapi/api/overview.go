package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/internal/fleetstats"
)

// Forecaster is what GET /v1/forecast needs of the delay store (delaystore.Store).
type Forecaster interface {
	Forecast(ctx context.Context, from, step int64, n int) (overdue int64, counts []int64, err error)
}

// forecastMax bounds the buckets of one forecast (16 shards x 401 ZCOUNTs a request).
const forecastMax = 400

// forecastReach is how far a forecast may always reach, whatever BRIDGE_MAX_DELAY: the
// console's day chart (24 buckets of 1h).
const forecastReach = 24 * time.Hour

// forecast serves GET /v1/forecast?step=<ms>&buckets=<n>: parked messages by scheduled
// time, overdue and then n buckets from now (the console's due chart). The end, now +
// step x n, is bounded as every time the API computes (contract.Horizon): overflowing, or
// beyond BRIDGE_MAX_DELAY (but at least forecastReach) from now, is a 400.
func (a *api) forecast(w http.ResponseWriter, r *http.Request) {
	f, ok := a.store.(Forecaster)
	if !ok {
		writeError(w, http.StatusNotImplemented, "this store cannot forecast")
		return
	}
	q := r.URL.Query()
	step, err1 := strconv.ParseInt(q.Get("step"), 10, 64)
	n, err2 := strconv.Atoi(q.Get("buckets"))
	if len(q) != 2 || err1 != nil || err2 != nil || step < 1000 || n < 1 || n > forecastMax {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: want step=<ms, at least 1000>&buckets=<1 to %d>, nothing else",
			contract.ReasonInvalidRequest, forecastMax))
		return
	}
	from := a.cfg.Now().UnixMilli()
	bound := contract.Horizon{Now: from, MaxDelay: max(a.cfg.Rules.MaxDelay, forecastReach)}
	if _, err := bound.Span(step, n); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: %d buckets of %d ms: %v", contract.ReasonInvalidRequest, n, step, err))
		return
	}
	overdue, counts, err := f.Forecast(r.Context(), from, step, n)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, httpapi.ForecastResponse{From: from, Step: step, Overdue: overdue, Counts: counts})
}

// overview serves GET /v1/overview[?scope=replica|fleet]: this replica's view (the
// default, replicaOverview) or the fleet's (fleetOverview). Any other query is a 400.
func (a *api) overview(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if scope := q["scope"]; len(q) > 0 && (len(q) != 1 || len(scope) != 1 || scope[0] != "replica" && scope[0] != "fleet") {
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": want nothing, scope=replica or scope=fleet")
		return
	}
	if q.Get("scope") == "fleet" {
		a.fleetOverview(w, r)
		return
	}
	a.replicaOverview(w)
}

// redisState is the Redis monitor's state as the overview shows it ("ok" when unknown).
func (a *api) redisState() string {
	if a.cfg.RedisErr != nil {
		if err := a.cfg.RedisErr(); err != nil {
			return "unreachable: " + err.Error()
		}
	}
	return "ok"
}

// replicaOverview answers GET /v1/overview: this replica's own counters and lateness from
// its metrics registry, and the Redis monitor's state. It makes no Redis call.
func (a *api) replicaOverview(w http.ResponseWriter) {
	out := httpapi.OverviewResponse{Scope: "replica", In: map[string]float64{}, Out: map[string]float64{}, Redis: a.redisState(),
		Since: a.cfg.Started.UnixMilli()}
	if a.cfg.Gatherer == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	mfs, err := a.cfg.Gatherer.Gather()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "metrics: "+err.Error())
		return
	}
	var lateness *dto.MetricFamily
	for _, mf := range mfs {
		switch mf.GetName() {
		case "delaybridge_messages_in_total":
			sumBy(mf, "result", out.In)
			out.DeadLettered += deadLetteredIn(mf)
		case "delaybridge_messages_out_total":
			sumBy(mf, "result", out.Out)
		case "delaybridge_delivery_lateness_seconds":
			lateness = mf
		case "delaybridge_delivery_lateness_max_seconds":
			ms := gauge(mf) * 1000
			out.LatenessMax = &ms
		case "delaybridge_redis_oom":
			if len(mf.GetMetric()) > 0 && mf.GetMetric()[0].GetGauge().GetValue() == 1 && out.Redis == "ok" {
				out.Redis = "full (maxmemory reached): new messages wait in their sources; delivery goes on"
			}
		}
	}
	out.DeadLettered += out.Out["dead_lettered"] + out.Out["expired"]
	if lateness != nil {
		out.LatenessP50, out.LatenessP99, out.Delivered = quantiles(lateness, out.LatenessMax)
	}
	if out.Delivered == 0 {
		out.LatenessMax = nil
	}
	writeJSON(w, http.StatusOK, out)
}

// deadLetteredIn is what ingress dead-lettered, of delaybridge_messages_in_total: the
// invalid messages from the brokers (the message API's invalid requests were answered
// with a 400, not dead-lettered).
func deadLetteredIn(mf *dto.MetricFamily) float64 {
	n := 0.0
	for _, m := range mf.GetMetric() {
		var broker, result string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "broker":
				broker = l.GetValue()
			case "result":
				result = l.GetValue()
			}
		}
		if result == "invalid" && broker != "http" {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// gauge is the value of mf's first series (0 without one).
func gauge(mf *dto.MetricFamily) float64 {
	if ms := mf.GetMetric(); len(ms) > 0 {
		return ms[0].GetGauge().GetValue()
	}
	return 0
}

// sumBy adds each counter of mf into into[its label name's value].
func sumBy(mf *dto.MetricFamily, name string, into map[string]float64) {
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				into[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
}

// quantiles reads p50 and p99 (ms) and the count from a histogram, summed over its
// series (fleetstats.Quantile: never above maxMs, the largest observation, when known).
func quantiles(mf *dto.MetricFamily, maxMs *float64) (p50, p99 *float64, count uint64) {
	bounds := map[float64]uint64{}
	for _, m := range mf.GetMetric() {
		h := m.GetHistogram()
		count += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			bounds[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	if count == 0 {
		return nil, nil, 0
	}
	bounds[math.Inf(1)] = count
	return fleetstats.Quantile(bounds, count, 0.5, maxMs), fleetstats.Quantile(bounds, count, 0.99, maxMs), count
}
