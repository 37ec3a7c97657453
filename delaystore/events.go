package delaystore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// AnnounceTails tells every replica that relay id has live-event tails: one PUBLISH on
// the fleet channel, heard through Wakeups as Wake{Shard: WakeTails, ID: id}
// (docs/design.md "Live events"). It blocks until Redis answered or ctx is done; safe for
// concurrent use.
func (s *Store) AnnounceTails(ctx context.Context, id string) error {
	if err := s.rdb.Publish(ctx, s.fleetChannel, noticeTails+id).Err(); err != nil {
		return fmt.Errorf("announce tails: %w", err)
	}
	return nil
}

// PublishEvents publishes payload on the fleet's event channel (P:events). Safe for
// concurrent use.
func (s *Store) PublishEvents(ctx context.Context, payload []byte) error {
	if err := s.rdb.Publish(ctx, s.eventsChannel, payload).Err(); err != nil {
		return fmt.Errorf("publish events: %w", err)
	}
	return nil
}

// eventsBuffer is the capacity of SubscribeEvents' channel: batches beyond it wait in
// go-redis' own buffer, then are dropped by it.
const eventsBuffer = 64

// SubscribeEvents subscribes, on a connection of its own, to the fleet's event channel
// and returns once Redis confirmed it (or ctx is done). The payloads arrive on batches
// until stop is called, which closes it. go-redis resubscribes after a reconnect. Safe
// for concurrent use.
func (s *Store) SubscribeEvents(ctx context.Context) (batches <-chan string, stop func(), err error) {
	ps := s.rdb.Subscribe(ctx, s.eventsChannel)
	msg, err := ps.ReceiveTimeout(ctx, 10*time.Second)
	if err == nil {
		if _, ok := msg.(*redis.Subscription); !ok {
			err = fmt.Errorf("unexpected first message %T", msg)
		}
	}
	if err != nil {
		_ = ps.Close()
		return nil, nil, fmt.Errorf("subscribe %s: %w", s.eventsChannel, err)
	}
	out := make(chan string, eventsBuffer)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		in := ps.Channel(redis.WithChannelSize(eventsBuffer))
		for {
			select {
			case <-quit:
				return
			case m, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- m.Payload:
				case <-quit:
					return
				}
			}
		}
	}()
	return out, func() {
		close(quit)
		_ = ps.Close()
		<-done
	}, nil
}
