package delaystore

import (
	"fmt"
	"testing"
	"time"
)

// Exchange claims, acks and retries in one pipeline, each part answered on its own; after
// SCRIPT FLUSH the calls answered NOSCRIPT are sent again with EVAL (all three scripts).
func TestExchange(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	env := Envelope{Target: "nats:t", Source: "nats:delay.in"}
	var reqs []ParkRequest
	shards := map[int]bool{}
	for i := 0; len(shards) < 3; i++ {
		id := fmt.Sprintf("x%d", i)
		if sh := f.s.ShardOf(id); !shards[sh] {
			shards[sh] = true
			reqs = append(reqs, ParkRequest{ID: id, Envelope: env})
		}
	}
	if _, err := f.s.Park(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	var claims []ClaimRequest
	for sh := range f.s.Shards() {
		claims = append(claims, ClaimRequest{Shard: sh, Max: 10})
	}
	x := f.s.Exchange(ctx, nil, nil, claims)
	if err := x.Err(); err != nil {
		t.Fatal(err)
	}
	var got []Claimed
	for _, c := range x.Claims {
		got = append(got, c.Messages...)
	}
	if len(got) != 3 {
		t.Fatalf("claimed %d, want 3", len(got))
	}
	if err := f.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	retry := RetryRequest{Receipt: got[2].Receipt, Backoff: time.Hour}
	x = f.s.Exchange(ctx, []Receipt{got[0].Receipt, got[1].Receipt}, []RetryRequest{retry}, claims)
	if err := x.Err(); err != nil {
		t.Fatalf("exchange after SCRIPT FLUSH: %v", err)
	}
	if x.Acked.N != 2 || x.Retried.N != 1 {
		t.Fatalf("acked %d, retried %d; want 2 and 1", x.Acked.N, x.Retried.N)
	}
	for i, c := range x.Claims {
		if len(c.Messages) != 0 {
			t.Fatalf("claim %d got %d messages: nothing is due", i, len(c.Messages))
		}
	}
	m, err := f.s.Get(ctx, got[2].ID)
	if err != nil || m.Attempts != 1 {
		t.Fatalf("retried message: %+v, %v; want attempts 1", m, err)
	}
	for _, c := range got[:2] {
		if _, err := f.s.Get(ctx, c.ID); err == nil {
			t.Fatalf("acked %s still stored", c.ID)
		}
	}
}
