package delaystore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// listChunk is the most members of one shard List reads per round trip; listFirstChunk
// the fewest it starts with. A shard's first chunk is about twice its share of the page
// (a page of 100 over 16 shards reads 16 a shard, not 500: a due range's or a common
// target's first page reads a few hundred entries); each further chunk of that shard is
// four times the one before, up to listChunk (a rare target's page reads on in large
// chunks).
const (
	listChunk      = 500
	listFirstChunk = 16
)

// ListQuery picks parked messages for List: those whose scheduled time (the z score, unix
// ms, inclusive range; To 0: no upper bound) lies in [From, To] and whose target Match
// accepts (nil: any), at most Limit (>= 1), after the cursor After (nil: from the start).
// Literals, when given, are substrings every target Match accepts holds in order
// (glob.Literals of its pattern): Redis skips the entries whose target lacks them.
type ListQuery struct {
	Match    func(target string) bool
	Literals []string
	From, To int64
	Limit    int
	After    *ListCursor
}

// Listed is one parked message as List shows it.
type Listed struct {
	ID, Target, Source string
	// Due is the message's due time; Scheduled when it is next taken for delivery (equal
	// to Due but for a message whose publish failed: its next attempt, or one being
	// published: the end of its lease). Unix ms.
	Due, Scheduled int64
	Attempts       int
	// Size is the payload's length in bytes (for a message whose headers take more than
	// 1 KiB: of payload and headers).
	Size int
	// Window is the message's spread window (x-delay-window; Due is the drawn time), 0
	// when none (or when its headers take more than 1 KiB: not read).
	Window time.Duration
}

// ListCursor is a position in scheduled order (score, then id), the same for all shards.
type ListCursor struct {
	Score string
	ID    string
}

// SealListCursor returns the cursor a client gets for position c of the list query
// query (the caller's canonical form of the query's filters: target, due range), sealed
// (cursor.go) so that ParseListCursor takes it back for that query only. It does not
// block.
func (s *Store) SealListCursor(c ListCursor, query string) string {
	return s.seal(cursorList, query, "l1\n"+c.Score+"\n"+c.ID)
}

// ParseListCursor opens a cursor that SealListCursor made for the same query; any other
// string (altered, made up, a bulk cursor, another query's) is an error wrapping
// ErrBadCursor. It may read the cursor key from Redis again (a Redis error is returned as
// is).
func (s *Store) ParseListCursor(ctx context.Context, v, query string) (ListCursor, error) {
	raw, err := s.open(ctx, cursorList, query, v)
	if err != nil {
		return ListCursor{}, err
	}
	parts := strings.SplitN(raw, "\n", 3)
	if len(parts) != 3 || parts[0] != "l1" {
		return ListCursor{}, fmt.Errorf("%w: malformed list position", ErrBadCursor)
	}
	if _, err := strconv.ParseInt(parts[1], 10, 64); err != nil {
		return ListCursor{}, fmt.Errorf("%w: malformed list position", ErrBadCursor)
	}
	return ListCursor{Score: parts[1], ID: parts[2]}, nil
}

// before reports whether position a comes before b in scheduled order.
func (a ListCursor) before(b ListCursor) bool {
	sa, _ := strconv.ParseInt(a.Score, 10, 64)
	sb, _ := strconv.ParseInt(b.Score, 10, 64)
	return sa < sb || (sa == sb && a.ID < b.ID)
}

// listShard is one shard's part of a List: where it has read up to, the matches read and
// not handed out yet, whether it is through.
type listShard struct {
	shard int
	pos   ListCursor
	found []Listed
	done  bool
	chunk int // members to read in the next round
}

// List returns parked messages in scheduled order (then id), at most q.Limit, and the
// cursor to go on from (nil: nothing more). It reads all shards together in chunks
// (docs/design.md, "Listing") until the page is full, all shards are through, or budget
// has passed: then the page may hold fewer than q.Limit messages and still have a cursor.
// It changes nothing and blocks until done, ctx is done, or a Redis call fails.
func (s *Store) List(ctx context.Context, q ListQuery, budget time.Duration) ([]Listed, *ListCursor, error) {
	if q.Limit < 1 {
		return nil, nil, fmt.Errorf("list: limit %d < 1", q.Limit)
	}
	if q.To == 0 {
		q.To = math.MaxInt64
	}
	start := ListCursor{Score: strconv.FormatInt(q.From, 10)}
	if q.After != nil {
		start = *q.After
	}
	shards := make([]*listShard, len(s.keys))
	first := min(max(2*q.Limit/len(shards)+1, listFirstChunk), listChunk)
	for i := range shards {
		shards[i] = &listShard{shard: i, pos: start, chunk: first}
	}
	deadline := time.Now().Add(budget)
	var page []Listed
	for {
		if err := s.listRound(ctx, q, shards, q.Limit-len(page)); err != nil {
			return nil, nil, err
		}
		frontier, through := listFrontier(shards)
		page = append(page, takeUpTo(shards, frontier, through, q.Limit-len(page))...)
		switch {
		case len(page) == q.Limit:
			last := page[len(page)-1]
			return page, &ListCursor{Score: strconv.FormatInt(last.Scheduled, 10), ID: last.ID}, nil
		case through:
			return page, nil, nil
		case time.Now().After(deadline):
			return page, &frontier, nil
		}
	}
}

