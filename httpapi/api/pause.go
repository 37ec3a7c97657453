package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/internal/glob"
)

// Pauser is what POST /v1/targets/pause and /v1/targets/resume need of the operator's side
// of the store (admin.Admin; docs/design.md, "Paused targets"). Safe for concurrent use;
// every method blocks until Redis answered.
type Pauser interface {
	Pause(ctx context.Context, pattern string) (delaystore.PauseChange, error)
	Resume(ctx context.Context, pattern string) (admin.ResumeResult, error)
	Pauses(ctx context.Context) ([]delaystore.Pause, error)
}

// pauser is the Admin's Pauser, nil when it has none.
func (a *api) pauser() Pauser {
	p, _ := a.admin.(Pauser)
	return p
}

// pauseRequest reads and checks the body of a pause or resume: 400 for a body or glob
// that is not one (malformed, over 256 bytes or 16 "*"), 413 over the body limit.
func pauseRequest(w http.ResponseWriter, r *http.Request) (string, bool) {
	var req httpapi.PauseRequest
	if err := decodeBody(r.Body, &req); err != nil {
		writeBodyError(w, err)
		return "", false
	}
	if req.Target == "" {
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+`: target: a glob is required ("*" pauses every target)`)
		return "", false
	}
	if _, err := glob.CompileSelector(req.Target); err != nil {
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": target: "+err.Error())
		return "", false
	}
	return req.Target, true
}

// pauseTarget serves POST /v1/targets/pause {"target": "<glob>"}: audited (op "pause"),
// 200 with the glob's state (changed false when it already was paused), 409
// too_many_paused, 503 when Redis or the audit log failed.
func (a *api) pauseTarget(w http.ResponseWriter, r *http.Request) {
	p, pattern, rec, ok := a.beginPause(w, r, "pause")
	if !ok {
		return
	}
	c, err := p.Pause(r.Context(), pattern)
	var changed int64
	if c.Changed {
		changed = 1
	}
	if err := rec.End(r.Context(), 1, changed, err); err != nil {
		a.log.Warn("audit: end of a pause", "op_id", rec.OpID(), "err", err)
	}
	switch {
	case errors.Is(err, delaystore.ErrTooManyPaused):
		writeError(w, http.StatusConflict, contract.ReasonTooManyPaused+": "+err.Error()+"; resume one first")
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	a.log.Info("target paused", "target", pattern, "changed", c.Changed, "op_id", rec.OpID())
	writeJSON(w, http.StatusOK, httpapi.PauseResponse{Target: pattern, Paused: true, Changed: c.Changed, Since: c.Paused, OpID: rec.OpID()})
}

// resumeTarget serves POST /v1/targets/resume {"target": "<glob>"}: audited (op "resume",
// its counts the messages given their due time back), 200 when the pass is through, 503
// when Redis or the audit log failed (the glob may be resumed already: repeat the call to
// finish the pass).
func (a *api) resumeTarget(w http.ResponseWriter, r *http.Request) {
	p, pattern, rec, ok := a.beginPause(w, r, "resume")
	if !ok {
		return
	}
	stop := rec.Hold(r.Context())
	res, err := p.Resume(r.Context(), pattern)
	stop()
	if err := rec.End(r.Context(), int64(res.Moved), int64(res.Moved), err); err != nil {
		a.log.Warn("audit: end of a resume", "op_id", rec.OpID(), "err", err)
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error()+"; repeat the resume to finish it")
		return
	}
	a.log.Info("target resumed", "target", pattern, "changed", res.Changed, "moved", res.Moved, "op_id", rec.OpID())
	writeJSON(w, http.StatusOK, httpapi.PauseResponse{Target: pattern, Changed: res.Changed, Since: res.Paused, Moved: res.Moved, OpID: rec.OpID()})
}

// beginPause is the start of a pause or resume (op): the store's Pauser (501 without
// one), the request's glob (pauseRequest's answers), the audit entry begun (503 when the
// audit log failed); ok false when it answered.
func (a *api) beginPause(w http.ResponseWriter, r *http.Request, op string) (p Pauser, pattern string, rec *AuditRecord, ok bool) {
	if p = a.pauser(); p == nil {
		writeError(w, http.StatusNotImplemented, "this store cannot pause targets")
		return nil, "", nil, false
	}
	if pattern, ok = pauseRequest(w, r); !ok {
		return nil, "", nil, false
	}
	rec, err := a.beginPauseAudit(r, op, pattern)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable (audit log): "+err.Error())
		return nil, "", nil, false
	}
	return p, pattern, rec, true
}

// beginPauseAudit begins the audit entry of a pause or resume of pattern.
func (a *api) beginPauseAudit(r *http.Request, op, pattern string) (*AuditRecord, error) {
	sel, _ := json.Marshal(map[string]string{"target": pattern}) // a string map always encodes
	e := auditEntry(r, op)
	e.Selector = sel
	return a.beginAudit(r, e)
}

// pausedTargets marks the targets a paused glob matches and returns the paused globs
// (GET /v1/targets); nil, nil without a Pauser.
func (a *api) pausedTargets(ctx context.Context, ts []httpapi.TargetResponse) ([]httpapi.PausedResponse, error) {
	out := []httpapi.PausedResponse{}
	p := a.pauser()
	if p == nil {
		return out, nil
	}
	set, err := p.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	var globs []*glob.Pattern
	for _, ps := range set {
		if ps.Resumed != 0 {
			continue
		}
		out = append(out, httpapi.PausedResponse{Target: ps.Glob, Since: ps.Paused})
		if g, err := glob.Compile(ps.Glob); err == nil {
			globs = append(globs, g)
		}
	}
	for i := range ts {
		ts[i].Paused = glob.FirstMatch(globs, ts[i].Target) >= 0
	}
	return out, nil
}
