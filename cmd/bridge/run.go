package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/bridge"
	"github.com/delaybridge/delaybridge/config"
	"github.com/delaybridge/delaybridge/internal/clock"
	"github.com/delaybridge/delaybridge/internal/tracing"
)

// runBridge is `bridge run`: the configuration, tracing and clock from the environment,
// then package bridge runs until ctx is cancelled.
func runBridge(ctx context.Context, environ []string, stderr io.Writer) error {
	cfg, err := config.Load(config.EnvMap(environ))
	if err == nil {
		err = cfg.ValidateForRun()
	}
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	logger := bridge.NewLogger(cfg, stderr)
	if gogc, limit, set := setGCDefault(environ, cgroupMemoryMax); set {
		logger.Debug("GOGC not set: garbage collection target set", "gogc", gogc, "memory_limit_bytes", limit)
	}
	if unknown := config.Unknown(config.EnvMap(environ)); len(unknown) > 0 {
		logger.Warn("unknown BRIDGE_ variables ignored (typo?)", "names", strings.Join(unknown, ","))
	}
	tp, shutdown, err := tracing.Setup(ctx, environ, version)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			logger.Warn("flushing trace spans", "err", err)
		}
	}()
	if tracing.Enabled(environ) {
		logger.Info("OpenTelemetry tracing on (OTLP over HTTP)")
	}
	env := config.EnvMap(environ)
	now, err := clock.Local(func(k string) string { return env[k] })
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	b, err := bridge.New(cfg, bridge.WithLogger(logger), bridge.WithVersion(version),
		bridge.WithTracer(tp.Tracer("github.com/delaybridge/delaybridge")), bridge.WithClock(now))
	if err != nil {
		return err
	}
	return b.Run(ctx)
}

// defaultGOGC is the garbage collection target of `bridge run` when GOGC is not set
// (Go's default is 100). The collector was about half of the bridge's CPU per message:
// at 400 the bridge spent 35-50% less CPU per released and about 25% less per
// parked message in the burst benchmark, for about twice the peak RSS
// (docs/decisions/0011-gogc-400.md). GOGC and GOMEMLIMIT in the environment win; without GOMEMLIMIT, a
// container's memory limit (cgroup v2 memory.max) caps the heap at memLimitShare of it,
// so the larger target cannot by itself bring the process to its memory limit.
const defaultGOGC = 400

// memLimitShare is the share of the cgroup's memory.max given to the Go runtime as its
// soft memory limit when GOGC is defaulted and GOMEMLIMIT is not set.
const memLimitShare = 0.75

// defaultMemLimit is that soft memory limit when no cgroup limit is found (no container, or
// memory.max "max"): memLimitShare of the 256 MiB the sidecar manifest gives the bridge,
// so that the larger GC target keeps the memory bound documented for the message API
// (docs/guarantees.md, H11: 200 clients posting 2 MiB bodies) without a container limit.
// A soft limit only makes the collector run more often near it; it never fails an
// allocation.
const defaultMemLimit = 192 << 20

// cgroupMemoryMax is cgroup v2's memory limit of this process's cgroup.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// setGCDefault sets the GC target to defaultGOGC unless environ sets GOGC, and then, unless
// environ sets GOMEMLIMIT, a soft memory limit of memLimitShare of the limit in memMax (a
// cgroup v2 memory.max file; "max", absent or unreadable: defaultMemLimit). It reports
// the target and the limit set (0: none).
func setGCDefault(environ []string, memMax string) (gogc int, limit int64, set bool) {
	memlimit := false
	for _, kv := range environ {
		if strings.HasPrefix(kv, "GOGC=") {
			return 0, 0, false
		}
		memlimit = memlimit || strings.HasPrefix(kv, "GOMEMLIMIT=")
	}
	debug.SetGCPercent(defaultGOGC)
	if !memlimit {
		limit = defaultMemLimit
		if data, err := os.ReadFile(memMax); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && n > 0 {
				limit = int64(float64(n) * memLimitShare)
			}
		}
		debug.SetMemoryLimit(limit)
	}
	return defaultGOGC, limit, true
}
