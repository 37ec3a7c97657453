package delaystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Resumable bulk operations (docs/design.md, "Resumable bulk operations"): a bulk change
// keeps its spec (selector, operation, the version fence of every shard when it began) in
// its audit entry and its progress per shard in {P:s}:b, written by bulk.lua in the same
// call as the chunk's changes. Whichever replica runs it next goes on from that progress,
// with that fence: a message it changed has a newer version than the fence and is never
// picked again, nor is one parked after the operation began.

// OpSpec is what a resumable bulk operation does, as stored with its audit entry.
type OpSpec struct {
	Kind     string        `json:"kind"` // a Bulk* constant
	Shift    time.Duration `json:"shift,omitempty"`
	At       int64         `json:"at,omitempty"`
	MaxDelay time.Duration `json:"max_delay,omitempty"`
	// Target is the selector's glob pattern ("" any): the caller compiles it into
	// Selector.Match and Literals again when the operation is resumed.
	Target  string `json:"target,omitempty"`
	DueFrom int64  `json:"due_from,omitempty"`
	DueTo   int64  `json:"due_to,omitempty"` // 0: no upper bound; negative: nothing
	ID      string `json:"id,omitempty"`
	DryRun  bool   `json:"dry_run,omitempty"`
	// Fences are every shard's version counter when the operation began.
	Fences []int64 `json:"fences"`
}

// Op returns the spec's operation.
func (sp OpSpec) Op() BulkOp {
	return BulkOp{Kind: sp.Kind, Shift: sp.Shift, At: sp.At, MaxDelay: sp.MaxDelay}
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
func (s *Store) StartOp(ctx context.Context, e AuditEntry, spec OpSpec) (*Op, error) {
	if err := spec.Op().check(); err != nil {
		return nil, err
	}
	fences, err := s.fences(ctx)
	if err != nil {
		return nil, err
	}
	spec.Fences = fences
	rec, err := s.auditBegin(ctx, e, &spec)
	if err != nil {
		return nil, err
	}
	return &Op{rec: rec, Spec: spec}, nil
}

// fences reads every shard's version counter, in one pipeline.
func (s *Store) fences(ctx context.Context) ([]int64, error) {
	p := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(s.keys))
	for i, k := range s.keys {
		cmds[i] = p.Get(ctx, k.seq)
	}
	_, _ = p.Exec(ctx)
	out := make([]int64, len(s.keys))
	for i, c := range cmds {
		v, err := c.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("bulk operation: fence of shard %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

// ResumeOp takes over the operation id to finish it (Run): unless it is done (*ErrOpDone),
// running under another live lease (*ErrOpBusy), unknown (ErrOpUnknown), no bulk operation
// (ErrNotResumable), or id is malformed (ErrBadOpID, without asking Redis). Of concurrent
// calls for one operation at most one succeeds. It blocks until Redis answered.
func (s *Store) ResumeOp(ctx context.Context, id string) (*Op, error) {
	if !ValidOpID(id) {
		return nil, ErrBadOpID
	}
	owner := newOpID()
	out, err := s.scripts[scriptAudit].Run(ctx, s.rdb, s.audit.keys, "claim", id, owner, s.audit.lease.Milliseconds()).Slice()
	if err != nil {
		return nil, fmt.Errorf("bulk operation %s: claim: %w", id, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bulk operation %s: claim: an empty reply", id)
	}
	word, _ := out[0].(string)
	num := func(i int) int64 {
		if i < len(out) {
			n, _ := out[i].(int64)
			return n
		}
		return 0
	}
	str := func(i int) string {
		if i < len(out) {
			v, _ := out[i].(string)
			return v
		}
		return ""
	}
	switch word {
	case "missing":
		return nil, ErrOpUnknown
	case "done":
		body := str(3)
		if !strings.Contains(body, `"spec":`) {
			return nil, fmt.Errorf("bulk operation %s: %w", id, ErrNotResumable)
		}
		return nil, &ErrOpDone{Matched: num(1), Changed: num(2)}
	case "busy":
		return nil, &ErrOpBusy{Left: time.Duration(num(1)) * time.Millisecond}
	case "ok":
	default:
		return nil, fmt.Errorf("bulk operation %s: claim: unexpected reply %v", id, out)
	}
	body := str(3)
	var st auditStored
	rec := &AuditRecord{s: s, id: id, owner: owner}
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Spec == nil || len(st.Spec.Fences) != len(s.keys) {
		// Give it back as it was: interrupted, no owner.
		_ = rec.set(ctx, AuditInterrupted, true, num(1), num(2))
		return nil, fmt.Errorf("bulk operation %s: %w", id, ErrNotResumable)
	}
	rec.at = st.Entry.At
	return &Op{rec: rec, Spec: *st.Spec, Matched: num(1), Changed: num(2)}, nil
}

// OpResult is what one Run did: Matched and Changed in this run; Done when the operation
// is finished (else the time was up: run it again, or resume it, to go on).
type OpResult struct {
	Matched, Changed int64
	Done             bool
}

// progress is a shard's progress: '<matched>,<changed>,<pass>,<score>,<id>' (bulk.lua).
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
		return p, fmt.Errorf("%w: progress %q", ErrCorrupt, raw)
	}
	var err1, err2 error
	p.matched, err1 = strconv.ParseInt(f[0], 10, 64)
	p.changed, err2 = strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || (f[2] != "z" && f[2] != "r" && f[2] != "d") {
		return p, fmt.Errorf("%w: progress %q", ErrCorrupt, raw)
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
		o.rec.s.forget(ctx, o.ID())
		return res, nil
	}
	return res, o.rec.set(ctx, AuditRunning, true, o.Matched, o.Changed)
}

// run is Run without settling the entry.
func (o *Op) run(ctx context.Context, sel Selector, budget time.Duration) (OpResult, error) {
	s := o.rec.s
	var res OpResult
	sel = o.selector(sel)
	shards := make([]int, 0, len(s.keys))
	if sel.ID != "" {
		shards = append(shards, s.ShardOf(sel.ID))
	} else {
		for i := range s.keys {
			shards = append(shards, i)
		}
	}
	progs, err := s.readProgress(ctx, o.ID(), shards, o.Spec.Fences)
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
	deadline, renew := time.Now().Add(budget), time.Now().Add(s.audit.renew)
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
				renew = time.Now().Add(s.audit.renew)
			}
			if p, err = o.step(ctx, sel, sh, p, &res); err != nil {
				return res, err
			}
		}
	}
	res.Done = true
	return res, nil
}

