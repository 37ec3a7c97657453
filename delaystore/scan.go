package delaystore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Scans (docs/design.md, "Listing"): scan.lua reads a bounded chunk of one shard in
// scheduled order, without writing; package admin pages the store's messages, finds a
// bulk change's messages and the targets' next due times with it. The delivery path
// never scans.

// headBytes is how many bytes of each body a scan returns: enough for the format, source
// id, target, source and (mostly) the headers.
const headBytes = 1024

// Position is a place in a shard's order: a score (unix ms, as Redis writes it) and an id.
// The zero Position is before every entry.
type Position struct {
	Score string
	ID    string
}

// ScanRequest asks Scan for one chunk of one shard, in order of score, then id.
type ScanRequest struct {
	Shard int
	// Retries reads the retry set (the ids whose last publish failed, scored by their due
	// time) instead of the schedule; an entry whose scheduled time lies in [From, To] is
	// left out there (a read of the schedule shows it).
	Retries bool
	// From and To bound the scores read (unix ms, both inclusive).
	From, To int64
	// After is where the chunk begins, strictly after it (zero: at From).
	After Position
	// Count is the most members read (> 0); fewer entries may come back (a member whose
	// entry is gone, or whose target lacks a literal, is read but not returned).
	Count int
	// Literals, when given, are substrings a target must hold in order (glob.Literals):
	// Redis leaves out the entries whose target lacks them.
	Literals []string
}

// ScanPage is Scan's answer for one ScanRequest.
type ScanPage struct {
	Entries []Scanned
	// Next is the last member read (After when none was): where the next chunk begins.
	Next Position
	// Through: the shard holds nothing more in [From, To] after Next.
	Through bool
	// Again: the shard's interned names changed between the read and the load of their
	// table, so nothing was read (Entries empty, Next = After, Through false): read the
	// chunk again.
	Again bool
	// Err is why the read failed; the rest is then unset.
	Err error
}

// Scanned is one entry that Scan read.
type Scanned struct {
	ID string
	// Scheduled is when it is next taken for delivery (its score): its Due, or the next
	// attempt of a message whose publish failed, or the end of a claim's lease. Unix ms.
	Scheduled int64
	Due       int64
	Version   int64
	Attempts  int
	// Target and Source are "" when Err is set.
	Target, Source string
	// Size is the payload's length in bytes (for a message whose headers take more than
	// headBytes: of payload and headers).
	Size int
	// Window is the message's spread window (x-delay-window), 0 when none or when its
	// headers take more than headBytes (not read).
	Window time.Duration
	// Every is the message's recurring schedule (x-delay-every), "" when none or when its
	// headers take more than headBytes (not read).
	Every string
	// HeldBy is, for a held message of an ordering key, the id of the message before it
	// in its key's chain ("" for any other; docs/design.md "Ordering keys"). Its Scheduled
	// is then its Due.
	HeldBy string
	// OrderingKey is the message's ordering key (x-delay-ordering-key; "" none): with its
	// ID, what names it for a cancel or a read (Store.GetKey, Store.CancelKeyAt).
	OrderingKey string
	// MaxWait and DueBy are the bound of a debounced message (x-delay-max-wait; Envelope),
	// 0 when none.
	MaxWait time.Duration
	DueBy   int64
	// Err: the body's head does not decode (a code the shard's names no longer hold).
	Err error
	// field is the target as the body holds it (a name or a code's field): what Change
	// matches a Newer pick against.
	field string
}

// Scan reads one chunk for each request, all in one pipeline of scan.lua calls (one
// round trip, plus one per shard whose interned names must be loaded). It changes
// nothing and blocks until Redis answered or ctx is done; the answers are aligned with
// reqs, each with its own error.
func (s *Store) Scan(ctx context.Context, reqs []ScanRequest) []ScanPage {
	out := make([]ScanPage, len(reqs))
	calls := make([]call, len(reqs))
	for i, r := range reqs {
		if err := s.checkShard(r.Shard); err != nil {
			return failPages(out, fmt.Errorf("scan: %w", err))
		}
		k := s.keys[r.Shard]
		pass := "z"
		if r.Retries {
			pass = "r"
		}
		args := []any{pass, r.From, r.To, cmp.Or(r.After.Score, "0"), r.After.ID, r.Count, headBytes}
		calls[i] = call{keys: []string{k.z, k.m, k.r, k.nm, k.k, k.ki}, args: appendStrings(args, r.Literals)}
	}
	for i, c := range s.evalPipelined(ctx, s.scripts[scriptScan], calls) {
		out[i] = s.scanPage(ctx, reqs[i], c.Slice)
	}
	return out
}

// failPages sets err on every page.
func failPages(pages []ScanPage, err error) []ScanPage {
	for i := range pages {
		pages[i].Err = err
	}
	return pages
}

