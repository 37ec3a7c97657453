package delaystore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The audit log's records (docs/design.md, "Audit log"), under one hash tag, {P:audit}:
// :z (op id -> start, Redis ms), :e (op id -> the entry as its writer began it, never
// changed) and :s (op id -> state, lease, counts and owner). audit.lua writes them,
// auditlist.lua reads a page. Package admin decides what an entry says and when it is
// written; the delivery path never writes one.

// AuditState is what AuditSet writes of a record.
type AuditState struct {
	// State is the record's state word (package admin's: running, done, interrupted).
	State string
	// Matched and Changed are the record's counts.
	Matched, Changed int64
	// Lease, for the state "running", is how long from now the owner holds the record.
	Lease time.Duration
	// Owner holds the record after the call ("": nobody, any writer may take it over).
	Owner string
}

// AuditAppend adds a record under op id, running and leased to owner for lease, with entry
// (the writer's bytes, kept as they are). Records older than keep are dropped, and the
// oldest beyond most, a few per call; the keys expire after keep without a begin. An id
// that exists is an error. It returns the record's start (Redis ms) and blocks until Redis
// answered or ctx is done.
func (s *Store) AuditAppend(ctx context.Context, id, entry, owner string, lease, keep time.Duration, most int) (int64, error) {
	at, err := s.scripts[scriptAudit].Run(ctx, s.rdb, s.auditKeys, "begin", id, entry, owner,
		lease.Milliseconds(), keep.Milliseconds(), most).Int64()
	if err != nil {
		return 0, fmt.Errorf("audit: begin: %w", err)
	}
	return at, nil
}

// AuditSet writes the state of record id when owner holds it ("" takes one nobody holds);
// false (nothing written) when another owner holds it or the record is gone. It blocks
// until Redis answered or ctx is done.
func (s *Store) AuditSet(ctx context.Context, id, owner string, st AuditState) (bool, error) {
	ok, err := s.scripts[scriptAudit].Run(ctx, s.rdb, s.auditKeys, "set", id, owner, st.State,
		st.Lease.Milliseconds(), st.Owner, st.Matched, st.Changed).Int64()
	if err != nil {
		return false, err
	}
	return ok == 1, nil
}

// AuditTaken is AuditTake's answer: Missing, Done or Busy (then the record was not
// taken), or none of them (taken).
type AuditTaken struct {
	// Missing: no record has that op id.
	Missing bool
	// Done: the record's state is "done".
	Done bool
	// Busy: another owner holds it; its lease runs out in Left.
	Busy bool
	Left time.Duration
	// Matched, Changed and Entry are the record's (when Done or taken).
	Matched, Changed int64
	Entry            string
}

// AuditTake makes owner the holder of record id, running under a lease of lease, unless
// it is missing, done, or running under another owner's lease that has not run out. Of
// concurrent calls for one record at most one takes it. It blocks until Redis answered or
// ctx is done.
func (s *Store) AuditTake(ctx context.Context, id, owner string, lease time.Duration) (AuditTaken, error) {
	out, err := s.scripts[scriptAudit].Run(ctx, s.rdb, s.auditKeys, "claim", id, owner, lease.Milliseconds()).Slice()
	if err != nil {
		return AuditTaken{}, err
	}
	if len(out) == 0 {
		return AuditTaken{}, fmt.Errorf("an empty reply")
	}
	num := func(i int) int64 {
		if i < len(out) {
			n, _ := out[i].(int64)
			return n
		}
		return 0
	}
	word, _ := out[0].(string)
	t := AuditTaken{Matched: num(1), Changed: num(2)}
	if len(out) > 3 {
		t.Entry, _ = out[3].(string)
	}
	switch word {
	case "missing":
		return AuditTaken{Missing: true}, nil
	case "done":
		t.Done = true
	case "busy":
		return AuditTaken{Busy: true, Left: time.Duration(num(1)) * time.Millisecond}, nil
	case "ok":
	default:
		return AuditTaken{}, fmt.Errorf("unexpected reply %v", out)
	}
	return t, nil
}

// AuditRow is one record as AuditRead returns it.
type AuditRow struct {
	ID string
	// At is the record's start, Redis ms.
	At int64
	// Entry is what its writer began it with.
	Entry string
	// State is its state word as last written, "" when the stored state is unreadable.
	State string
	// Until is when the lease of a running record runs out, Redis ms.
	Until int64
	// Matched and Changed are its counts as last written.
	Matched, Changed int64
}

// AuditRows is one page of records, newest first.
type AuditRows struct {
	// Now is the Redis time of the read, unix ms.
	Now  int64
	Rows []AuditRow
	// More: older records follow the last one.
	More bool
}

// AuditRead returns at most n records older than record after ("": from the newest),
// none older than keep: one auditlist.lua call. A cursor record that is gone was dropped
// as the oldest: nothing older is left. It blocks until Redis answered or ctx is done.
func (s *Store) AuditRead(ctx context.Context, after string, n int, keep time.Duration) (AuditRows, error) {
	out, err := s.scripts[scriptAuditList].Run(ctx, s.rdb, s.auditKeys, after, n, keep.Milliseconds()).Slice()
	if err != nil {
		return AuditRows{}, err
	}
	if len(out) < 2 || (len(out)-2)%4 != 0 {
		return AuditRows{}, fmt.Errorf("unexpected reply of %d values", len(out))
	}
	now, _ := out[0].(int64)
	more, _ := out[1].(int64)
	page := AuditRows{Now: now, More: more == 1, Rows: make([]AuditRow, 0, (len(out)-2)/4)}
	for i := 2; i < len(out); i += 4 {
		var r AuditRow
		r.ID, _ = out[i].(string)
		at, _ := out[i+1].(string)
		r.At, _ = strconv.ParseInt(at, 10, 64)
		r.Entry, _ = out[i+2].(string)
		state, _ := out[i+3].(string)
		r.State, r.Until, r.Matched, r.Changed = parseAuditState(state)
		page.Rows = append(page.Rows, r)
	}
	return page, nil
}

// parseAuditState reads '<state>,<lease until>,<matched>,<changed>,<owner>' (audit.lua);
// state "" when it does not have five fields.
func parseAuditState(v string) (state string, until, matched, changed int64) {
	f := strings.SplitN(v, ",", 5)
	if len(f) != 5 {
		return "", 0, 0, 0
	}
	until, _ = strconv.ParseInt(f[1], 10, 64)
	matched, _ = strconv.ParseInt(f[2], 10, 64)
	changed, _ = strconv.ParseInt(f[3], 10, 64)
	return f[0], until, matched, changed
}
