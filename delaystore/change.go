package delaystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/contract"
)

// Bulk changes (docs/design.md, "Bulk changes"): package admin finds the messages with
// Scan and changes those it picked with Change (bulk.lua), one shard and a bounded chunk
// per call; a resumable operation saves its progress in the same call. The delivery path
// never changes messages in bulk.

// Kinds of a BulkOp.
const (
	BulkCancel     = "cancel"
	BulkShift      = "shift" // due + BulkOp.Shift
	BulkDeliverAt  = "at"    // due = BulkOp.At
	BulkDeliverNow = "now"   // due = the Redis time
)

// BulkOp is what a Change does to each message it picks: Kind is one of the Bulk*
// constants.
type BulkOp struct {
	Kind  string
	Shift time.Duration // BulkShift, signed; counted in whole ms, a positive one rounded up
	At    int64         // BulkDeliverAt, unix ms
	// MaxDelay bounds the new due time of BulkShift and BulkDeliverAt (BRIDGE_MAX_DELAY,
	// contract.Horizon): a message whose new due would lie more than MaxDelay after the
	// Redis time is matched but not changed; one whose new due lies in the past is due at
	// once (before 1970: 1970). Required (> 0) for those two kinds.
	MaxDelay time.Duration
}

// ErrBadOp: a BulkOp that cannot be applied (an unknown kind, or no MaxDelay where it
// bounds the new due time).
var ErrBadOp = errors.New("bad bulk operation")

// Check reports why op cannot be applied (an error wrapping ErrBadOp), nil when it can.
// It is a pure function.
func (op BulkOp) Check() error {
	switch op.Kind {
	case BulkCancel, BulkDeliverNow:
		return nil
	case BulkShift, BulkDeliverAt:
		if op.MaxDelay <= 0 {
			return fmt.Errorf("%w: %s without a maximum delay", ErrBadOp, op.Kind)
		}
		return nil
	}
	return fmt.Errorf("%w: kind %q", ErrBadOp, op.Kind)
}

// value is op's value as bulk.lua takes it: the shift in ms or the due time.
func (op BulkOp) value() int64 {
	switch op.Kind {
	case BulkShift:
		ms, _ := contract.AddMillis(0, op.Shift) // never early: a positive sub-ms part rounds up
		return ms
	case BulkDeliverAt:
		return op.At
	}
	return 0
}

// Pick is one message for Change, at the version a Scan or a Get read it. Change leaves it
// alone when it changed since (replaced, rescheduled, cancelled), except under a cancel
// of a recurring message: a newer version of the same target (the next occurrence its
// firing parked since the read) is cancelled too.
type Pick struct {
	ID      string
	Version int64
	// Newer (a cancel): pick only a version newer than Version of a recurring message of
	// the same target: an occurrence that a firing parked since a pass began whose fence
	// is Version. A message parked since then is no such occurrence and is left alone.
	Newer bool
	// target is the target as the body holds it (a name or a code's field): what bulk.lua
	// compares a newer version's target with.
	target string
}

// Pick is the Pick of e at the version the scan read.
func (e Scanned) Pick() Pick { return Pick{ID: e.ID, Version: e.Version, target: e.field} }

// PickOf is the Pick of m at the version Get read. It does not block.
func (s *Store) PickOf(m Message) Pick {
	return Pick{ID: m.ID, Version: m.Version, target: s.targetKey(m.Shard, m.Envelope.Target)}
}

// Progress is what a resumable operation saves with a Change, in the same script call as
// the changes it counts: '<matched>,<changed>,<Next>' under OpID in the shard's progress
// hash ({P:s}:b), so a crash leaves both or neither.
type Progress struct {
	OpID string
	// Over is the progress the chunk continues, as SavedProgress or the last Change
	// returned it ("" at the start): when the stored one differs (another run went on
	// meanwhile) nothing changes, and Changed.N is -1.
	Over string
	// Next is where the operation goes on after the chunk; the store keeps it as is.
	Next string
	// Counted is how many of the chunk's messages the caller counts as matched; Newer
	// picks that Change took are added to them.
	Counted int
	// Keep is how long progress is kept without a write: older progress of any operation
	// of the shard is dropped, a few entries per call.
	Keep time.Duration
}

// Changed is what a Change did.
type Changed struct {
	// N messages were changed; -1 when the saved progress was not Progress.Over (then
	// nothing changed).
	N int64
	// Newer of them were Newer picks.
	Newer int64
	// Progress is the progress saved now ("" without Progress).
	Progress string
}