// scanPage reads one scan.lua answer for r: done, the position after it, the names
// generation, then 6 values per entry (id, score, prefix, body head, body length, in
// retry set). The codes are resolved with the table of the generation the answer read.
func (s *Store) scanPage(ctx context.Context, r ScanRequest, reply func() ([]any, error)) ScanPage {
	out, err := reply()
	if err == nil && (len(out) < scanHeadLen || (len(out)-scanHeadLen)%scanEntryLen != 0) {
		err = fmt.Errorf("unexpected scan reply of %d values", len(out))
	}
	var names *nameTable
	if err == nil {
		gen, _ := out[3].(string)
		names, err = s.tableAt(ctx, r.Shard, gen)
	}
	if errors.Is(err, errNamesMoved) {
		return ScanPage{Next: r.After, Again: true}
	}
	if err != nil {
		return ScanPage{Err: err}
	}
	done, _ := out[0].(int64)
	page := ScanPage{Next: r.After, Through: done == 1}
	if id, _ := out[1].(string); id != "" {
		page.Next.ID = id
		page.Next.Score, _ = out[2].(string)
	}
	for i := scanHeadLen; i < len(out); i += scanEntryLen {
		if e, ok := scanned(out[i:i+scanEntryLen], names); ok {
			page.Entries = append(page.Entries, e)
		}
	}
	return page
}

// scanHeadLen is the length of a scan.lua answer's head: done, cursor id and score, names
// generation; then scanEntryLen values per entry.
const (
	scanHeadLen  = 4
	scanEntryLen = 8
)

// scanned decodes one entry of a scan.lua answer: id, z score, prefix, body head, body
// length, in retry set, held by, ordering key. ok is false for an entry whose prefix does not parse.
func scanned(v []any, names *nameTable) (Scanned, bool) {
	id, _ := v[0].(string)
	score, _ := v[1].(string)
	prefix, _ := v[2].(string)
	head, _ := v[3].(string)
	size, _ := v[4].(int64)
	f := strings.Split(prefix, ",")
	if len(f) != 3 {
		return Scanned{}, false
	}
	sched, err0 := strconv.ParseInt(score, 10, 64)
	version, err1 := strconv.ParseInt(f[0], 10, 64)
	attempts, err2 := strconv.Atoi(f[1])
	due, err3 := strconv.ParseInt(f[2], 10, 64)
	if errors.Join(err0, err1, err2, err3) != nil {
		return Scanned{}, false
	}
	e := Scanned{ID: id, Scheduled: sched, Due: due, Version: version, Attempts: attempts, field: targetField(head)}
	e.OrderingKey, _ = v[7].(string)
	if e.HeldBy, _ = v[6].(string); sched >= heldScore {
		e.Scheduled = due // held: taken for delivery once its predecessor left, not before due
	}
	var env Envelope
	env, e.Err = decodeHead([]byte(head), id, names)
	e.Target, e.Source, e.MaxWait, e.DueBy = env.Target, env.Source, env.MaxWait, env.DueBy
	preamble, window, every := scanHead([]byte(head))
	e.Size, e.Window, e.Every = int(size)-preamble, window, every
	return e, true
}

// decodeHead reads the target, source and bound (MaxWait, DueBy) from the first bytes of
// the body of message id (encodeBody): format byte, source id, flags, target, source,
// bound field, resolving codes through names (the shard's table as of the read).
func decodeHead(b []byte, id string, names *nameTable) (Envelope, error) {
	if len(b) == 0 {
		return Envelope{}, fmt.Errorf("%w: empty body", ErrCorrupt)
	}
	d := decoder{b: b[1:], names: names}
	if b[0] == formatSource {
		d.bytes("source id")
	}
	var e Envelope
	d.head(&e)
	return e, d.err
}

// targetField returns the target field of a body head as stored (a name, or a code's
// field): what the scripts' targetOf reads.
func targetField(head string) string {
	if head == "" {
		return ""
	}
	d := decoder{b: []byte(head[1:])}
	if head[0] == formatSource {
		d.bytes("source id")
	}
	d.byte("flags")
	return string(d.bytes("target"))
}

// scanHead reads the head of a body (encodeBody): preamble is how many bytes come before
// its payload: format, source id, flags, target, source, bound, key, headers and the hops count;
// when they do not all lie in head, the bytes before the headers (and window and every
// are unset). window is the spread window stored with the headers (metaWindow), 0 when
// none; every the recurring schedule (metaEvery), "" when none.
func scanHead(head []byte) (preamble int, window time.Duration, every string) {
	if len(head) == 0 {
		return 0, 0, ""
	}
	d := decoder{b: head[1:]}
	if head[0] == formatSource {
		d.bytes("source id")
	}
	flags := d.byte("flags")
	d.bytes("target")
	switch {
	case flags&flagSourceCode != 0:
		d.uvarint("source code")
	case flags&flagSourceHTTP != flagSourceHTTP:
		d.bytes("source")
	}
	if flags&flagBound != 0 {
		d.uvarint("max wait")
		d.uvarint("due by")
	}
	if flags&flagKey != 0 {
		d.bytes("key")
	}
	hasHeaders, hasHops := flags&flagHeaders != 0, flags&flagHops != 0
	beforeHeaders := len(head) - len(d.b)
	if hasHeaders {
		count := d.uvarint("header count")
		for i := uint64(0); i < count && d.err == nil; i++ {
			k := d.bytes("header key")
			v := d.bytes("header value")
			switch {
			case d.err != nil:
			case string(k) == metaWindow:
				var e Envelope
				if e.takeWindow(string(v)) == nil {
					window = e.Window
				}
			case string(k) == metaEvery:
				every = string(v)
			}
		}
	}
	if hasHops {
		d.uvarint("hops")
	}
	if d.err != nil {
		return beforeHeaders, 0, ""
	}
	return len(head) - len(d.b), window, every
}

// appendStrings appends ss to args (a script's arguments).
func appendStrings(args []any, ss []string) []any {
	for _, v := range ss {
		args = append(args, v)
	}
	return args
}
