package admin

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/glob"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// listAll follows the cursors of List from q until the end; it fails on a message shown
// twice and returns the pages' messages in order and the page count.
func listAll(t *testing.T, f *fixture, q ListQuery, budget time.Duration) ([]Listed, int) {
	t.Helper()
	var all []Listed
	seen := map[string]bool{}
	pages := 0
	for {
		page, next, err := f.a.List(t.Context(), q, budget)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page) > q.Limit {
			t.Fatalf("page of %d, limit %d", len(page), q.Limit)
		}
		for _, l := range page {
			if seen[l.ID] {
				t.Fatalf("%s shown twice (limit %d, page %d)", l.ID, q.Limit, pages)
			}
			seen[l.ID] = true
		}
		all = append(all, page...)
		if next == nil {
			return all, pages
		}
		raw, err := f.a.Open(t.Context(), CursorList, "q", f.a.Seal(CursorList, "q", next.String()))
		c, perr := ParseListCursor(raw)
		if err != nil || perr != nil || c != *next {
			t.Fatalf("cursor round trip: %+v -> %+v, %v %v", next, c, err, perr)
		}
		q.After = &c
		if pages > 10_000 {
			t.Fatal("no end")
		}
	}
}

func inOrder(t *testing.T, ls []Listed) {
	t.Helper()
	for i := 1; i < len(ls); i++ {
		a, b := ls[i-1], ls[i]
		if a.Scheduled > b.Scheduled || (a.Scheduled == b.Scheduled && a.ID >= b.ID) {
			t.Fatalf("out of order at %d: %s@%d then %s@%d", i, a.ID, a.Scheduled, b.ID, b.Scheduled)
		}
	}
}

// The store's messages, listed in pages of any size and with or without a target or due
// filter, come in scheduled order (then id), each once, with their fields (the spread
// window among them).
func TestListOrderFiltersAndFields(t *testing.T) {
	f := setup(t)
	base := f.now(t) + 3_600_000
	var reqs []delaystore.ParkRequest
	for i := range 300 {
		env := sampleEnvelope(i)
		env.Target = []string{"nats:orders.timeout", "nats:billing.retry", "kafka:audit"}[i%3]
		env.Payload = make([]byte, i)
		if i%5 == 0 {
			env.Window = time.Duration(i+1) * time.Second
		}
		reqs = append(reqs, delaystore.ParkRequest{ID: fmt.Sprintf("id-%03d", i), Absolute: true, At: base + int64(i/4)*10, Envelope: env})
	}
	f.park(t, reqs...)
	for _, limit := range []int{1, 7, 50, 1000} {
		all, _ := listAll(t, f, ListQuery{Limit: limit}, time.Second)
		if len(all) != 300 {
			t.Fatalf("limit %d: listed %d of 300", limit, len(all))
		}
		inOrder(t, all)
	}
	all, _ := listAll(t, f, ListQuery{Limit: 1000}, time.Second)
	for _, l := range all {
		i, _ := strconv.Atoi(l.ID[3:])
		if l.Due != base+int64(i/4)*10 || l.Scheduled != l.Due || l.Size != i || l.Target != reqs[i].Envelope.Target ||
			l.Source != "nats:delay.in" || l.Attempts != 0 || l.Window != reqs[i].Envelope.Window {
			t.Fatalf("%s listed as %+v", l.ID, l)
		}
	}
	match := func(target string) bool { return glob.MatchTarget("billing.*", target) }
	billing, _ := listAll(t, f, ListQuery{Limit: 13, Match: match}, time.Second)
	if len(billing) != 100 {
		t.Fatalf("billing.*: %d of 100", len(billing))
	}
	inOrder(t, billing)
	for _, l := range billing {
		if l.Target != "nats:billing.retry" {
			t.Fatalf("billing.* listed %+v", l)
		}
	}
	// The literals prefilter in Redis: the same list with them; and Redis does skip: with
	// a literal no target holds (and a Match that takes all) nothing comes back.
	prefiltered, _ := listAll(t, f, ListQuery{Limit: 13, Match: match, Literals: glob.Literals("billing.*")}, time.Second)
	if !slices.Equal(prefiltered, billing) {
		t.Fatalf("billing.* with its literals: %d messages, without: %d", len(prefiltered), len(billing))
	}
	if none, _ := listAll(t, f, ListQuery{Limit: 13, Literals: []string{"billing", "timeout"}}, time.Second); len(none) != 0 {
		t.Fatalf("literals billing then timeout: %d listed, want 0 (skipped in Redis)", len(none))
	}
	if some, _ := listAll(t, f, ListQuery{Limit: 13, Literals: []string{"kafka:", "dit"}}, time.Second); len(some) != 100 {
		t.Fatalf("literals kafka: then dit: %d listed, want the 100 of kafka:audit", len(some))
	}
	// Due base+40 .. base+80, both inclusive, 4 messages per 10 ms step: messages 16..35.
	ranged, _ := listAll(t, f, ListQuery{Limit: 6, From: base + 40, To: base + 80}, time.Second)
	if len(ranged) != 20 || ranged[0].ID != "id-016" || ranged[19].ID != "id-035" {
		t.Fatalf("due range: %d messages, %v .. %v", len(ranged), ranged[0].ID, ranged[len(ranged)-1].ID)
	}
}

