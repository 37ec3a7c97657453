package main

import (
	"context"
	"fmt"
	"io"
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
