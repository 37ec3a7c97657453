package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Server timeouts shared by both listeners.
const (
	// DefaultReadHeaderTimeout bounds reading a request's header (slowloris).
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included: 2 MiB at 35 KiB/s.
	DefaultReadTimeout = time.Minute
	// DefaultWriteTimeout bounds a handler and writing its answer (longer than /readyz's
	// 2 s probes and a default 30 s pprof profile).
	DefaultWriteTimeout = time.Minute
	// DefaultIdleTimeout is how long an idle keep-alive connection is kept
	// (BRIDGE_HTTP_IDLE_TIMEOUT).
	DefaultIdleTimeout = time.Minute
)

// ServerConfig bounds one HTTP listener. Zero durations take the Default* values.
type ServerConfig struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	// IdleTimeout closes a keep-alive connection that carried no request for this long,
	// so that held connections cannot use up the process's file descriptors.
	IdleTimeout time.Duration
	// MaxConns, when > 0, is the most connections open at once
	// (netutil.LimitListener): further ones wait in the kernel's accept queue, which
	// costs the process no file descriptor.
	MaxConns int
}

func (c ServerConfig) withDefaults() ServerConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&c.ReadTimeout, DefaultReadTimeout)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.IdleTimeout, DefaultIdleTimeout)
	return c
}

// Serve listens on addr and serves h with the bounds of sc until ctx is cancelled, then
// shuts down gracefully (bounded by 5s). It returns a listen error at once, nil after a
// clean shutdown.
func Serve(ctx context.Context, addr string, h http.Handler, sc ServerConfig, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, h, sc, logger)
}

// ServeListener is Serve on an existing listener, which it closes.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, sc ServerConfig, logger *slog.Logger) error {
	sc = sc.withDefaults()
	if sc.MaxConns > 0 {
		ln = netutil.LimitListener(ln, sc.MaxConns)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: sc.ReadHeaderTimeout,
		ReadTimeout:       sc.ReadTimeout,
		WriteTimeout:      sc.WriteTimeout,
		IdleTimeout:       sc.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && logger != nil {
		logger.Warn("http shutdown", "addr", ln.Addr().String(), "err", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}