// listRound reads one chunk of every shard that is not through and holds fewer than want
// matches, all in one pipeline.
func (s *Store) listRound(ctx context.Context, q ListQuery, shards []*listShard, want int) error {
	var reading []*listShard
	var calls []call
	for _, sh := range shards {
		if sh.done || len(sh.found) >= want {
			continue
		}
		k := s.keys[sh.shard]
		reading = append(reading, sh)
		args := []any{"z", q.From, q.To, sh.pos.Score, sh.pos.ID, sh.chunk, bulkHeadLen}
		calls = append(calls, call{keys: []string{k.z, k.m, k.r, k.nm}, args: appendStrings(args, q.Literals)})
		sh.chunk = min(4*sh.chunk, listChunk)
	}
	if len(calls) == 0 {
		return nil
	}
	cmds := s.evalPipelined(ctx, s.scripts[scriptScan], calls)
	for i, sh := range reading {
		out, err := cmds[i].Slice()
		var names *nameTable
		if err == nil {
			names, err = s.scanNames(ctx, sh.shard, out)
		}
		if errors.Is(err, errNamesMoved) {
			continue // read again next round
		}
		if err == nil {
			err = sh.read(out, q.Match, names)
		}
		if err != nil {
			return fmt.Errorf("list: shard %d: %w", sh.shard, err)
		}
	}
	return nil
}

// read takes one scan.lua answer: the matches, the position after it, whether through.
// names resolves the codes (the table of the generation the answer read: scanNames).
func (sh *listShard) read(out []any, match func(string) bool, names *nameTable) error {
	if len(out) < scanHeadLen || (len(out)-scanHeadLen)%6 != 0 {
		return fmt.Errorf("unexpected scan reply of %d values", len(out))
	}
	done, _ := out[0].(int64)
	sh.done = done == 1
	if id, _ := out[1].(string); id != "" {
		sh.pos.ID = id
		sh.pos.Score, _ = out[2].(string)
	}
	for i := scanHeadLen; i < len(out); i += 6 {
		l, ok := listed(out[i:i+6], names)
		if ok && (match == nil || match(l.Target)) {
			sh.found = append(sh.found, l)
		}
	}
	return nil
}

// listed decodes one member of a scan.lua answer: id, z score, prefix, body head, body
// length, in retry set. ok is false for an entry that does not decode (left out: Get
// shows it, egress quarantines it).
func listed(v []any, names *nameTable) (Listed, bool) {
	id, _ := v[0].(string)
	score, _ := v[1].(string)
	prefix, _ := v[2].(string)
	head, _ := v[3].(string)
	size, _ := v[4].(int64)
	f := strings.Split(prefix, ",")
	sched, err := strconv.ParseInt(score, 10, 64)
	if len(f) != 3 || err != nil {
		return Listed{}, false
	}
	attempts, err1 := strconv.Atoi(f[1])
	due, err2 := strconv.ParseInt(f[2], 10, 64)
	target, source, err3 := decodeHead([]byte(head), id, names)
	if err1 != nil || err2 != nil || err3 != nil {
		return Listed{}, false
	}
	preamble, window := scanHead([]byte(head))
	return Listed{ID: id, Target: target, Source: source, Due: due, Scheduled: sched, Attempts: attempts,
		Size: int(size) - preamble, Window: window}, true
}

// listFrontier is the smallest position read up to by a shard that is not through (every
// match at or before it is final), and whether all shards are through.
func listFrontier(shards []*listShard) (ListCursor, bool) {
	var min *ListCursor
	for _, sh := range shards {
		if !sh.done && (min == nil || sh.pos.before(*min)) {
			p := sh.pos
			min = &p
		}
	}
	if min == nil {
		return ListCursor{}, true
	}
	return *min, false
}

// takeUpTo removes from the shards' matches those at or before frontier (all of them when
// through) and returns the first n of them in scheduled order; the others are dropped
// (the next page reads them again from its cursor).
func takeUpTo(shards []*listShard, frontier ListCursor, through bool, n int) []Listed {
	var ready []Listed
	for _, sh := range shards {
		k := 0
		for k < len(sh.found) && (through || !frontier.before(posOf(sh.found[k]))) {
			k++
		}
		ready = append(ready, sh.found[:k]...)
		sh.found = sh.found[k:]
	}
	slices.SortFunc(ready, func(a, b Listed) int {
		switch {
		case posOf(a).before(posOf(b)):
			return -1
		case posOf(b).before(posOf(a)):
			return 1
		}
		return 0
	})
	if len(ready) > n {
		ready = ready[:n]
	}
	return ready
}

// appendStrings appends ss to args (a script's arguments).
func appendStrings(args []any, ss []string) []any {
	for _, v := range ss {
		args = append(args, v)
	}
	return args
}

func posOf(l Listed) ListCursor {
	return ListCursor{Score: strconv.FormatInt(l.Scheduled, 10), ID: l.ID}
}

// scanHead reads the head of a body (encodeBody): preamble is how many bytes come before
// its payload: format, source id, flags, target, source, key, headers and the hops count;
// when they do not all lie in head, the bytes before the headers (and window is 0).
// window is the spread window stored with the headers (metaWindow), 0 when none.
func scanHead(head []byte) (preamble int, window time.Duration) {
	if len(head) == 0 {
		return 0, 0
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
			if d.err == nil && string(k) == metaWindow {
				var e Envelope
				if e.takeWindow(string(v)) == nil {
					window = e.Window
				}
			}
		}
	}
	if hasHops {
		d.uvarint("hops")
	}
	if d.err != nil {
		return beforeHeaders, 0
	}
	return len(head) - len(d.b), window
}