// Paging stays exact while the store changes: messages parked behind the cursor are not
// shown, those ahead are, delivered or cancelled ones are gone, none is shown twice.
func TestListPagingWhileChanging(t *testing.T) {
	f := setup(t)
	base := f.now(t) + 3_600_000
	var reqs []delaystore.ParkRequest
	for i := range 200 {
		reqs = append(reqs, delaystore.ParkRequest{ID: fmt.Sprintf("a-%03d", i), Absolute: true, At: base + int64(i), Envelope: sampleEnvelope(i)})
	}
	f.park(t, reqs...)
	page, next, err := f.a.List(t.Context(), ListQuery{Limit: 50}, time.Second)
	if err != nil || len(page) != 50 || next == nil {
		t.Fatalf("first page: %d, %v, %v", len(page), next, err)
	}
	f.park(t, delaystore.ParkRequest{ID: "behind", Absolute: true, At: base + 10, Envelope: sampleEnvelope(1)},
		delaystore.ParkRequest{ID: "ahead", Absolute: true, At: base + 150, Envelope: sampleEnvelope(2)})
	for _, id := range []string{"a-100", "a-199"} {
		if ok, err := f.s.Cancel(t.Context(), id); err != nil || !ok {
			t.Fatal(id, ok, err)
		}
	}
	rest, _ := listAll(t, f, ListQuery{Limit: 30, After: next}, time.Second)
	got := map[string]bool{}
	for _, l := range rest {
		got[l.ID] = true
	}
	inOrder(t, append(page, rest...))
	if got["behind"] || !got["ahead"] || got["a-100"] || got["a-199"] || len(rest) != 150-2+1 {
		t.Fatalf("after the first page: %d listed; behind %v ahead %v a-100 %v a-199 %v", len(rest),
			got["behind"], got["ahead"], got["a-100"], got["a-199"])
	}
}

// A rare target on a larger store: with no time to read, each page is one round of
// chunks and may come back short, but following the cursors finds the message, once.
func TestListBudgetEndsShortPages(t *testing.T) {
	f := newFixture(t, testredis.URL(t), func(c *delaystore.Config) { c.Shards = 4 })
	base := f.now(t) + 3_600_000
	var reqs []delaystore.ParkRequest
	for i := range 5000 {
		reqs = append(reqs, delaystore.ParkRequest{ID: fmt.Sprintf("c-%04d", i), Absolute: true, At: base + int64(i), Envelope: sampleEnvelope(i)})
	}
	rare := sampleEnvelope(0)
	rare.Target = "nats:rare"
	reqs = append(reqs, delaystore.ParkRequest{ID: "rare", Absolute: true, At: base + 4500, Envelope: rare})
	f.park(t, reqs...)
	match := func(target string) bool { return glob.MatchTarget("rare", target) }
	found, pages := listAll(t, f, ListQuery{Limit: 10, Match: match}, 0)
	if len(found) != 1 || found[0].ID != "rare" || pages < 2 {
		t.Fatalf("found %v in %d pages; want rare alone, in more than one page", found, pages)
	}
	// Shards are read in several rounds here (1,250 members each, 500 a round): the pages
	// still come in order.
	all, _ := listAll(t, f, ListQuery{Limit: 700}, time.Second)
	if len(all) != len(reqs) || !slices.ContainsFunc(all, func(l Listed) bool { return l.ID == "rare" }) {
		t.Fatalf("listed %d of %d", len(all), len(reqs))
	}
	inOrder(t, all)
}

