package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/nats-io/nats.go/jetstream"
)

func (s *Subscriber) setupJetStream(ctx context.Context, topic string) (func(context.Context, chan *message.Message), error) {
	cc := s.consumerConfig(topic)
	if cc.Durable == "" {
		return nil, errors.New("empty consumer name")
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, cc)
	if err != nil {
		return nil, fmt.Errorf("create or update consumer %q on stream %q: %w", cc.Durable, s.cfg.Stream, err)
	}
	log := s.log.With("topic", topic, "stream", s.cfg.Stream, "consumer", cc.Durable)
	log.Info("subscribed through jetstream")
	return func(ctx context.Context, out chan *message.Message) {
		s.runJetStream(ctx, out, topic, cons, log)
	}, nil
}

// runJetStream hands out the consumer's messages until ctx is done, resuming with a
// fresh pull (and the consumer created again) when the server ends one.
func (s *Subscriber) runJetStream(ctx context.Context, out chan *message.Message, topic string, cons jetstream.Consumer, log *slog.Logger) {
	closeOut := sync.OnceFunc(func() { close(out) })
	defer closeOut()
	sem := make(chan struct{}, s.cfg.MaxAckPending)
	queue := s.startSettling(sem, log)
	defer close(queue)
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
			err = s.deliverJetStream(ctx, it, out, sem, queue, prog, log)
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

// fetched is a JetStream message taken from the client's buffer and not yet handed out.
type fetched struct {
	jm     jetstream.Msg
	wm     *message.Message
	cancel context.CancelFunc // wm's context
	tr     *tracked           // its InProgress reports
}

// deliverJetStream hands out messages of it until ctx is done or it ends. A fetching
// goroutine takes messages out of the client's buffer as soon as a count of sem is free,
// and reports each one in progress from then on (prog): a message pulled from
// the server but waiting behind a blocked receiver (its parks waiting for Redis) would
// otherwise see AckWait run out, be redelivered, and be worked on twice. sem (of
// MaxAckPending, the server's own limit) bounds what is fetched and not yet settled.
func (s *Subscriber) deliverJetStream(ctx context.Context, it jetstream.MessagesContext, out chan *message.Message, sem chan struct{}, queue chan<- pending, prog *progress, log *slog.Logger) error {
	ready := make(chan fetched, cap(sem))
	var fetchErr error
	go func() {
		defer close(ready)
		fetchErr = s.fetchJetStream(ctx, it, sem, ready, prog, log)
	}()
	for f := range ready {
		select {
		case out <- f.wm:
			queue <- pending{wm: f.wm, cancel: f.cancel, tr: f.tr, onAck: f.jm.Ack, onNack: f.jm.Nak}
			continue
		case <-ctx.Done():
		}
		// Stopped: hand back what was fetched and not handed out. The fetcher ends too
		// (ctx, and the iterator drained on ctx by runJetStream).
		f.cancel()
		f.tr.done()
		nak(f.jm, log)
		<-sem
		for f := range ready {
			f.cancel()
			f.tr.done()
			nak(f.jm, log)
			<-sem
		}
		return ctx.Err()
	}
	return fetchErr // ready is closed: the fetcher has returned
}

// fetchJetStream takes messages out of it while counts of sem are free and queues them on
// ready (which has room for every count of sem), until ctx is done or it ends.
func (s *Subscriber) fetchJetStream(ctx context.Context, it jetstream.MessagesContext, sem chan struct{}, ready chan<- fetched, prog *progress, log *slog.Logger) error {
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		jm, err := it.Next()
		if err != nil {
			<-sem
			return err
		}
		if ctx.Err() != nil {
			nak(jm, log)
			<-sem
			return ctx.Err()
		}
		var extra []string
		if md, err := jm.Metadata(); err == nil {
			extra = []string{headers.MetaSourceID, sourceID(md.Stream, md.Sequence.Stream), "", ""}
			if !md.Timestamp.IsZero() {
				extra[2], extra[3] = headers.MetaSourceTime, strconv.FormatInt(md.Timestamp.UnixMilli(), 10)
			} else {
				extra = extra[:2]
			}
		} else {
			log.Debug("jetstream message without metadata", "error", err)
		}
		wm := fromNATS(jm.Headers(), jm.Data(), extra...)
		msgCtx, cancelMsg := context.WithCancel(ctx)
		wm.SetContext(msgCtx)
		ready <- fetched{jm: jm, wm: wm, cancel: cancelMsg, tr: prog.track(jm)}
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
