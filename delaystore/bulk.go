package delaystore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/contract"
)

// Bulk changes (docs/design.md, "Bulk changes"): scan.lua reads bounded chunks of a
// shard, bulk.lua changes the picked messages that are not in delivery.
const bulkChunk = 500 // members read, and messages changed, per Redis call

// Bulk operations.
const (
	BulkCancel     = "cancel"
	BulkShift      = "shift" // due + BulkOp.Shift
	BulkDeliverAt  = "at"    // due = BulkOp.At
	BulkDeliverNow = "now"   // due = the Redis time
)

// BulkOp is a bulk change: Kind is one of the Bulk* constants.
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

// ErrBadOp: a BulkOp that Bulk cannot apply (an unknown kind, or no MaxDelay where it
// bounds the new due time).
var ErrBadOp = errors.New("bad bulk operation")

// check reports why op cannot be applied, nil when it can.
func (op BulkOp) check() error {
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

// Selector picks parked messages: those whose stored due time lies in [DueFrom, DueTo]
// (unix ms, inclusive; DueTo 0: no upper bound, negative: nothing) and whose target
// ("broker:name") Match accepts (nil: any).
type Selector struct {
	Match func(target string) bool
	// Literals, when given, are substrings every target Match accepts holds in order
	// (glob.Literals of its pattern): Redis skips the entries whose target lacks them.
	Literals       []string
	DueFrom, DueTo int64
	// ID, when set, picks that one message (if the rest of the selector matches it too).
	ID string
}

// BulkCursor is where a bulk change stopped; its String form is what the API hands out.
type BulkCursor struct {
	Shard int
	Pass  string // "z", then "r"
	Score string
	ID    string
	// MaxVersion is the shard's version counter when its pass began: entries written
	// after it (moved by this change, or parked since) are not picked, so a message moved
	// ahead of the cursor is not changed twice.
	MaxVersion int64
}

// BulkResult is what Bulk did: Matched messages the selector picked, Changed of them
// changed (not in delivery, not changed meanwhile); Next is where it stopped when its
// time was up (nil: done).
type BulkResult struct {
	Matched, Changed int
	Next             *BulkCursor
}

// Bulk applies op to the parked messages sel picks, shard by shard, at most bulkChunk
// per Redis call, from the cursor from (nil: the start) until all were seen or budget
// has passed (then Next says where to go on). With dryRun nothing changes. A message in
// delivery (claimed, or put back by egress), or whose new due would lie beyond
// op.MaxDelay, is matched but not changed. An op that check refuses fails at once
// (ErrBadOp). With
// BRIDGE_REDIS_MIN_REPLICAS every change call is confirmed by WAIT; an unconfirmed one
// fails Bulk (ErrNotReplicated) with the result so far, whose Next is that chunk. It
// blocks until done, ctx is done, or a Redis call fails.
func (s *Store) Bulk(ctx context.Context, sel Selector, op BulkOp, dryRun bool, from *BulkCursor, budget time.Duration) (BulkResult, error) {
	if err := op.check(); err != nil {
		return BulkResult{}, err
	}
	if sel.DueTo == 0 {
		sel.DueTo = math.MaxInt64
	}
	if sel.ID != "" {
		return s.bulkOne(ctx, sel, op, dryRun)
	}
	cur := BulkCursor{Pass: "z"}
	if from != nil {
		cur = *from
	}
	var res BulkResult
	deadline := time.Now().Add(budget)
	for cur.Shard < len(s.keys) {
		if err := s.bulkBegin(ctx, &cur); err != nil {
			res.Next = &cur
			return res, err
		}
		next, done, err := s.bulkChunk(ctx, sel, op, dryRun, cur, &res)
		if err != nil {
			res.Next = &cur
			return res, err
		}
		switch {
		case !done:
			cur = next
		case cur.Pass == "z":
			cur = BulkCursor{Shard: cur.Shard, Pass: "r", MaxVersion: cur.MaxVersion}
		default:
			cur = BulkCursor{Shard: cur.Shard + 1, Pass: "z"}
		}
		if cur.Shard < len(s.keys) && time.Now().After(deadline) {
			// The next shard's fence is fixed now: the cursor, even sent twice, never
			// picks what this change moved there.
			res.Next = &cur
			return res, s.bulkBegin(ctx, &cur)
		}
	}
	return res, nil
}

// bulkBegin fixes the fence of a shard's pass that begins at cur (MaxVersion 0): the
// shard's version counter now. Entries written after it are not picked.
func (s *Store) bulkBegin(ctx context.Context, cur *BulkCursor) error {
	if cur.MaxVersion != 0 {
		return nil
	}
	v, err := s.rdb.Get(ctx, s.keys[cur.Shard].seq).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("bulk: shard %d: %w", cur.Shard, err)
	}
	cur.MaxVersion = max(v, 1)
	return nil
}

// bulkOne applies op to the one message sel.ID, when it exists and the selector's target
// and due range match it; as for any bulk change, a message in delivery is matched but not
// changed.
func (s *Store) bulkOne(ctx context.Context, sel Selector, op BulkOp, dryRun bool) (BulkResult, error) {
	m, err := s.Get(ctx, sel.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		return BulkResult{}, nil
	case err != nil:
		return BulkResult{}, fmt.Errorf("bulk: %w", err)
	case m.Due < sel.DueFrom || m.Due > sel.DueTo || (sel.Match != nil && !sel.Match(m.Envelope.Target)):
		return BulkResult{}, nil
	case dryRun:
		return BulkResult{Matched: 1}, nil
	}
	n, _, _, err := s.bulkChange(ctx, m.Shard, op, []any{sel.ID, strconv.FormatInt(m.Version, 10), s.targetKey(m.Shard, m.Envelope.Target)}, nil)
	if err != nil {
		return BulkResult{Matched: 1}, fmt.Errorf("bulk: change %s: %w", sel.ID, err)
	}
	return BulkResult{Matched: 1, Changed: int(n)}, nil
}

