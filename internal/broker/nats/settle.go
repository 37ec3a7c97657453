package nats

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
)

// pending is a handed-out message awaiting its Ack or Nack.
type pending struct {
	wm            *message.Message
	cancel        context.CancelFunc // the message's context
	tr            *tracked           // its InProgress reports (JetStream), nil: none
	onAck, onNack func() error
}

// startSettling starts the goroutine that settles the messages of one subscription and
// returns its queue, which the caller closes when it hands out no more. The caller must
// hold a count of s.wg (no race with Close's Wait).
func (s *Subscriber) startSettling(sem chan struct{}, log *slog.Logger) chan pending {
	queue := make(chan pending, cap(sem))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for p := range queue {
			s.settle(p, log)
			<-sem
		}
	}()
	return queue
}

// settle waits for p's Ack or Nack and runs onAck or onNack. Messages are settled in the
// order they were handed out, by one goroutine per subscription rather than one per
// message: an early Ack waits for the messages handed out before it (receivers ack in
// batches, so the wait is one batch at most). On Close settle gives up, unless the Ack or
// Nack had already come: an unacked JetStream message is then redelivered after AckWait;
// a core message is gone.
func (s *Subscriber) settle(p pending, log *slog.Logger) {
	var acked bool
	select {
	case <-p.wm.Acked():
		acked = true
	case <-p.wm.Nacked():
	case <-s.closeCtx.Done():
		select {
		case <-p.wm.Acked():
			acked = true
		case <-p.wm.Nacked():
		default:
			p.cancel()
			p.tr.done()
			return
		}
	}
	p.cancel()
	p.tr.done()
	if acked {
		if err := p.onAck(); err != nil {
			log.Debug("ack", "uuid", p.wm.UUID, "error", err)
		}
		return
	}
	if err := p.onNack(); err != nil {
		log.Debug("nack", "uuid", p.wm.UUID, "error", err)
	}
}
