package admin

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
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
	// MaxWait and DueBy are the bound of a debounced message (x-delay-max-wait: it is due
	// no later than DueBy, unix ms), 0 when none.
	MaxWait time.Duration
	DueBy   int64
	// Every is the recurring schedule of a recurring message (x-delay-every), "" for one
	// that fires once (or whose headers take more than 1 KiB: not read).
	Every string
	// OrderingKey is the message's ordering key ("" none); HeldBy, for a message its
	// key's chain holds, the id of the message before it (docs/design.md "Ordering keys").
	OrderingKey, HeldBy string
}

// ListCursor is a position in scheduled order (score, then id), the same for all shards.
type ListCursor struct {
	Score string
	ID    string
}

// String is c as a cursor's position (Seal with CursorList); ParseListCursor reads it.
func (c ListCursor) String() string { return "l1\n" + c.Score + "\n" + c.ID }

// ParseListCursor reads a position that ListCursor.String wrote (the position of a
// cursor that Open took for CursorList); anything else is an error wrapping ErrBadCursor.
// It is a pure function.
func ParseListCursor(raw string) (ListCursor, error) {
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
// (docs/design.md, "Listing"; delaystore.Store.Scan) until the page is full, all shards
// are through, or budget has passed: then the page may hold fewer than q.Limit messages
// and still have a cursor. It changes nothing and blocks until done, ctx is done, or a
// Redis call fails.
func (a *Admin) List(ctx context.Context, q ListQuery, budget time.Duration) ([]Listed, *ListCursor, error) {
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
	shards := make([]*listShard, a.store.Shards())
	first := min(max(2*q.Limit/len(shards)+1, listFirstChunk), listChunk)
	for i := range shards {
		shards[i] = &listShard{shard: i, pos: start, chunk: first}
	}
	deadline := time.Now().Add(budget)
	var page []Listed
	for {
		if err := a.listRound(ctx, q, shards, q.Limit-len(page)); err != nil {
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
func (a *Admin) listRound(ctx context.Context, q ListQuery, shards []*listShard, want int) error {
	var reading []*listShard
	var reqs []delaystore.ScanRequest
	for _, sh := range shards {
		if sh.done || len(sh.found) >= want {
			continue
		}
		reading = append(reading, sh)
		reqs = append(reqs, delaystore.ScanRequest{Shard: sh.shard, From: q.From, To: q.To,
			After: delaystore.Position(sh.pos), Count: sh.chunk, Literals: q.Literals})
		sh.chunk = min(4*sh.chunk, listChunk)
	}
	if len(reqs) == 0 {
		return nil
	}
	for i, p := range a.store.Scan(ctx, reqs) {
		if p.Err != nil {
			return fmt.Errorf("list: shard %d: %w", reading[i].shard, p.Err)
		}
		reading[i].read(p, q.Match)
	}
	return nil
}

// read takes one scanned page: the matches, the position after it, whether through. A
// page to read again (its names moved) changes nothing; an entry that does not decode is
// left out (Get shows it, egress quarantines it).
func (sh *listShard) read(p delaystore.ScanPage, match func(string) bool) {
	if p.Again {
		return
	}
	sh.done = p.Through
	sh.pos = ListCursor(p.Next)
	for _, e := range p.Entries {
		if e.Err == nil && (match == nil || match(e.Target)) {
			sh.found = append(sh.found, Listed{ID: e.ID, Target: e.Target, Source: e.Source, Due: e.Due,
				Scheduled: e.Scheduled, Attempts: e.Attempts, Size: e.Size, Window: e.Window,
				MaxWait: e.MaxWait, DueBy: e.DueBy, Every: e.Every, OrderingKey: e.OrderingKey, HeldBy: e.HeldBy})
		}
	}
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

func posOf(l Listed) ListCursor {
	return ListCursor{Score: strconv.FormatInt(l.Scheduled, 10), ID: l.ID}
}
