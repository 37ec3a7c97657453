package nats

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

// Reconnect behaviour of [Connect].
const (
	reconnectWait      = 500 * time.Millisecond
	reconnectJitter    = 250 * time.Millisecond
	reconnectJitterTLS = time.Second
)

// Connect dials url (one or more comma-separated NATS URLs) and returns a connection
// that reconnects forever, every 0.5 s plus jitter, naming itself name to the server.
//
// Disconnects, reconnects and asynchronous errors (slow consumer, permission violation)
// are logged at Warn, once per event, on logger (nil: discarded). There is no reconnect
// buffer (ReconnectBufSize -1): a publish while the connection is down fails at once
// instead of waiting in client memory, which a crash would lose and which only a later
// flush could confirm; the publisher's caller retries it after the reconnect.
//
// Connect blocks until the first connection succeeds or fails; ctx cancels the wait.
// The caller owns the connection and closes it (after the publishers and subscribers
// that use it). extra options (e.g. [Security.Options]) are applied last.
func Connect(ctx context.Context, url string, name string, logger *slog.Logger, extra ...natsgo.Option) (*natsgo.Conn, error) {
	log := loggerOrDiscard(logger).With("component", "nats.conn")
	opts := []natsgo.Option{
		natsgo.Name(name),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectBufSize(-1),
		natsgo.ReconnectWait(reconnectWait),
		natsgo.ReconnectJitter(reconnectJitter, reconnectJitterTLS),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil { // nil: closed on purpose
				log.Warn("nats disconnected", "error", err)
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			log.Warn("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		natsgo.ErrorHandler(func(_ *natsgo.Conn, sub *natsgo.Subscription, err error) {
			if sub != nil {
				log.Warn("nats async error", "subject", sub.Subject, "error", err)
				return
			}
			log.Warn("nats async error", "error", err)
		}),
		natsgo.ClosedHandler(func(*natsgo.Conn) { log.Debug("nats connection closed") }),
	}
	opts = append(opts, extra...)

	type result struct {
		nc  *natsgo.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := natsgo.Connect(url, opts...)
		done <- result{nc, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("connect to nats: %w", r.err)
		}
		log.Info("nats connected", "url", r.nc.ConnectedUrlRedacted(), "server", r.nc.ConnectedServerName())
		return r.nc, nil
	case <-ctx.Done():
		go func() { // the dial is bounded by nats.go's connect timeout
			if r := <-done; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("connect to nats: %w", ctx.Err())
	}
}

func loggerOrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
