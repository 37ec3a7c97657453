// Package ops serves the operations listener (BRIDGE_HTTP_ADDR): /healthz, /readyz (the
// bridge's checks, debounced), /metrics and, when enabled, /debug/pprof/.
package ops

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness dependency: Probe returns nil when the dependency is reachable.
// Note, if set, returns a state worth naming that does not fail readiness (for example
// "full": Redis refuses new messages for memory); "" when there is none. It must not block.
type Check struct {
	Name  string
	Probe func(ctx context.Context) error
	Note  func() string
}

// NewOps returns the operations handler: GET /healthz (the process is alive: always 200),
// GET /readyz (200 when every check passes, else 503 naming each failing part; a check
// that has passed once fails only after failing on consecutive probes for a few seconds,
// see readyWindow; either way the body then lists each check's Note), and GET /metrics (Prometheus exposition of g).
func New(checks []Check, g prometheus.Gatherer) http.Handler {
	return newHandler(checks, g, false)
}

// NewOpsWithPprof is NewOps plus Go's profiles under /debug/pprof/ (net/http/pprof).
func NewWithPprof(checks []Check, g prometheus.Gatherer) http.Handler {
	return newHandler(checks, g, true)
}

func newHandler(checks []Check, g prometheus.Gatherer, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	if withPprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	steady := make([]*steadyCheck, len(checks))
	for i, c := range checks {
		steady[i] = newSteadyCheck(c, readyFailures, readyWindow, time.Now)
	}
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		var failed, pending []string
		for _, c := range steady {
			err, tolerated := c.probe(ctx)
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", c.check.Name, err))
			}
			if tolerated != nil {
				pending = append(pending, fmt.Sprintf("%s: %v", c.check.Name, tolerated))
			}
			if c.check.Note != nil {
				if n := c.check.Note(); n != "" {
					pending = append(pending, fmt.Sprintf("%s: %s", c.check.Name, n))
				}
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready")
			fmt.Fprintln(w, strings.Join(append(failed, pending...), "\n"))
			return
		}
		fmt.Fprintln(w, "ready")
		if len(pending) > 0 {
			fmt.Fprintln(w, strings.Join(pending, "\n"))
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return mux
}
