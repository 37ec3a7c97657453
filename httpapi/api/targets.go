package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/httpapi"
)

// targetsMaxRead bounds the entries GET /v1/targets reads for the targets' next due times
// (admin.Admin.Targets): a bound on work (about 0.3 s of Redis at most), not on
// time, so a small store always gets every answer; beyond it a next due is null, unknown.
const targetsMaxRead = 100_000

// Targeter is what GET /v1/targets needs of the operator's side of the store
// (admin.Admin): the targets, and the quotas' use.
type Targeter interface {
	Targets(ctx context.Context, recount bool, maxRead int) ([]admin.TargetCount, error)
	Quotas(ctx context.Context) ([]admin.QuotaUsage, error)
	HeldByOrder(ctx context.Context) (int64, error)
}

// targets serves GET /v1/targets: parked count, next due (with that message's window)
// and quota pattern per target, most parked first, and how many of the parked messages
// wait for their ordering key's predecessor (held_by_order, all targets); ?recount=1 counts every shard from
// its entries first. 400 for another parameter, 503 when Redis failed.
func (a *api) targets(w http.ResponseWriter, r *http.Request) {
	if a.admin == nil {
		writeError(w, http.StatusNotImplemented, "this store cannot count targets")
		return
	}
	recount := false
	for name, vals := range r.URL.Query() {
		if name != "recount" || len(vals) != 1 || (vals[0] != "1" && vals[0] != "0") {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: parameter %q: only recount=1 (or 0) is taken", contract.ReasonInvalidRequest, name))
			return
		}
		recount = vals[0] == "1"
	}
	ts, err := a.admin.Targets(r.Context(), recount, targetsMaxRead)
	if err != nil {
		a.log.Warn("targets", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	out := httpapi.TargetsResponse{Targets: make([]httpapi.TargetResponse, len(ts)), Quotas: []httpapi.QuotaResponse{}}
	us, err := a.admin.Quotas(r.Context())
	if err != nil {
		a.log.Warn("quotas", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	if out.HeldByOrder, err = a.admin.HeldByOrder(r.Context()); err != nil {
		a.log.Warn("held by order", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	for _, u := range us {
		out.Quotas = append(out.Quotas, httpapi.QuotaResponse{Pattern: u.Pattern, Limit: u.Limit, Parked: u.Parked, Rejected: u.Rejected})
	}
	for i, t := range ts {
		out.Targets[i] = httpapi.TargetResponse{Target: t.Target, Parked: t.Parked, Window: t.Window.Milliseconds(), Quota: t.Quota}
		if t.NextDue != 0 {
			due := t.NextDue
			out.Targets[i].NextDue = &due
		}
	}
	if out.Paused, err = a.pausedTargets(r.Context(), out.Targets); err != nil {
		a.log.Warn("paused targets", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	if recount {
		a.log.Info("targets recounted", "targets", len(ts))
	}
	writeJSON(w, http.StatusOK, out)
}
