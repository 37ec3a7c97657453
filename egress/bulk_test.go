package egress

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/contract"
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
		if _, err := st.Bulk(context.Background(), delaystore.Selector{Match: match("nats:bulk.a")}, delaystore.BulkOp{Kind: delaystore.BulkDeliverNow}, false, nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Bulk(context.Background(), delaystore.Selector{Match: match("nats:bulk.b")}, delaystore.BulkOp{Kind: delaystore.BulkShift, Shift: 100 * time.Millisecond, MaxDelay: time.Hour}, false, nil, time.Minute); err != nil {
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
