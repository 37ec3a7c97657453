package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/nats-io/nats.go/jetstream"
)

func (s *Subscriber) setupJetStream(ctx context.Context, topic string) (func(context.Context, chan *message.Message), error) {
	cons, log, err := s.createConsumer(ctx, topic)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, out chan *message.Message) {
		s.runJetStream(ctx, jsOut{wm: out}, topic, cons, log)
	}, nil
}

// createConsumer creates or updates the durable consumer of topic on the stream.
func (s *Subscriber) createConsumer(ctx context.Context, topic string) (jetstream.Consumer, *slog.Logger, error) {
	cc := s.consumerConfig(topic)
	if cc.Durable == "" {
		return nil, nil, errors.New("empty consumer name")
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, cc)
	if err != nil {
		return nil, nil, fmt.Errorf("create or update consumer %q on stream %q: %w", cc.Durable, s.cfg.Stream, err)
	}
	log := s.log.With("topic", topic, "stream", s.cfg.Stream, "consumer", cc.Durable)
	log.Info("subscribed through jetstream")
	return cons, log, nil
}

// runJetStream hands out the consumer's messages to out until ctx is done, resuming with
// a fresh pull (and the consumer created again) when the server ends one. It closes out.
func (s *Subscriber) runJetStream(ctx context.Context, out jsOut, topic string, cons jetstream.Consumer, log *slog.Logger) {
	closeOut := sync.OnceFunc(out.close)
	defer closeOut()
	sem := make(chan struct{}, s.cfg.MaxAckPending)
	if out.wm != nil {
		out.queue = s.startSettling(sem, log)
		defer close(out.queue)
	}
	sub := &jsSub{sem: sem, closed: s.closeCtx, log: log}
	prog := newProgress(s.cfg.AckWait, s.cfg.MaxProgress, log)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		prog.run(ctx)
	}()
	batch := min(s.cfg.MaxAckPending, maxPullBatch)
	for {
		it, err := cons.Messages(jetstream.PullMaxMessages(batch), jetstream.PullExpiry(pullExpiry))
		if err == nil {
			stopIter := context.AfterFunc(ctx, it.Drain) // unblocks Next
			err = s.deliverJetStream(ctx, it, out, sub, prog, log)
			stopIter()
			if ctx.Err() != nil {
				closeOut() // promptly: the hand-back below may take a moment
			}
			s.handBack(it, log)
		}
		if ctx.Err() != nil {
			return
		}
		if s.nc.IsClosed() {
			log.Warn("jetstream subscription ended: connection closed")
			return
		}
		log.Warn("jetstream consume interrupted, resuming", "error", err)
		if cons = s.resume(ctx, topic, log); cons == nil {
			return
		}
	}
}

// resume creates the consumer again, a second after an interruption and then every second
// until it is there (a failure logged once at Warn); nil when ctx ended or the connection
// closed (logged).
func (s *Subscriber) resume(ctx context.Context, topic string, log *slog.Logger) jetstream.Consumer {
	if !backoff.Sleep(ctx, resumeWait) {
		return nil
	}
	var cons jetstream.Consumer
	closed := false
	err := backoff.Retry(ctx, backoff.Policy{Min: resumeWait, Max: resumeWait, Log: log, ErrKey: "error",
		Failed: "jetstream consumer not available, retrying every second"},
		func(ctx context.Context) (err error) {
			cctx, cancel := context.WithTimeout(ctx, setupTimeout)
			defer cancel()
			cons, err = s.js.CreateOrUpdateConsumer(cctx, s.cfg.Stream, s.consumerConfig(topic))
			return err
		}, func(error) bool { closed = s.nc.IsClosed(); return closed })
	switch {
	case err == nil:
		log.Info("jetstream consume resumed")
		return cons
	case closed:
		log.Warn("jetstream subscription ended: connection closed")
	}
	return nil
}

// deliverJetStream hands out messages of it until ctx is done or it ends. A fetching
// goroutine takes messages out of the client's buffer as soon as a count of sub.sem is
// free, and reports each one in progress from then on (prog): a message pulled from the
// server but waiting behind a blocked receiver (its parks waiting for Redis) would
// otherwise see AckWait run out, be redelivered, and be worked on twice. sub.sem (of
// MaxAckPending, the server's own limit) bounds what is fetched and not yet settled.
func (s *Subscriber) deliverJetStream(ctx context.Context, it jetstream.MessagesContext, out jsOut, sub *jsSub, prog *progress, log *slog.Logger) error {
	ready := make(chan *jsMsg, cap(sub.sem))
	var fetchErr error
	go func() {
		defer close(ready)
		fetchErr = s.fetchJetStream(ctx, it, sub, ready, prog, log)
	}()
	for m := range ready {
		if out.hand(ctx, m) {
			continue
		}
		// Stopped: hand back what was fetched and not handed out. The fetcher ends too
		// (ctx, and the iterator drained on ctx by runJetStream).
		m.handBack()
		for m := range ready {
			m.handBack()
		}
		return ctx.Err()
	}
	return fetchErr // ready is closed: the fetcher has returned
}

// fetchJetStream takes messages out of it while counts of sub.sem are free and queues them
// on ready (which has room for every count of sub.sem), until ctx is done or it ends.
func (s *Subscriber) fetchJetStream(ctx context.Context, it jetstream.MessagesContext, sub *jsSub, ready chan<- *jsMsg, prog *progress, log *slog.Logger) error {
	for {
		select {
		case sub.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		jm, err := it.Next()
		if err != nil {
			<-sub.sem
			return err
		}
		if ctx.Err() != nil {
			nak(jm, log)
			<-sub.sem
			return ctx.Err()
		}
		m := newJSMsg(jm, sub)
		m.tr = prog.track(&m.trk, jm)
		ready <- m
	}
}

// handBack stops it and naks the messages it still buffers: they were never handed
// out, so another subscriber may have them at once rather than after AckWait. Bounded
// by drainTimeout; what is left then is redelivered after AckWait.
func (s *Subscriber) handBack(it jetstream.MessagesContext, log *slog.Logger) {
	it.Drain()
	deadline := time.Now().Add(drainTimeout)
	n := 0
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			it.Stop()
			break
		}
		jm, err := it.Next(jetstream.NextMaxWait(wait))
		if err != nil {
			if errors.Is(err, natsgo.ErrTimeout) {
				it.Stop()
			}
			break
		}
		nak(jm, log)
		n++
	}
	if n > 0 {
		log.Debug("handed back buffered jetstream messages", "count", n)
	}
}

func nak(jm jetstream.Msg, log *slog.Logger) {
	if err := jm.Nak(); err != nil {
		log.Debug("jetstream nak", "error", err)
	}
}
