package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/envconf"
)

// Audit log (docs/design.md, "Audit log"): every change an operator makes through the
// message API, the CLI or the console is one entry under an op id, a record of the store's
// audit log (delaystore.Store.AuditAppend, AuditSet, AuditTake, AuditRead): the entry as
// begun (JSON, never changed) and its state, lease, counts and owner. Entries older than
// the retention, and the oldest over the most kept, are dropped when a new one begins.

// AuditConfig bounds the audit log. Its fields are BRIDGE_* variables: package config
// embeds it and parses the env tags; [AuditConfig.Validate] checks the values.
type AuditConfig struct {
	// Retention is how long an entry is kept (and listed), counted from its start.
	Retention time.Duration `env:"AUDIT_RETENTION" envDefault:"720h" envDoc:"how long the audit log keeps an entry (GET /v1/audit, bridge audit)"`
	// MaxEntries is the most entries kept: beyond it the oldest are dropped.
	MaxEntries int `env:"AUDIT_MAX_ENTRIES" envDefault:"100000" envDoc:"most entries the audit log keeps (about 0.5 KB each): beyond it the oldest go (extension)"`
}

// DefaultAuditConfig is the AuditConfig of a Store made without WithAudit: the variables'
// defaults.
func DefaultAuditConfig() AuditConfig {
	return AuditConfig{Retention: 720 * time.Hour, MaxEntries: 100000}
}

// MaxAuditRetention is the longest accepted AuditConfig.Retention (10 years: the expiry
// the scripts compute stays exact in Lua's doubles).
const MaxAuditRetention = 10 * 365 * 24 * time.Hour

// Validate returns every problem of c, naming the variable (without BRIDGE_).
func (c AuditConfig) Validate() envconf.Problems {
	var ps envconf.Problems
	if c.Retention < time.Minute || c.Retention > MaxAuditRetention {
		ps.Add("AUDIT_RETENTION", "%s: must be 1m to %s", c.Retention, MaxAuditRetention)
	}
	if c.MaxEntries < 1 || c.MaxEntries > 100_000_000 {
		ps.Add("AUDIT_MAX_ENTRIES", "%d: must be 1 to 100000000", c.MaxEntries)
	}
	return ps
}

// WithAudit sets the bounds of the audit log (default: DefaultAuditConfig). New checks
// nothing more: pass a validated config.
func WithAudit(c AuditConfig) Option {
	return func(a *Admin) { a.audit = c }
}

// Audit states (AuditEntry.State).
const (
	AuditRunning     = "running"
	AuditDone        = "done"
	AuditInterrupted = "interrupted" // cut off (client gone, replica killed, Redis failed)
)

// opLease is how long a running entry's owner holds it without a renewal; a run renews it
// every opRenew. A replica killed mid-run leaves its entry running until the lease ran
// out: then it is shown interrupted and may be resumed.
const (
	opLease = 10 * time.Second
	opRenew = 3 * time.Second
)

// AuditEntry is one entry of the audit log (docs/contract.md section 10): OpID, At,
// Matched, Changed and State are the store's; the rest is what the change was, as its
// caller gave it at Begin.
type AuditEntry struct {
	OpID string `json:"op_id"`
	At   int64  `json:"at"` // when it began, Redis ms
	// Op is the operation: cancel, reschedule, deliver-now, redrive.
	Op string `json:"op"`
	// Selector picks the messages (bulk: target, due_from, due_to; redrive: reason), as
	// JSON; ID instead names one message.
	Selector json.RawMessage `json:"selector,omitempty"`
	ID       string          `json:"id,omitempty"`
	// OrderingKey is the ordering key of the message ID (extension; "" none).
	OrderingKey string `json:"ordering_key,omitempty"`
	DryRun      bool   `json:"dry_run"`
	Matched     int64  `json:"matched"`
	Changed     int64  `json:"changed"`
	State       string `json:"state"`
	// Actor is who says they made it (X-Delay-Actor; the CLI sends the OS user): a claim
	// of the caller, not an authentication.
	Actor string `json:"actor"`
	// Remote is the caller's address as the API saw it ("cli" for a command run on a host).
	Remote string `json:"remote"`
	// Shift and DeliverAt are a reschedule's values (extensions).
	Shift     string `json:"shift,omitempty"`
	DeliverAt *int64 `json:"deliver_at,omitempty"`
	// Resumable: POST /v1/bulk/resume takes it (a bulk operation by selector or id).
	Resumable bool `json:"resumable,omitempty"`
}

