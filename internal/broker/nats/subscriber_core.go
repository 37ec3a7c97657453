package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	natsgo "github.com/nats-io/nats.go"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/delaybridge/delaybridge/internal/headers"
)

func (s *Subscriber) setupCore(ctx context.Context, topic string) (func(context.Context, chan *message.Message), error) {
	sub, err := s.nc.QueueSubscribeSync(topic, s.cfg.Queue)
	if err != nil {
		return nil, fmt.Errorf("core queue subscribe %q: %w", s.cfg.Queue, err)
	}
	fctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if err := s.nc.FlushWithContext(fctx); err != nil { // the server has our interest when this returns
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("core queue subscribe %q: flush: %w", s.cfg.Queue, err)
	}
	log := s.log.With("topic", topic, "queue", s.cfg.Queue)
	log.Info("subscribed through core nats")
	return func(ctx context.Context, out chan *message.Message) {
		s.runCore(ctx, out, sub, log)
	}, nil
}

// runCore hands out the core subscription's messages until ctx is done.
func (s *Subscriber) runCore(ctx context.Context, out chan *message.Message, sub *natsgo.Subscription, log *slog.Logger) {
	defer close(out)
	defer func() {
		// Messages the client buffered are dropped: core NATS has no redelivery.
		if err := sub.Unsubscribe(); err != nil && !s.nc.IsClosed() {
			log.Debug("core unsubscribe", "error", err)
		}
	}()
	sem := make(chan struct{}, s.cfg.MaxInFlight)
	queue := s.startSettling(sem, log)
	defer close(queue)
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			<-sem
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, natsgo.ErrSlowConsumer) {
				log.Warn("core subscription is a slow consumer: the server or client dropped messages")
				continue
			}
			log.Warn("core subscription ended", "error", err)
			return
		}
		var extra []string
		if m.Reply != "" {
			extra = []string{headers.MetaRequest, "1"}
		}
		wm := fromNATS(m.Header, m.Data, extra...)
		msgCtx, cancelMsg := context.WithCancel(ctx)
		wm.SetContext(msgCtx)
		select {
		case out <- wm:
			queue <- pending{wm: wm, cancel: cancelMsg,
				onAck:  func() error { return reply(m, wm) },
				onNack: func() error { return nil }, // no redelivery in core NATS
			}
		case <-ctx.Done():
			cancelMsg()
			<-sem
			return
		}
	}
}

// reply answers a core request with the metadata reply body, when both are present.
func reply(m *natsgo.Msg, wm *message.Message) error {
	body := wm.Metadata.Get(headers.MetaReply)
	if body == "" || m.Reply == "" {
		return nil
	}
	return m.Respond([]byte(body))
}