// Change applies op to the picks of one shard that are waiting (neither claimed by a
// replica whose lease runs nor put back by egress; a cancel also takes a recurring message
// in delivery, whose later firings it stops) and, with prog, saves the operation's
// progress: one bulk.lua call. A cancelled message with a source id leaves a tombstone, as
// Cancel does; a moved one gets a new version, and a wake-up when it became the shard's
// earliest. With Config.MinReplicas the call is confirmed by WAIT (ErrNotReplicated). It
// blocks until Redis answered or ctx is done.
func (s *Store) Change(ctx context.Context, shard int, op BulkOp, picks []Pick, prog *Progress) (Changed, error) {
	if err := s.checkShard(shard); err != nil {
		return Changed{}, fmt.Errorf("change: %w", err)
	}
	k := s.keys[shard]
	bound := s.tombMS // cancel: the tombstone TTL; shift and at: the maximum delay
	if op.Kind == BulkShift || op.Kind == BulkDeliverAt {
		bound = op.MaxDelay.Milliseconds()
	}
	args := make([]any, 0, 10+3*len(picks))
	args = append(args, op.Kind, op.value(), bound, k.wake, k.shardID, "", "", "", 0, 0)
	if prog != nil {
		args[5], args[6], args[7], args[8], args[9] = prog.OpID, prog.Over, prog.Next, prog.Counted, prog.Keep.Milliseconds()
	}
	for _, p := range picks {
		want := strconv.FormatInt(p.Version, 10)
		if p.Newer {
			want = ">" + want
		}
		args = append(args, p.ID, want, p.target)
	}
	out, err := s.evalConfirmed(ctx, s.scripts[scriptBulk], []call{{keys: k.bulk, args: args, fence: k.seq}})[0].Slice()
	if err != nil {
		return Changed{}, err
	}
	if len(out) != 3 {
		return Changed{}, fmt.Errorf("bulk.lua: unexpected reply of %d values", len(out))
	}
	var c Changed
	c.N, _ = out[0].(int64)
	c.Newer, _ = out[1].(int64)
	c.Progress, _ = out[2].(string)
	return c, nil
}

// Versions returns the version counter of each of shards (0 for a shard never written),
// in one pipeline. Every entry written later has a larger version: a pass that keeps the
// value as its fence never picks what it moved itself (a moved message gets a new
// version) nor what was parked since. It blocks until Redis answered or ctx is done.
func (s *Store) Versions(ctx context.Context, shards []int) ([]int64, error) {
	p := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(shards))
	for i, sh := range shards {
		if err := s.checkShard(sh); err != nil {
			return nil, fmt.Errorf("versions: %w", err)
		}
		cmds[i] = p.Get(ctx, s.keys[sh].seq)
	}
	_, _ = p.Exec(ctx)
	out := make([]int64, len(shards))
	for i, c := range cmds {
		v, err := c.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("version of shard %d: %w", shards[i], err)
		}
		out[i] = v
	}
	return out, nil
}

// SavedProgress returns the progress Change saved for each of ids in each of shards:
// out[i][j] is ids[i]'s in shards[j], "" where none. One pipeline of an HMGET per shard;
// it blocks until Redis answered or ctx is done.
func (s *Store) SavedProgress(ctx context.Context, ids []string, shards []int) ([][]string, error) {
	p := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(shards))
	for j, sh := range shards {
		if err := s.checkShard(sh); err != nil {
			return nil, fmt.Errorf("progress: %w", err)
		}
		cmds[j] = p.HMGet(ctx, s.keys[sh].b, ids...)
	}
	_, _ = p.Exec(ctx)
	out := make([][]string, len(ids))
	for i := range out {
		out[i] = make([]string, len(shards))
	}
	for j, c := range cmds {
		vals, err := c.Result()
		if err != nil {
			return nil, fmt.Errorf("progress of shard %d: %w", shards[j], err)
		}
		for i, v := range vals {
			out[i][j], _ = v.(string)
		}
	}
	return out, nil
}

// ForgetProgress drops what Change saved for operation id in every shard (one pipeline of
// bulkforget.lua). Errors are not reported: what a failure leaves, Change drops once it is
// older than its Progress.Keep. It blocks until Redis answered or ctx is done.
func (s *Store) ForgetProgress(ctx context.Context, id string) {
	calls := make([]call, len(s.keys))
	for i, k := range s.keys {
		calls[i] = call{keys: []string{k.b, k.bx}, args: []any{id}}
	}
	s.evalPipelined(ctx, s.scripts[scriptBulkForget], calls)
}
