package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
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

// ServeListener is Serve on an existing listener, which it closes. A handler that panics
// is answered 500 and logged with its stack at Error on logger (nil: slog.Default), never
// a dropped connection (recoverPanics).
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, sc ServerConfig, logger *slog.Logger) error {
	sc = sc.withDefaults()
	if sc.MaxConns > 0 {
		ln = netutil.LimitListener(ln, sc.MaxConns)
	}
	if logger == nil {
		logger = slog.Default()
	}
	srv := &http.Server{
		Handler:           recoverPanics(h, logger),
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
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("http shutdown", "addr", ln.Addr().String(), "err", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// recoverPanics serves h and answers a request whose handler panicked with 500
// {"error": "internal error"} (when nothing was written yet), logging the panic, the request
// line and the stack at Error. net/http alone would drop the connection, which a client
// cannot tell from a crash, and print to the standard logger. A panic is a bug to fix
// where it happens: this only keeps its request's answer and the log honest. A panic with
// http.ErrAbortHandler (a handler's deliberate abort) passes on to net/http.
func recoverPanics(h http.Handler, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw := &panicWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			logger.Error("http handler panicked: a bug, please report it", "method", r.Method, "path", r.URL.Path,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !pw.wrote {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Connection", "close")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"error":"internal error (logged by the bridge)"}`+"\n")
			}
		}()
		h.ServeHTTP(pw, r)
	})
}

// panicWriter records whether a handler began its answer. Unwrap keeps
// http.ResponseController (Hijack, Flush) working through it.
type panicWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *panicWriter) WriteHeader(code int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *panicWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(p)
}

func (w *panicWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