// Shards read in several rounds and unevenly spread in time: one holds 1,000 messages
// 1 ms apart, the other 500 a second apart. The pages are still in order: a shard's match
// is handed out only once every shard has been read past it.
func TestListMergesUnevenShards(t *testing.T) {
	f := newFixture(t, testredis.URL(t), func(c *delaystore.Config) { c.Shards = 2 })
	base := f.now(t) + 3_600_000
	var reqs []delaystore.ParkRequest
	for i, id := range idsOnShard(f.s, 0, 1000, "dense") {
		reqs = append(reqs, delaystore.ParkRequest{ID: id, Absolute: true, At: base + int64(i), Envelope: sampleEnvelope(i)})
	}
	for i, id := range idsOnShard(f.s, 1, 500, "sparse") {
		reqs = append(reqs, delaystore.ParkRequest{ID: id, Absolute: true, At: base + int64(i)*1000, Envelope: sampleEnvelope(i)})
	}
	f.park(t, reqs...)
	all, pages := listAll(t, f, ListQuery{Limit: 700}, time.Second)
	if len(all) != len(reqs) || pages != 3 {
		t.Fatalf("listed %d of %d in %d pages", len(all), len(reqs), pages)
	}
	inOrder(t, all)
}

// Many messages share few due times (60, 30, 20 and 10), and their ids (source positions
// in runs of 4 over 3 shards, and a few that are not positions, of both cases) split each
// due millisecond over the shards (a shard holds more of one than its first chunk reads), so a page's last message often lies in another shard than
// the next one: following the cursors from every page size from 1 to 1000, with and
// without a target and a due filter (and, for a sample of sizes, with no time to read, so
// that pages end at the merge's frontier), lists each message exactly once, in order,
// and comes to an end (listAll fails on a repeat and after 10,000 pages).
func TestListEachOnceAcrossSharedDueTimes(t *testing.T) {
	f := newFixture(t, testredis.URL(t), func(c *delaystore.Config) { c.Shards = 3; c.ShardRun = 4 })
	base := f.now(t) + 3_600_000
	rng := rand.New(rand.NewPCG(37, 4))
	dues := []int64{base, base + 1, base + 2, base + 7}
	var reqs []delaystore.ParkRequest
	for i := range 120 {
		id := fmt.Sprintf("js:S:%d", 1+i)
		switch i % 15 {
		case 11:
			id = fmt.Sprintf("Api-%d", i)
		case 12:
			id = fmt.Sprintf("api-%d", i)
		}
		env := sampleEnvelope(i)
		env.Target = []string{"nats:bulk.a", "nats:bulk.b", "nats:other"}[rng.IntN(3)]
		reqs = append(reqs, delaystore.ParkRequest{ID: id, Absolute: true, At: dues[min(i/60+i/90+i/110, 3)], Envelope: env})
	}
	f.park(t, reqs...)
	match := func(target string) bool { return glob.MatchTarget("bulk.*", target) }
	queries := []struct {
		name string
		q    ListQuery
		want func(delaystore.ParkRequest) bool
	}{
		{"all", ListQuery{}, func(delaystore.ParkRequest) bool { return true }},
		{"target", ListQuery{Match: match, Literals: glob.Literals("bulk.*")},
			func(r delaystore.ParkRequest) bool { return match(r.Envelope.Target) }},
		{"due", ListQuery{From: base + 1, To: base + 2},
			func(r delaystore.ParkRequest) bool { return r.At == base+1 || r.At == base+2 }},
		{"both", ListQuery{Match: match, From: base + 1, To: base + 7},
			func(r delaystore.ParkRequest) bool { return r.At > base && match(r.Envelope.Target) }},
	}
	for _, qc := range queries {
		t.Run(qc.name, func(t *testing.T) { listEachOnce(t, f, qc.q, reqs, qc.want) })
	}
}

// listEachOnce pages through query with every limit from 1 to 1000 (and, for a sample,
// no time to read) and fails unless it lists the requests selected picks, each once, in
// order.
func listEachOnce(t *testing.T, f *fixture, query ListQuery, reqs []delaystore.ParkRequest, selected func(delaystore.ParkRequest) bool) {
	want := map[string]bool{}
	for _, r := range reqs {
		if selected(r) {
			want[r.ID] = true
		}
	}
	for limit := 1; limit <= 1000; limit++ {
		budgets := []time.Duration{time.Minute}
		if limit <= 10 || limit%97 == 0 {
			budgets = append(budgets, 0)
		}
		for _, budget := range budgets {
			q := query
			q.Limit = limit
			all, _ := listAll(t, f, q, budget)
			inOrder(t, all)
			if len(all) != len(want) {
				t.Fatalf("limit %d, budget %v: listed %d of %d", limit, budget, len(all), len(want))
			}
			for _, l := range all {
				if !want[l.ID] {
					t.Fatalf("limit %d: listed %s, not selected", limit, l.ID)
				}
			}
		}
	}
}