// selector is sel with the spec's due range and id (DueTo 0: no upper bound).
func (o *Op) selector(sel Selector) Selector {
	sel.DueFrom, sel.DueTo, sel.ID = o.Spec.DueFrom, o.Spec.DueTo, o.Spec.ID
	if sel.DueTo == 0 {
		sel.DueTo = math.MaxInt64
	}
	return sel
}

// readProgress reads the progress of the operation in shards, in one pipeline.
func (s *Store) readProgress(ctx context.Context, id string, shards []int, fences []int64) ([]progress, error) {
	p := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(shards))
	for i, sh := range shards {
		cmds[i] = p.HGet(ctx, s.keys[sh].b, id)
	}
	_, _ = p.Exec(ctx)
	out := make([]progress, len(shards))
	for i, c := range cmds {
		raw, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("bulk operation %s: progress of shard %d: %w", id, shards[i], err)
		}
		if out[i], err = parseProgress(raw, fences[shards[i]]); err != nil {
			return nil, fmt.Errorf("bulk operation %s: shard %d: %w", id, shards[i], err)
		}
	}
	return out, nil
}

// step does one chunk of shard sh from p and returns the progress after it; sel is
// o.selector's.
func (o *Op) step(ctx context.Context, sel Selector, sh int, p progress, res *OpResult) (progress, error) {
	s := o.rec.s
	var picked []any
	var counted int
	next := p.cur
	if sel.ID != "" {
		m, err := s.Get(ctx, sel.ID)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return p, fmt.Errorf("bulk operation %s: %w", o.ID(), err)
		case m.Version <= p.cur.MaxVersion && m.Due >= sel.DueFrom && m.Due <= sel.DueTo &&
			(sel.Match == nil || sel.Match(m.Envelope.Target)):
			counted = 1
			if !o.Spec.DryRun {
				picked = []any{sel.ID, strconv.FormatInt(m.Version, 10), s.targetKey(m.Shard, m.Envelope.Target)}
			}
		}
		next.Pass = "d"
	} else {
		page := s.Scan(ctx, []ScanRequest{scanAt(sel, BulkCursor{Shard: sh, Pass: p.cur.Pass, Score: p.cur.Score, ID: p.cur.ID})})[0]
		if page.Err != nil {
			return p, fmt.Errorf("bulk operation %s: scan shard %d: %w", o.ID(), sh, page.Err)
		}
		if page.Again {
			return p, nil // read the chunk again
		}
		var lineage int
		picked, lineage, next = pick(page, sel, p.cur, o.Spec.Kind == BulkCancel && !o.Spec.DryRun)
		counted = len(picked)/3 - lineage
		if o.Spec.DryRun {
			picked = nil
		}
		switch {
		case !page.Through:
		case p.cur.Pass == "z":
			next = BulkCursor{Pass: "r", MaxVersion: p.cur.MaxVersion}
		default:
			next = BulkCursor{Pass: "d", MaxVersion: p.cur.MaxVersion}
		}
	}
	pos := next.Pass + "," + next.Score + "," + next.ID
	n, newer, raw, err := s.bulkChange(ctx, sh, o.Spec.Op(), picked, &opProgress{id: o.ID(), expect: p.raw, next: pos, counted: counted})
	if err != nil {
		return p, fmt.Errorf("bulk operation %s: change shard %d: %w", o.ID(), sh, err)
	}
	if n < 0 {
		return p, fmt.Errorf("bulk operation %s: shard %d: %w", o.ID(), sh, ErrOpLost)
	}
	np, err := parseProgress(raw, p.cur.MaxVersion)
	if err != nil {
		return p, err
	}
	res.Matched += int64(counted) + newer
	res.Changed += n
	return np, nil
}

// forget drops the progress of a finished operation in every shard (one pipeline). What a
// failure leaves is dropped by bulk.lua once it is older than the retention.
func (s *Store) forget(ctx context.Context, id string) {
	calls := make([]call, len(s.keys))
	for i, k := range s.keys {
		calls[i] = call{keys: []string{k.b, k.bx}, args: []any{id}}
	}
	s.evalPipelined(ctx, s.scripts[scriptBulkForget], calls)
}
