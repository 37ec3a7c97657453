package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// Resumable bulk operations (docs/design.md, "Resumable bulk operations"): a bulk change
// keeps its spec (selector, operation, the version fence of every shard when it began) in
// its audit entry and its progress per shard in the store (delaystore.Store.Change saves
// it in the same call as the chunk's changes). Whichever replica runs it next goes on
// from that progress, with that fence: a message it changed has a newer version than the
// fence and is never picked again, nor is one parked after the operation began.

// OpSpec is what a resumable bulk operation does, as stored with its audit entry.
type OpSpec struct {
	Kind     string        `json:"kind"` // a delaystore.Bulk* constant
	Shift    time.Duration `json:"shift,omitempty"`
	At       int64         `json:"at,omitempty"`
	MaxDelay time.Duration `json:"max_delay,omitempty"`
	// Target is the selector's glob pattern ("" any): the caller compiles it into
	// Selector.Match and Literals again when the operation is resumed.
	Target  string `json:"target,omitempty"`
	DueFrom int64  `json:"due_from,omitempty"`
	DueTo   int64  `json:"due_to,omitempty"` // 0: no upper bound; negative: nothing
	ID      string `json:"id,omitempty"`
	// OrderingKey is the ordering key of the message ID ("" none).
	OrderingKey string `json:"ordering_key,omitempty"`
	DryRun      bool   `json:"dry_run,omitempty"`
	// Fences are every shard's version counter when the operation began.
	Fences []int64 `json:"fences"`
}

// Op returns the spec's operation.
func (sp OpSpec) Op() delaystore.BulkOp {
	return delaystore.BulkOp{Kind: sp.Kind, Shift: sp.Shift, At: sp.At, MaxDelay: sp.MaxDelay}
}

// Op is a resumable bulk operation held by this run (StartOp, ResumeOp). Not safe for
// concurrent use.
type Op struct {
	rec  *AuditRecord
	Spec OpSpec
	// Matched and Changed are the operation's totals so far (every run).
	Matched, Changed int64
}

// ID is the operation's op id.
func (o *Op) ID() string { return o.rec.id }

// ErrOpBusy: the operation is running in another request or replica; its lease runs out
// in Left.
type ErrOpBusy struct{ Left time.Duration }

func (e *ErrOpBusy) Error() string {
	return fmt.Sprintf("the operation is running elsewhere (its lease runs out in %s)", e.Left)
}

// ErrOpDone: the operation is finished; its totals.
type ErrOpDone struct{ Matched, Changed int64 }

func (e *ErrOpDone) Error() string {
	return fmt.Sprintf("the operation is done (matched %d, changed %d)", e.Matched, e.Changed)
}

// ErrNotResumable: the op id names an audit entry that is no bulk operation (a single
// DELETE, a redrive).
var ErrNotResumable = errors.New("not a resumable bulk operation")

// StartOp begins a resumable bulk operation: it reads every shard's version counter (the
// fence), then adds the audit entry e (its Resumable set) with spec, held by the returned
// Op. spec.Fences is set here. Run it next. It blocks until Redis answered.
func (a *Admin) StartOp(ctx context.Context, e AuditEntry, spec OpSpec) (*Op, error) {
	if err := spec.Op().Check(); err != nil {
		return nil, err
	}
	fences, err := a.store.Versions(ctx, a.allShards())
	if err != nil {
		return nil, fmt.Errorf("bulk operation: fence: %w", err)
	}
	spec.Fences = fences
	rec, err := a.auditBegin(ctx, e, &spec)
	if err != nil {
		return nil, err
	}
	return &Op{rec: rec, Spec: spec}, nil
}

// ResumeOp takes over the operation id to finish it (Run): unless it is done (*ErrOpDone),
// running under another live lease (*ErrOpBusy), unknown (ErrOpUnknown), no bulk operation
// (ErrNotResumable), or id is malformed (ErrBadOpID, without asking Redis). Of concurrent
// calls for one operation at most one succeeds. It blocks until Redis answered.
func (a *Admin) ResumeOp(ctx context.Context, id string) (*Op, error) {
	if !ValidOpID(id) {
		return nil, ErrBadOpID
	}
	owner := newOpID()
	t, err := a.store.AuditTake(ctx, id, owner, a.lease)
	switch {
	case err != nil:
		return nil, fmt.Errorf("bulk operation %s: claim: %w", id, err)
	case t.Missing:
		return nil, ErrOpUnknown
	case t.Done && !strings.Contains(t.Entry, `"spec":`):
		return nil, fmt.Errorf("bulk operation %s: %w", id, ErrNotResumable)
	case t.Done:
		return nil, &ErrOpDone{Matched: t.Matched, Changed: t.Changed}
	case t.Busy:
		return nil, &ErrOpBusy{Left: t.Left}
	}
	var st auditStored
	rec := &AuditRecord{a: a, id: id, owner: owner}
	if err := json.Unmarshal([]byte(t.Entry), &st); err != nil || st.Spec == nil || len(st.Spec.Fences) != a.store.Shards() {
		// Give it back as it was: interrupted, no owner.
		_ = rec.set(ctx, AuditInterrupted, true, t.Matched, t.Changed)
		return nil, fmt.Errorf("bulk operation %s: %w", id, ErrNotResumable)
	}
	rec.at = st.Entry.At
	return &Op{rec: rec, Spec: *st.Spec, Matched: t.Matched, Changed: t.Changed}, nil
}

