package egress

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// TestBulkUnderDelivery: bulk changes run while egress delivers (deliver-now on one
// target, a shift on another, several passes): every message arrives exactly once, and
// none before the due time it was delivered for (x-delay-due, which a change moves).
func TestBulkUnderDelivery(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "bulk.a")
	outB := collect(t, gc, "bulk.b")
	runEgress(t, Config{}, st, map[string]message.Publisher{"nats": gc})
	const n = 300
	start := time.Now().UnixMilli()
	var reqs []delaystore.ParkRequest
	for i := range n {
		target := []string{"nats:bulk.a", "nats:bulk.b"}[i%2]
		reqs = append(reqs, delaystore.ParkRequest{ID: "m" + strconv.Itoa(i), Replace: true, Absolute: true,
			At: start + int64(i%100)*10, Envelope: delaystore.Envelope{Target: target, Source: "http", Payload: []byte("x")}})
	}
	if _, err := st.Park(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	match := func(p string) func(string) bool { return func(t string) bool { return strings.HasPrefix(t, p) } }
	for range 5 {
		if _, err := admin.New(st).Bulk(context.Background(), admin.Selector{Match: match("nats:bulk.a")}, delaystore.BulkOp{Kind: delaystore.BulkDeliverNow}, false, nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.New(st).Bulk(context.Background(), admin.Selector{Match: match("nats:bulk.b")}, delaystore.BulkOp{Kind: delaystore.BulkShift, Shift: 100 * time.Millisecond, MaxDelay: time.Hour}, false, nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	seen := map[string]int{}
	for len(seen) < n {
		var g got
		select {
		case g = <-out:
		case g = <-outB:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d delivered", len(seen), n)
		}
		hs := headers.FromMetadata(g.msg.Metadata)
		id, _ := hs.Get(contract.HeaderID)
		due, _ := hs.Get(contract.HeaderDue)
		if ms, _ := strconv.ParseInt(due, 10, 64); g.at.UnixMilli() < ms {
			t.Fatalf("%s arrived %d ms before its due time %s", id, ms-g.at.UnixMilli(), due)
		}
		seen[id]++
	}
	time.Sleep(300 * time.Millisecond)
	for len(out)+len(outB) > 0 {
		var g got
		select {
		case g = <-out:
		case g = <-outB:
		}
		id, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderID)
		seen[id]++
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s delivered %d times", id, c)
		}
	}
	waitEmpty(t, st)
}

// TestBulkCancelStopsRecurring (issue 23 item 3): a bulk cancel on the target of 1,000
// recurring messages firing every second changes every one of them, the ones whose
// firing is in delivery too, and after it answers no occurrence fires that was not
// already claimed: each message fires at most once more (a firing in flight at the
// cancel, due before the answer or within Config.ClaimAhead after it), and the store is empty. Before, those in delivery were
// matched but not changed, and fired on.
func TestBulkCancelStopsRecurring(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "tick.bulk")
	runEgress(t, Config{}, st, map[string]message.Publisher{"nats": gc})
	const n = 1000
	start := time.Now().UnixMilli() + 200
	var reqs []delaystore.ParkRequest
	for i := range n {
		reqs = append(reqs, delaystore.ParkRequest{ID: "r" + strconv.Itoa(i), Replace: true, Absolute: true,
			At: start + int64(i%1000), Envelope: delaystore.Envelope{Target: "nats:tick.bulk", Source: "http", Payload: []byte("x"), Every: "1s"}})
	}
	if _, err := st.Park(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	for fired := 0; fired < 2*n; fired++ { // two rounds: firings go on all the time
		waitFor(t, out, 5*time.Second)
	}
	var res admin.BulkResult
	var from *admin.BulkCursor
	for {
		r, err := admin.New(st).Bulk(context.Background(), admin.Selector{Match: func(string) bool { return true }},
			delaystore.BulkOp{Kind: delaystore.BulkCancel}, false, from, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		res.Matched, res.Changed = res.Matched+r.Matched, res.Changed+r.Changed
		if from = r.Next; from == nil {
			break
		}
	}
	answered := time.Now().UnixMilli()
	if res.Matched != n || res.Changed != n {
		t.Errorf("bulk cancel = matched %d, changed %d; want %d, %d", res.Matched, res.Changed, n, n)
	}
	after := map[string]int{}
	quiet := time.After(2500 * time.Millisecond) // two and a half intervals
	for {
		select {
		case g := <-out:
			hs := headers.FromMetadata(g.msg.Metadata)
			id, _ := hs.Get(contract.HeaderID)
			due, _ := hs.Get(contract.HeaderDue)
			if after[id]++; after[id] > 1 {
				t.Fatalf("%s fired again after the bulk cancel answered (due %s, answered %d)", id, due, answered)
			}
			// claimed ahead (Config.ClaimAhead): a firing due within that span after the
			// answer was in delivery already (its withdrawal is best effort)
			if ms, _ := strconv.ParseInt(due, 10, 64); ms > answered+defaultClaimAhead.Milliseconds() {
				t.Fatalf("%s fired for an occurrence after the bulk cancel answered: due %s, answered %d (+ claim ahead %s)",
					id, due, answered, defaultClaimAhead)
			}
		case <-quiet:
			t.Logf("matched %d, changed %d; %d firings in flight at the cancel published after it", res.Matched, res.Changed, len(after))
			waitEmpty(t, st)
			return
		}
	}
}