// auditStored is what the :e hash keeps per op id: the entry as begun and, for a resumable
// operation, its spec.
type auditStored struct {
	Entry AuditEntry `json:"entry"`
	Spec  *OpSpec    `json:"spec,omitempty"`
}

// Errors of the audit log and the bulk operations.
var (
	// ErrBadOpID: an op id that this store never hands out (malformed).
	ErrBadOpID = errors.New("bad op id")
	// ErrOpUnknown: no audit entry with that op id (never, or dropped by the retention).
	ErrOpUnknown = errors.New("no such operation")
	// ErrOpLost: another run took the operation over (its lease had run out).
	ErrOpLost = errors.New("operation taken over by another run")
)

// opIDLen is the length of an op id: 16 random bytes in lower-case hex.
const opIDLen = 32

// newOpID returns a fresh random op id.
func newOpID() string {
	var b [opIDLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ValidOpID reports whether id has the form of an op id (32 lower-case hex digits): the
// only op ids the store reads Redis for. An op id is a hash field and a sorted-set member,
// never part of a key name. It is a pure function.
func ValidOpID(id string) bool {
	if len(id) != opIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// AuditRecord is an audit entry being written by its owner: End settles it. Not safe for
// concurrent use.
type AuditRecord struct {
	a     *Admin
	id    string
	owner string
	at    int64
}

// OpID is the entry's op id.
func (r *AuditRecord) OpID() string { return r.id }

// At is when the entry began (Redis ms).
func (r *AuditRecord) At() int64 { return r.at }

// AuditBegin adds e to the audit log as running (its OpID, At, Matched, Changed and State
// are the log's) under a new op id, leased to the returned record for opLease: a caller
// that neither ends nor renews it within that time leaves it interrupted. It blocks until
// Redis answered. The recorder for any change made outside this package (a redrive, a
// DELETE): Begin before the change, End after it.
func (a *Admin) AuditBegin(ctx context.Context, e AuditEntry) (*AuditRecord, error) {
	return a.auditBegin(ctx, e, nil)
}

func (a *Admin) auditBegin(ctx context.Context, e AuditEntry, spec *OpSpec) (*AuditRecord, error) {
	e.OpID, e.At, e.Matched, e.Changed, e.State = "", 0, 0, 0, ""
	e.Resumable = spec != nil
	body, err := json.Marshal(auditStored{Entry: e, Spec: spec})
	if err != nil {
		return nil, fmt.Errorf("audit: encode entry: %w", err)
	}
	r := &AuditRecord{a: a, id: newOpID(), owner: newOpID()}
	r.at, err = a.store.AuditAppend(ctx, r.id, string(body), r.owner, a.lease, a.audit.Retention, a.audit.MaxEntries)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// set writes the entry's state: running (lease renewed for opLease; release: no owner, so
// any run may take it over at once) or done / interrupted, with its counts. ErrOpLost when
// another run holds it.
func (r *AuditRecord) set(ctx context.Context, state string, release bool, matched, changed int64) error {
	after := r.owner
	if release || state != AuditRunning {
		after = ""
	}
	ok, err := r.a.store.AuditSet(ctx, r.id, r.owner, delaystore.AuditState{State: state, Matched: matched, Changed: changed,
		Lease: r.a.lease, Owner: after})
	if err != nil {
		return fmt.Errorf("audit: %s %s: %w", state, r.id, err)
	}
	if !ok {
		return fmt.Errorf("audit: %s %s: %w", state, r.id, ErrOpLost)
	}
	r.owner = after
	return nil
}

// End settles the entry: done with its counts, or interrupted when failed is not nil (the
// change failed or was cut off). It writes even when ctx is done (the request that made
// the change went away: its entry must not stay running), bounded by 5 s. It blocks until
// Redis answered.
func (r *AuditRecord) End(ctx context.Context, matched, changed int64, failed error) error {
	state := AuditDone
	if failed != nil {
		state = AuditInterrupted
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return r.set(ctx, state, true, matched, changed)
}

// Hold keeps the entry running while a change outlasts the lease (a CLI redrive that
// watches for letters refused again): it renews the lease every few seconds (opRenew) in
// a goroutine, counts 0 until End, until the returned stop is called or ctx is done. A
// renewal that fails is tried again at the next tick (meanwhile the entry may show
// interrupted); one refused because another run took the entry over ends the renewals.
// stop waits for the goroutine: call it before End (a record is not safe for concurrent
// use).
func (r *AuditRecord) Hold(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.a.renew)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, r.a.renew)
			err := r.set(rctx, AuditRunning, false, 0, 0)
			rcancel()
			if errors.Is(err, ErrOpLost) {
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// AuditPage is one page of the audit log, newest first; Next is the op id to go on after
// ("" when none is older).
type AuditPage struct {
	Entries []AuditEntry
	Next    string
}

// MaxAuditPage is the most entries one AuditList call reads.
const MaxAuditPage = 1000

// AuditList returns at most limit (1 to MaxAuditPage) entries of the audit log older than
// the entry after (an op id from an earlier page's Next; "" for the newest), none older
// than the retention. A running entry whose lease ran out is interrupted. The counts of a
// bulk operation that is running or interrupted are those of the chunks changed so far
// (countsSoFar). One Redis call, and a pipeline when the page holds such an operation;
// it blocks until Redis answered. An after that is no op id is ErrBadOpID (the API seals
// its cursors, so that never reaches here from a client).
func (a *Admin) AuditList(ctx context.Context, after string, limit int) (AuditPage, error) {
	if after != "" && !ValidOpID(after) {
		return AuditPage{}, ErrBadOpID
	}
	limit = min(max(limit, 1), MaxAuditPage)
	rows, err := a.store.AuditRead(ctx, after, limit, a.audit.Retention)
	if err != nil {
		return AuditPage{}, fmt.Errorf("audit: list: %w", err)
	}
	page := AuditPage{Entries: make([]AuditEntry, 0, len(rows.Rows))}
	for _, row := range rows.Rows {
		var st auditStored
		_ = json.Unmarshal([]byte(row.Entry), &st) // a damaged entry still shows its id and state
		e := st.Entry
		e.OpID, e.At = row.ID, row.At
		e.State, e.Matched, e.Changed = auditState(row, rows.Now)
		page.Entries = append(page.Entries, e)
	}
	if rows.More && len(page.Entries) > 0 {
		page.Next = page.Entries[len(page.Entries)-1].OpID
	}
	if err := a.countsSoFar(ctx, page.Entries); err != nil {
		return AuditPage{}, err
	}
	return page, nil
}

// countsSoFar sets the counts of the entries of resumable operations that are not done
// to what their progress counts (saved by delaystore.Store.Change in the same call as
// each chunk's changes, summed over the shards) when that is more than the entry holds:
// the entry's own counts are written only with a lease renewal (every opRenew) and at the
// end, so a run killed between them left fewer, often 0 (docs/design.md, "Audit log").
// One pipeline of an HMGET per shard, only when the page holds such an entry.
func (a *Admin) countsSoFar(ctx context.Context, entries []AuditEntry) error {
	var ids []string
	var at []int
	for i, e := range entries {
		if e.Resumable && e.State != AuditDone {
			ids = append(ids, e.OpID)
			at = append(at, i)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	saved, err := a.store.SavedProgress(ctx, ids, a.allShards())
	if err != nil {
		return fmt.Errorf("audit: list: %w", err)
	}
	for j, i := range at {
		var matched, changed int64
		for _, raw := range saved[j] {
			if pr, err := parseProgress(raw, 0); err == nil {
				matched += pr.matched
				changed += pr.changed
			}
		}
		e := &entries[i]
		e.Matched, e.Changed = max(e.Matched, matched), max(e.Changed, changed)
	}
	return nil
}

// auditState is a record's state at Redis time now, with its counts: a running entry
// whose lease ran out is interrupted, and so is one whose stored state is unreadable.
func auditState(r delaystore.AuditRow, now int64) (state string, matched, changed int64) {
	switch {
	case r.State == "":
		return AuditInterrupted, 0, 0
	case r.State == AuditRunning && r.Until <= now:
		return AuditInterrupted, r.Matched, r.Changed
	}
	return r.State, r.Matched, r.Changed
}
