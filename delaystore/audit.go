package delaystore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/envconf"
)

// Audit log (docs/design.md, "Audit log"): every change an operator makes through the
// message API, the CLI or the console is one entry under an op id, kept in Redis under one
// hash tag, {P:audit}: :z (op id -> start, Redis ms), :e (op id -> the entry as begun,
// JSON, never changed) and :s (op id -> state, lease, counts, owner). audit.lua writes
// them, auditlist.lua reads a page. Entries older than the retention, and the oldest over
// the most kept, are dropped when a new one begins.

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
	return func(s *Store) {
		lease, renew := s.audit.lease, s.audit.renew
		s.audit = newAuditLog(s.audit.prefix, c)
		s.audit.lease, s.audit.renew = lease, renew
	}
}

// auditLog is a Store's audit log keys and bounds.
type auditLog struct {
	prefix string
	keys   []string // {P:audit}:z, :e, :s
	cfg    AuditConfig
	// lease and renew are opLease and opRenew (tests shorten them).
	lease, renew time.Duration
}

func newAuditLog(p string, c AuditConfig) auditLog {
	tag := "{" + p + ":audit}"
	return auditLog{prefix: p, keys: []string{tag + ":z", tag + ":e", tag + ":s"}, cfg: c, lease: opLease, renew: opRenew}
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
	DryRun   bool            `json:"dry_run"`
	Matched  int64           `json:"matched"`
	Changed  int64           `json:"changed"`
	State    string          `json:"state"`
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
	s     *Store
	id    string
	owner string
	at    int64
}

// OpID is the entry's op id.
func (r *AuditRecord) OpID() string { return r.id }

// At is when the entry began (Redis ms).
func (r *AuditRecord) At() int64 { return r.at }

// AuditBegin adds e to the audit log as running (its OpID, At, Matched, Changed and State
// are the store's) under a new op id, leased to the returned record for opLease: a caller
// that neither ends nor renews it within that time leaves it interrupted. It blocks until
// Redis answered. The lead's recorder for any change outside this package (redrive):
// Begin before the change, End after it.
func (s *Store) AuditBegin(ctx context.Context, e AuditEntry) (*AuditRecord, error) {
	return s.auditBegin(ctx, e, nil)
}

func (s *Store) auditBegin(ctx context.Context, e AuditEntry, spec *OpSpec) (*AuditRecord, error) {
	e.OpID, e.At, e.Matched, e.Changed, e.State = "", 0, 0, 0, ""
	e.Resumable = spec != nil
	body, err := json.Marshal(auditStored{Entry: e, Spec: spec})
	if err != nil {
		return nil, fmt.Errorf("audit: encode entry: %w", err)
	}
	r := &AuditRecord{s: s, id: newOpID(), owner: newOpID()}
	a := s.audit
	r.at, err = s.scripts[scriptAudit].Run(ctx, s.rdb, a.keys, "begin", r.id, string(body), r.owner,
		a.lease.Milliseconds(), a.cfg.Retention.Milliseconds(), a.cfg.MaxEntries).Int64()
	if err != nil {
		return nil, fmt.Errorf("audit: begin: %w", err)
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
	ok, err := r.s.scripts[scriptAudit].Run(ctx, r.s.rdb, r.s.audit.keys, "set", r.id, r.owner, state,
		r.s.audit.lease.Milliseconds(), after, matched, changed).Int64()
	if err != nil {
		return fmt.Errorf("audit: %s %s: %w", state, r.id, err)
	}
	if ok != 1 {
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
		t := time.NewTicker(r.s.audit.renew)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, r.s.audit.renew)
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
func (s *Store) AuditList(ctx context.Context, after string, limit int) (AuditPage, error) {
	if after != "" && !ValidOpID(after) {
		return AuditPage{}, ErrBadOpID
	}
	limit = min(max(limit, 1), MaxAuditPage)
	out, err := s.scripts[scriptAuditList].Run(ctx, s.rdb, s.audit.keys, after, limit, s.audit.cfg.Retention.Milliseconds()).Slice()
	if err != nil {
		return AuditPage{}, fmt.Errorf("audit: list: %w", err)
	}
	if len(out) < 2 || (len(out)-2)%4 != 0 {
		return AuditPage{}, fmt.Errorf("audit: list: unexpected reply of %d values", len(out))
	}
	now, _ := out[0].(int64)
	more, _ := out[1].(int64)
	page := AuditPage{Entries: make([]AuditEntry, 0, (len(out)-2)/4)}
	for i := 2; i < len(out); i += 4 {
		id, _ := out[i].(string)
		at, _ := out[i+1].(string)
		body, _ := out[i+2].(string)
		state, _ := out[i+3].(string)
		var st auditStored
		_ = json.Unmarshal([]byte(body), &st) // a damaged entry still shows its id and state
		e := st.Entry
		e.OpID = id
		e.At, _ = strconv.ParseInt(at, 10, 64)
		e.State, e.Matched, e.Changed = parseAuditState(state, now)
		page.Entries = append(page.Entries, e)
	}
	if more == 1 && len(page.Entries) > 0 {
		page.Next = page.Entries[len(page.Entries)-1].OpID
	}
	if err := s.countsSoFar(ctx, page.Entries); err != nil {
		return AuditPage{}, err
	}
	return page, nil
}

// countsSoFar sets the counts of the entries of resumable operations that are not done
// to what their progress counts ({P:s}:b, written by bulk.lua in the same call as each
// chunk's changes, summed over the shards) when that is more than the entry holds: the
// entry's own counts are written only with a lease renewal (every opRenew) and at the
// end, so a run killed between them left fewer, often 0 (docs/design.md, "Audit log").
// One pipeline of an HMGET per shard, only when the page holds such an entry.
func (s *Store) countsSoFar(ctx context.Context, entries []AuditEntry) error {
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
	p := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(s.keys))
	for sh, k := range s.keys {
		cmds[sh] = p.HMGet(ctx, k.b, ids...)
	}
	_, _ = p.Exec(ctx)
	matched, changed := make([]int64, len(ids)), make([]int64, len(ids))
	for sh, c := range cmds {
		vals, err := c.Result()
		if err != nil {
			return fmt.Errorf("audit: list: progress of shard %d: %w", sh, err)
		}
		for j, v := range vals {
			raw, _ := v.(string)
			if pr, err := parseProgress(raw, 0); err == nil {
				matched[j] += pr.matched
				changed[j] += pr.changed
			}
		}
	}
	for j, i := range at {
		e := &entries[i]
		e.Matched, e.Changed = max(e.Matched, matched[j]), max(e.Changed, changed[j])
	}
	return nil
}

// parseAuditState reads '<state>,<lease until>,<matched>,<changed>,<owner>' at Redis time
// now: a running entry whose lease ran out is interrupted.
func parseAuditState(v string, now int64) (state string, matched, changed int64) {
	f := strings.SplitN(v, ",", 5)
	if len(f) != 5 {
		return AuditInterrupted, 0, 0
	}
	lease, _ := strconv.ParseInt(f[1], 10, 64)
	matched, _ = strconv.ParseInt(f[2], 10, 64)
	changed, _ = strconv.ParseInt(f[3], 10, 64)
	state = f[0]
	if state == AuditRunning && lease <= now {
		state = AuditInterrupted
	}
	return state, matched, changed
}