// OpResult is what one Run did: Matched and Changed in this run; Done when the operation
// is finished (else the time was up: run it again, or resume it, to go on).
type OpResult struct {
	Matched, Changed int64
	Done             bool
}

// progress is a shard's progress: '<matched>,<changed>,<pass>,<score>,<id>' (what
// delaystore.Store.Change saves: the counts, then the position this package gave it).
type progress struct {
	raw              string // as stored ('' none yet)
	matched, changed int64
	cur              BulkCursor
	done             bool
}

func parseProgress(raw string, fence int64) (progress, error) {
	p := progress{raw: raw, cur: BulkCursor{Pass: "z", MaxVersion: fence}}
	if raw == "" {
		return p, nil
	}
	f := strings.SplitN(raw, ",", 5)
	if len(f) != 5 {
		return p, fmt.Errorf("%w: progress %q", delaystore.ErrCorrupt, raw)
	}
	var err1, err2 error
	p.matched, err1 = strconv.ParseInt(f[0], 10, 64)
	p.changed, err2 = strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || (f[2] != "z" && f[2] != "r" && f[2] != "d") {
		return p, fmt.Errorf("%w: progress %q", delaystore.ErrCorrupt, raw)
	}
	p.done = f[2] == "d"
	p.cur.Pass, p.cur.Score, p.cur.ID = f[2], f[3], f[4]
	return p, nil
}

// Run works on the operation with sel (the spec's selector, its Match and Literals
// compiled by the caller) for at most budget, shard by shard from where its progress
// says, at most bulkChunk messages per Redis call, each call saving the progress of the
// changes it made. At the end it settles the audit entry: done (and drops the progress),
// still running but released when the time was up (any run may go on at once, and it is
// shown interrupted once its lease ran out), interrupted when a Redis call failed or ctx
// was done (the error is returned). With MinReplicas each change call is confirmed by
// WAIT. It blocks until then.
func (o *Op) Run(ctx context.Context, sel Selector, budget time.Duration) (OpResult, error) {
	res, err := o.run(ctx, sel, budget)
	switch {
	case err != nil:
		if errors.Is(err, ErrOpLost) {
			return res, err
		}
		_ = o.rec.End(ctx, o.Matched, o.Changed, err)
		return res, err
	case res.Done:
		if err := o.rec.End(ctx, o.Matched, o.Changed, nil); err != nil {
			return res, err
		}
		o.rec.a.store.ForgetProgress(ctx, o.ID())
		return res, nil
	}
	return res, o.rec.set(ctx, AuditRunning, true, o.Matched, o.Changed)
}

// run is Run without settling the entry.
func (o *Op) run(ctx context.Context, sel Selector, budget time.Duration) (OpResult, error) {
	a := o.rec.a
	var res OpResult
	sel = o.selector(sel)
	shards := a.allShards()
	if sel.ID != "" {
		shards = []int{a.store.ShardOfMessage(sel.ID, sel.OrderingKey)}
	}
	progs, err := o.readProgress(ctx, shards)
	if err != nil {
		return res, err
	}
	// The totals are what the progress counts (a killed run's chunks included), plus
	// this run's chunks as they go.
	o.Matched, o.Changed = 0, 0
	for _, p := range progs {
		o.Matched += p.matched
		o.Changed += p.changed
	}
	defer func() { o.Matched, o.Changed = o.Matched+res.Matched, o.Changed+res.Changed }()
	deadline, renew := time.Now().Add(budget), time.Now().Add(a.renew)
	stepped := false // at least one chunk per run: every run makes progress
	for i, sh := range shards {
		p := progs[i]
		for !p.done {
			if stepped && time.Now().After(deadline) {
				return res, nil
			}
			stepped = true
			if time.Now().After(renew) {
				if err := o.rec.set(ctx, AuditRunning, false, o.Matched+res.Matched, o.Changed+res.Changed); err != nil {
					return res, err
				}
				renew = time.Now().Add(a.renew)
			}
			if p, err = o.step(ctx, sel, sh, p, &res); err != nil {
				return res, err
			}
		}
	}
	res.Done = true
	return res, nil
}

// selector is sel with the spec's due range, id and ordering key (DueTo 0: no upper bound).
func (o *Op) selector(sel Selector) Selector {
	sel.DueFrom, sel.DueTo, sel.ID, sel.OrderingKey = o.Spec.DueFrom, o.Spec.DueTo, o.Spec.ID, o.Spec.OrderingKey
	if sel.DueTo == 0 {
		sel.DueTo = math.MaxInt64
	}
	return sel
}

