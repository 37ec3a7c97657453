// Command inprocess runs delaybridge inside a Go program instead of beside it (package
// bridge): it starts the bridge, sends itself a message delayed by a second through NATS,
// prints it when it arrives, then stops the bridge and exits.
//
//	BRIDGE_REDIS_URL=redis://127.0.0.1:6379/0 BRIDGE_NATS_URL=nats://127.0.0.1:4222 \
//	  BRIDGE_HTTP_ADDR=127.0.0.1:0 BRIDGE_API_ADDR= go run ./examples/inprocess
//
// Redis and NATS must be running at those URLs: the package embeds neither (`bridge dev`
// does). The configuration is the sidecar's (config.Config, every BRIDGE_* variable); a
// program may also set its fields in code after config.Load.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/bridge"
	"github.com/delaybridge/delaybridge/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "inprocess:", err)
		os.Exit(1)
	}
}

// run starts the bridge in this process, sends one message to demo.inprocess with
// x-delay: 1s, prints it when it arrives, and stops the bridge (Run returns after its
// drain).
func run(ctx context.Context, environ []string, out io.Writer) error {
	cfg, err := config.Load(config.EnvMap(environ))
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ready := make(chan struct{})
	b, err := bridge.New(cfg, bridge.WithLogger(logger), bridge.WithReady(func() { close(ready) }))
	if err != nil {
		return err
	}
	bctx, stopBridge := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	select {
	case <-ready:
	case err := <-done: // it stopped before it was ready: a start-up error, or ctx ended
		stopBridge()
		if err == nil {
			err = ctx.Err()
		}
		return fmt.Errorf("bridge: %w", err)
	}
	got, err := roundTrip(ctx, cfg.NATS.URL, cfg.NATS.Subject)
	if err == nil {
		fmt.Fprintf(out, "arrived on demo.inprocess %s after it was sent: %q (x-delay-id %s)\n",
			got.after.Round(time.Millisecond), got.msg.Data, got.msg.Header.Get("x-delay-id"))
	}
	stopBridge() // Run drains and returns
	return errors.Join(err, <-done)
}

type arrival struct {
	msg   *nats.Msg
	after time.Duration
}

// roundTrip sends a message delayed by a second to demo.inprocess through the bridge's
// ingress subject and waits for it.
func roundTrip(ctx context.Context, url, ingress string) (arrival, error) {
	nc, err := nats.Connect(url, nats.Name("inprocess-example"))
	if err != nil {
		return arrival{}, err
	}
	defer nc.Close()
	arrived := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe("demo.inprocess", arrived)
	if err != nil {
		return arrival{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	m := nats.NewMsg(ingress)
	m.Header.Set("x-delay", "1s")
	m.Header.Set("x-target", "demo.inprocess")
	m.Data = []byte("hello from the same process")
	sent := time.Now()
	if _, err := nc.RequestMsgWithContext(ctx, m); err != nil {
		return arrival{}, fmt.Errorf("send: %w", err)
	}
	select {
	case msg := <-arrived:
		return arrival{msg: msg, after: time.Since(sent)}, nil
	case <-ctx.Done():
		return arrival{}, errors.New("the message did not arrive")
	}
}
