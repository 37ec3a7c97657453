package admin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// Bulk changes (docs/design.md, "Bulk changes"): delaystore.Store.Scan reads bounded
// chunks of a shard, delaystore.Store.Change changes the picked messages that are not in
// delivery.
const bulkChunk = 500 // members read, and messages changed, per Redis call

// Selector picks parked messages: those whose stored due time lies in [DueFrom, DueTo]
// (unix ms, inclusive; DueTo 0: no upper bound, negative: nothing) and whose target
// ("broker:name") Match accepts (nil: any).
type Selector struct {
	Match func(target string) bool
	// Literals, when given, are substrings every target Match accepts holds in order
	// (glob.Literals of its pattern): Redis skips the entries whose target lacks them.
	Literals       []string
	DueFrom, DueTo int64
	// ID, when set, picks that one message (if the rest of the selector matches it too),
	// and OrderingKey is its ordering key ("" a message without key): a keyed message is
	// named by both (docs/design.md "Ordering keys").
	ID, OrderingKey string
}

// BulkCursor is where a bulk change stopped.
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
// op.MaxDelay, is matched but not changed. An op that Check refuses fails at once
// (delaystore.ErrBadOp). With BRIDGE_REDIS_MIN_REPLICAS every change call is confirmed by
// WAIT; an unconfirmed one fails Bulk (delaystore.ErrNotReplicated) with the result so
// far, whose Next is that chunk. Bulk keeps no audit entry and cannot be resumed by
// another replica: the message API runs every bulk change as an Op (StartOp). It blocks
// until done, ctx is done, or a Redis call fails.
func (a *Admin) Bulk(ctx context.Context, sel Selector, op delaystore.BulkOp, dryRun bool, from *BulkCursor, budget time.Duration) (BulkResult, error) {
	if err := op.Check(); err != nil {
		return BulkResult{}, err
	}
	if sel.DueTo == 0 {
		sel.DueTo = math.MaxInt64
	}
	if sel.ID != "" {
		return a.bulkOne(ctx, sel, op, dryRun)
	}
	cur := BulkCursor{Pass: "z"}
	if from != nil {
		cur = *from
	}
	var res BulkResult
	deadline := time.Now().Add(budget)
	for cur.Shard < a.store.Shards() {
		if err := a.bulkBegin(ctx, &cur); err != nil {
			res.Next = &cur
			return res, err
		}
		next, done, err := a.bulkChunk(ctx, sel, op, dryRun, cur, &res)
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
		if cur.Shard < a.store.Shards() && time.Now().After(deadline) {
			// The next shard's fence is fixed now: the cursor, even sent twice, never
			// picks what this change moved there.
			res.Next = &cur
			return res, a.bulkBegin(ctx, &cur)
		}
	}
	return res, nil
}

// bulkBegin fixes the fence of a shard's pass that begins at cur (MaxVersion 0): the
// shard's version counter now. Entries written after it are not picked.
func (a *Admin) bulkBegin(ctx context.Context, cur *BulkCursor) error {
	if cur.MaxVersion != 0 {
		return nil
	}
	v, err := a.store.Versions(ctx, []int{cur.Shard})
	if err != nil {
		return fmt.Errorf("bulk: %w", err)
	}
	cur.MaxVersion = max(v[0], 1)
	return nil
}

// bulkOne applies op to the one message sel.ID of key sel.OrderingKey, when it exists and
// the selector's target and due range match it; as for any bulk change, a message in delivery is matched but not
// changed.
func (a *Admin) bulkOne(ctx context.Context, sel Selector, op delaystore.BulkOp, dryRun bool) (BulkResult, error) {
	m, err := a.store.GetKey(ctx, sel.ID, sel.OrderingKey)
	switch {
	case errors.Is(err, delaystore.ErrNotFound) || (err == nil && m.Envelope.OrderingKey != sel.OrderingKey):
		return BulkResult{}, nil
	case err != nil:
		return BulkResult{}, fmt.Errorf("bulk: %w", err)
	case m.Due < sel.DueFrom || m.Due > sel.DueTo || (sel.Match != nil && !sel.Match(m.Envelope.Target)):
		return BulkResult{}, nil
	case dryRun:
		return BulkResult{Matched: 1}, nil
	}
	c, err := a.store.Change(ctx, m.Shard, op, []delaystore.Pick{a.store.PickOf(m)}, nil)
	if err != nil {
		return BulkResult{Matched: 1}, fmt.Errorf("bulk: change %s: %w", sel.ID, err)
	}
	return BulkResult{Matched: 1, Changed: int(c.N)}, nil
}

// bulkChunk scans one chunk at cur, changes what matches (unless dryRun) and counts into
// res; it returns the cursor after the chunk and whether the pass is through.
func (a *Admin) bulkChunk(ctx context.Context, sel Selector, op delaystore.BulkOp, dryRun bool, cur BulkCursor, res *BulkResult) (BulkCursor, bool, error) {
	page := a.store.Scan(ctx, []delaystore.ScanRequest{scanAt(sel, cur)})[0]
	if page.Err != nil {
		return cur, false, fmt.Errorf("bulk: scan shard %d: %w", cur.Shard, page.Err)
	}
	if page.Again {
		return cur, false, nil // read the chunk again
	}
	picks, lineage, next := pick(page, sel, cur, op.Kind == delaystore.BulkCancel && !dryRun)
	res.Matched += len(picks) - lineage
	if dryRun || len(picks) == 0 {
		return next, page.Through, nil
	}
	c, err := a.store.Change(ctx, cur.Shard, op, picks, nil)
	if err != nil {
		return cur, false, fmt.Errorf("bulk: change shard %d: %w", cur.Shard, err)
	}
	res.Matched += int(c.Newer)
	res.Changed += int(c.N)
	return next, page.Through, nil
}

// scanAt is the scan of sel's chunk of shard cur.Shard at cur.
func scanAt(sel Selector, cur BulkCursor) delaystore.ScanRequest {
	return delaystore.ScanRequest{Shard: cur.Shard, Retries: cur.Pass == "r", From: sel.DueFrom, To: sel.DueTo,
		After: delaystore.Position{Score: cur.Score, ID: cur.ID}, Count: bulkChunk, Literals: sel.Literals}
}

// pick reads a scanned chunk: the messages that sel matches and the cursor after the
// chunk. Entries newer than the pass (cur.MaxVersion) are left out, unless withLineage (a
// cancel: a recurring message that fired since the pass began has a newer version): then
// they are picked as Newer than the fence, which Change takes only for a recurring message
// (a message parked since the pass began is left alone, as by every bulk change), and
// counted in lineage.
func pick(page delaystore.ScanPage, sel Selector, cur BulkCursor, withLineage bool) (picks []delaystore.Pick, lineage int, next BulkCursor) {
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
		p := e.Pick()
		if newer {
			p.Version, p.Newer, lineage = cur.MaxVersion, true, lineage+1
		}
		picks = append(picks, p)
	}
	return picks, lineage, next
}
