package api

import (
	"context"
	"net/http"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/internal/fleetstats"
)

// FleetReader is what GET /v1/overview?scope=fleet needs of the operator's side of the
// store (admin.Admin): the fleet's buckets and its live members.
type FleetReader interface {
	ReadStats(ctx context.Context, step time.Duration, from time.Time, n int) ([]map[string]int64, error)
	LiveMembers(ctx context.Context, now time.Time) (int64, error)
}

// The fleet overview's windows: 60 minute buckets, 168 hour buckets, the current one last.
const (
	fleetMinutes = 60
	fleetHours   = 7 * 24
)

// fleetOverview answers GET /v1/overview?scope=fleet (httpapi.FleetOverviewResponse): the
// fleet's buckets of the last hour and the last 7 days, summed, and the live replicas.
// Three Redis round trips (two pipelines of HGETALL and a ZCOUNT), whatever the traffic
// and the fleet's size; 503 when Redis does not answer.
func (a *api) fleetOverview(w http.ResponseWriter, r *http.Request) {
	if a.admin == nil {
		writeError(w, http.StatusNotImplemented, "this store keeps no fleet counts")
		return
	}
	now := a.cfg.Now()
	out := httpapi.FleetOverviewResponse{Scope: "fleet", Now: now.UnixMilli(), Redis: a.redisState()}
	var err error
	if out.LastHour, err = fleetWindow(r.Context(), a.admin, time.Minute, now, fleetMinutes); err == nil {
		out.Last7d, err = fleetWindow(r.Context(), a.admin, time.Hour, now, fleetHours)
	}
	if err == nil {
		out.Replicas, err = a.admin.LiveMembers(r.Context(), now)
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// fleetWindow reads the n buckets of step up to the one holding now and sums them.
func fleetWindow(ctx context.Context, f FleetReader, step time.Duration, now time.Time, n int) (httpapi.FleetWindow, error) {
	from := now.Truncate(step).Add(-time.Duration(n-1) * step)
	buckets, err := f.ReadStats(ctx, step, from, n)
	if err != nil {
		return httpapi.FleetWindow{}, err
	}
	win := httpapi.FleetWindow{Step: step.Milliseconds(), From: from.UnixMilli(), Series: make([]httpapi.FleetCounts, len(buckets))}
	counts := make([]fleetstats.Counts, len(buckets))
	for i, b := range buckets {
		counts[i] = fleetstats.Decode(b)
		win.Series[i] = fleetCounts(from.Add(time.Duration(i)*step), counts[i])
	}
	win.Total = fleetCounts(from, fleetstats.Sum(counts))
	return win, nil
}

// fleetCounts is c on the wire, at being its start.
func fleetCounts(at time.Time, c fleetstats.Counts) httpapi.FleetCounts {
	p50, p99 := c.Quantiles()
	return httpapi.FleetCounts{At: at.UnixMilli(), In: c.In, Out: c.Out, DeadLettered: c.Dead,
		Delivered: c.Delivered(), LatenessP50: p50, LatenessP99: p99, QuotaRejected: c.Quota}
}