// readProgress reads the progress of the operation in shards, in one pipeline.
func (o *Op) readProgress(ctx context.Context, shards []int) ([]progress, error) {
	saved, err := o.rec.a.store.SavedProgress(ctx, []string{o.ID()}, shards)
	if err != nil {
		return nil, fmt.Errorf("bulk operation %s: %w", o.ID(), err)
	}
	out := make([]progress, len(shards))
	for i, raw := range saved[0] {
		if out[i], err = parseProgress(raw, o.Spec.Fences[shards[i]]); err != nil {
			return nil, fmt.Errorf("bulk operation %s: shard %d: %w", o.ID(), shards[i], err)
		}
	}
	return out, nil
}

// chunk is what one step changes: the picks (none in a dry run), how many of the chunk's
// messages it counts as matched, and where the shard's progress goes on after it; again
// when the chunk is to be read again (the shard's names moved).
type chunk struct {
	picks   []delaystore.Pick
	counted int
	next    BulkCursor
	again   bool
}

// step does one chunk of shard sh from p and returns the progress after it; sel is
// o.selector's.
func (o *Op) step(ctx context.Context, sel Selector, sh int, p progress, res *OpResult) (progress, error) {
	var ch chunk
	var err error
	if sel.ID != "" {
		ch, err = o.chunkOne(ctx, sel, p)
	} else {
		ch, err = o.chunkAt(ctx, sel, sh, p)
	}
	if err != nil || ch.again {
		return p, err
	}
	return o.change(ctx, sh, p, ch, res)
}

// chunkOne is the one chunk of an operation on one message, sel.ID of key
// sel.OrderingKey: picked when it exists, is no newer than the fence and the selector
// matches it.
func (o *Op) chunkOne(ctx context.Context, sel Selector, p progress) (chunk, error) {
	ch := chunk{next: p.cur}
	ch.next.Pass = "d"
	m, err := o.rec.a.store.GetKey(ctx, sel.ID, sel.OrderingKey)
	switch {
	case errors.Is(err, delaystore.ErrNotFound):
	case err != nil:
		return ch, fmt.Errorf("bulk operation %s: %w", o.ID(), err)
	case m.Envelope.OrderingKey == sel.OrderingKey && m.Version <= p.cur.MaxVersion && m.Due >= sel.DueFrom && m.Due <= sel.DueTo &&
		(sel.Match == nil || sel.Match(m.Envelope.Target)):
		ch.counted = 1
		if !o.Spec.DryRun {
			ch.picks = []delaystore.Pick{o.rec.a.store.PickOf(m)}
		}
	}
	return ch, nil
}

// chunkAt is the chunk of shard sh at p: the matches of one scan, and the next pass when
// the scan is through (z, then r, then d: done).
func (o *Op) chunkAt(ctx context.Context, sel Selector, sh int, p progress) (chunk, error) {
	at := p.cur
	at.Shard = sh
	page := o.rec.a.store.Scan(ctx, []delaystore.ScanRequest{scanAt(sel, at)})[0]
	if page.Err != nil {
		return chunk{}, fmt.Errorf("bulk operation %s: scan shard %d: %w", o.ID(), sh, page.Err)
	}
	if page.Again {
		return chunk{again: true}, nil
	}
	picks, lineage, next := pick(page, sel, p.cur, o.Spec.Kind == delaystore.BulkCancel && !o.Spec.DryRun)
	ch := chunk{picks: picks, counted: len(picks) - lineage, next: next}
	if o.Spec.DryRun {
		ch.picks = nil
	}
	switch {
	case !page.Through:
	case p.cur.Pass == "z":
		ch.next = BulkCursor{Pass: "r", MaxVersion: p.cur.MaxVersion}
	default:
		ch.next = BulkCursor{Pass: "d", MaxVersion: p.cur.MaxVersion}
	}
	return ch, nil
}

// change applies the chunk's picks to shard sh and saves the progress after it in the
// same call, over p: ErrOpLost when another run went on meanwhile (nothing changed).
func (o *Op) change(ctx context.Context, sh int, p progress, ch chunk, res *OpResult) (progress, error) {
	a := o.rec.a
	save := &delaystore.Progress{OpID: o.ID(), Over: p.raw, Next: ch.next.Pass + "," + ch.next.Score + "," + ch.next.ID,
		Counted: ch.counted, Keep: a.audit.Retention}
	c, err := a.store.Change(ctx, sh, o.Spec.Op(), ch.picks, save)
	if err != nil {
		return p, fmt.Errorf("bulk operation %s: change shard %d: %w", o.ID(), sh, err)
	}
	if c.N < 0 {
		return p, fmt.Errorf("bulk operation %s: shard %d: %w", o.ID(), sh, ErrOpLost)
	}
	np, err := parseProgress(c.Progress, p.cur.MaxVersion)
	if err != nil {
		return p, err
	}
	res.Matched += int64(ch.counted) + c.Newer
	res.Changed += c.N
	return np, nil
}