// opProgress is the progress bulk.lua saves with a chunk of a resumable operation: the
// op id, the progress the chunk continues (compare-and-set), the position after it and
// how many of its messages the caller counts as matched.
type opProgress struct {
	id, expect, next string
	counted          int
}

// bulkChange runs bulk.lua on shard for the picked (id, version, target) triples (and,
// with prog, saves the operation's progress in the same call), confirmed by WAIT with
// MinReplicas, and returns how many it changed, how many of those were picked by a ">v"
// version (recurring messages newer than the pass) and the progress now. changed is -1
// when the stored progress was not prog.expect: nothing changed.
func (s *Store) bulkChange(ctx context.Context, shard int, op BulkOp, picked []any, prog *opProgress) (changed, newer int64, raw string, err error) {
	k := s.keys[shard]
	bound := s.tombMS // cancel: the tombstone TTL; shift and at: the maximum delay
	if op.Kind == BulkShift || op.Kind == BulkDeliverAt {
		bound = op.MaxDelay.Milliseconds()
	}
	args := []any{op.Kind, opValue(op), bound, k.wake, k.shardID, "", "", "", 0, 0}
	if prog != nil {
		args[5], args[6], args[7], args[8], args[9] = prog.id, prog.expect, prog.next, prog.counted, s.audit.cfg.Retention.Milliseconds()
	}
	args = append(args, picked...)
	out, err := s.evalConfirmed(ctx, s.scripts[scriptBulk], []call{{keys: k.bulk, args: args, fence: k.seq}})[0].Slice()
	if err != nil {
		return 0, 0, "", err
	}
	if len(out) != 3 {
		return 0, 0, "", fmt.Errorf("bulk.lua: unexpected reply of %d values", len(out))
	}
	changed, _ = out[0].(int64)
	newer, _ = out[1].(int64)
	raw, _ = out[2].(string)
	return changed, newer, raw, nil
}

// bulkChunk scans one chunk at cur, changes what matches (unless dryRun) and counts into
// res; it returns the cursor after the chunk and whether the pass is through.
func (s *Store) bulkChunk(ctx context.Context, sel Selector, op BulkOp, dryRun bool, cur BulkCursor, res *BulkResult) (BulkCursor, bool, error) {
	page := s.Scan(ctx, []ScanRequest{scanAt(sel, cur)})[0]
	if page.Err != nil {
		return cur, false, fmt.Errorf("bulk: scan shard %d: %w", cur.Shard, page.Err)
	}
	if page.Again {
		return cur, false, nil // read the chunk again
	}
	picked, lineage, next := pick(page, sel, cur, op.Kind == BulkCancel && !dryRun)
	res.Matched += len(picked)/3 - lineage
	if dryRun || len(picked) == 0 {
		return next, page.Through, nil
	}
	n, newer, _, err := s.bulkChange(ctx, cur.Shard, op, picked, nil)
	if err != nil {
		return cur, false, fmt.Errorf("bulk: change shard %d: %w", cur.Shard, err)
	}
	res.Matched += int(newer)
	res.Changed += int(n)
	return next, page.Through, nil
}

// scanAt is the scan of sel's next chunk at cur.
func scanAt(sel Selector, cur BulkCursor) ScanRequest {
	return ScanRequest{Shard: cur.Shard, Retries: cur.Pass == "r", From: sel.DueFrom, To: sel.DueTo,
		After: Position{Score: cur.Score, ID: cur.ID}, Count: bulkChunk, Literals: sel.Literals}
}

// pick reads a scanned chunk: the (id, version, target) triples that sel matches and the
// cursor after the chunk. Entries newer than the pass (cur.MaxVersion) are left out,
// unless withLineage (a cancel: a recurring message that fired since the pass began has a
// newer version): then they are picked with the version ">MaxVersion", which bulk.lua
// takes only for a recurring message (a message parked since the pass began is left
// alone, as by every bulk change), and counted in lineage.
func pick(page ScanPage, sel Selector, cur BulkCursor, withLineage bool) (picked []any, lineage int, next BulkCursor) {
	next = cur
	next.ID, next.Score = page.Next.ID, page.Next.Score
	for _, e := range page.Entries {
		newer := e.Version > cur.MaxVersion
		if (newer && !withLineage) || e.Due < sel.DueFrom || e.Due > sel.DueTo {
			continue
		}
		if sel.Match != nil && (e.Err != nil || !sel.Match(e.Target)) {
			continue
		}
		want := strconv.FormatInt(e.Version, 10)
		if newer {
			want, lineage = ">"+strconv.FormatInt(cur.MaxVersion, 10), lineage+1
		}
		picked = append(picked, e.ID, want, e.field)
	}
	return picked, lineage, next
}

func opValue(op BulkOp) int64 {
	switch op.Kind {
	case BulkShift:
		ms, _ := contract.AddMillis(0, op.Shift) // never early: a positive sub-ms part rounds up
		return ms
	case BulkDeliverAt:
		return op.At
	}
	return 0
}
