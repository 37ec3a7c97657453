package delaystore

import (
	"context"
	"errors"
	"fmt"
)

// Cancel is CancelAt with the Redis time as the cancel's time.
func (s *Store) Cancel(ctx context.Context, id string) (bool, error) {
	return s.CancelAt(ctx, id, 0)
}

// CancelAt deletes the message with this id unless it is in delivery; a message with a
// source id leaves a tombstone, as in Ack, so that a
// redelivery of the cancelled source message is not parked again. Found or not, the
// cancel is remembered for Config.CancelWindow: a later Park of the id whose Published
// time is at or before at is not parked (Parked.Cancelled). at is the cancel's time by its
// source, unix ms (<= 0: an operator's cancel, the Redis time); of two cancels of one id
// the later at counts. A parked message whose source published it after at (its
// Published, stored when it was parked with Replace) is kept: the cancel was read late;
// an operator's cancel (at <= 0: Cancel, the message API's DELETE) deletes what is parked
// whatever its source time (a producer clock ahead of Redis's). It reports whether a message was
// deleted: true means it will never be delivered. A message in delivery (claimed by a
// replica whose lease runs, which may hold it until its due time) is not deleted: false
// and an *InDeliveryError (errors.Is ErrInDelivery), the cancel still remembered; for a
// recurring message the entry is deleted all the same (no later firing: Stopped), the
// firing in delivery may still be published. It blocks until Redis answered or ctx is done.
// With Config.MinReplicas > 0 the deletion is confirmed by WAIT; fewer replicas is an
// error wrapping ErrNotReplicated (the deletion may still have happened on the master:
// cancelling again is safe, but may then report false).
func (s *Store) CancelAt(ctx context.Context, id string, at int64) (bool, error) {
	return s.CancelKeyAt(ctx, id, "", at)
}

// CancelKeyAt is CancelAt of the message with this id and ordering key (docs/design.md
// "Ordering keys": a keyed message is named by both; "" is a message without key). A
// deleted message leaves its key's chain: the next of the key becomes eligible when the
// deleted one was the first.
func (s *Store) CancelKeyAt(ctx context.Context, id, key string, at int64) (bool, error) {
	if id == "" {
		return false, errors.New("cancel: empty id")
	}
	if err := s.layoutErr(); err != nil {
		return false, fmt.Errorf("cancel %s: %w", id, err)
	}
	if err := checkOrderingKey(Envelope{OrderingKey: key}); err != nil {
		return false, fmt.Errorf("cancel %s: %w", id, err)
	}
	sh := s.ShardOfMessage(id, key)
	args := []any{id, s.tombMS, publishedArg(at), s.cancelMS, s.keys[sh].wake, s.keys[sh].shardID, key}
	cmds := s.evalConfirmed(ctx, s.scripts[scriptCancel], []call{{keys: s.keys[sh].cancel, args: args, fence: s.keys[sh].seq}})
	n, err := cmds[0].Int64()
	if err != nil {
		return false, fmt.Errorf("cancel %s: %w", id, err)
	}
	switch n {
	case cancelInDelivery:
		return false, &InDeliveryError{ID: id}
	case cancelFiringInDelivery:
		return false, &InDeliveryError{ID: id, Stopped: true}
	}
	return n == 1, nil
}

// cancel.lua's answers other than 1 (deleted) and 0 (not found).
const (
	cancelInDelivery       = 2 // in delivery: kept
	cancelFiringInDelivery = 3 // a recurring message in delivery: deleted, its firing may be published
)
