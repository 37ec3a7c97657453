package delaystore

// TEMPORARY: compile stub until the fleetstore branch is merged. Deleted at merge.

import (
	"context"
	"errors"
	"time"
)

type Members struct {
	Now     int64
	Version int64
	Changed bool
	IDs     []string
}

func (s *Store) Heartbeat(ctx context.Context, id string, ttl time.Duration, known int64) (Members, error) {
	return Members{}, errors.New("stub")
}
func (s *Store) Leave(ctx context.Context, id string) error { return errors.New("stub") }

const (
	WakeResync = -1
	WakeFleet  = -2
)

type Wakeups struct{ C <-chan Wake }

func (s *Store) Wakeups2(ctx context.Context) (*Wakeups, error) { return nil, errors.New("stub") }
func (w *Wakeups) Follow(ctx context.Context, shards []int) error { return errors.New("stub") }
func (w *Wakeups) Close() error                                    { return nil }
