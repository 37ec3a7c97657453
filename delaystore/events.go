package delaystore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Tails records, for ttl, whether relay id has live-event tails (listening false removes
// its record) and reports whether another relay has: one tails.lua call on
// {P:fleet}:tails (docs/design.md "Live events"). Safe for concurrent use.
func (s *Store) Tails(ctx context.Context, id string, listening bool, ttl time.Duration) (bool, error) {
	flag := "0"
	if listening {
		flag = "1"
	}
	n, err := s.scripts[scriptTails].Run(ctx, s.rdb, []string{s.tailsKey}, id, flag, ceilMS(ttl)).Int()
	if err != nil {
		return false, fmt.Errorf("tails: %w", err)
	}
	return n == 1, nil
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
