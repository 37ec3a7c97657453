package api

import (
	"context"
	"testing"

	"github.com/delaybridge/delaybridge/httpapi"
)

// TestTargetsHeldByOrder: GET /v1/targets counts the messages held by their ordering
// key's predecessor over all targets (each counted in its target's parked too); a
// key's head, a message of another key and one without key are not held; cancelling the
// head releases one.
func TestTargetsHeldByOrder(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	send := func(id, target, key string) {
		t.Helper()
		if _, err := c.Send(ctx, httpapi.PostRequest{Target: target, ID: id, OrderingKey: key, Delay: []byte(`"1h"`)}); err != nil {
			t.Fatalf("send %s: %v", id, err)
		}
	}
	send("a1", "orders.events", "order-1")
	send("a2", "orders.events", "order-1")
	send("a3", "billing.events", "order-1") // keys are global across targets
	send("b1", "orders.events", "order-2")
	send("plain", "orders.events", "")
	held := func(want, wantParked int64) {
		t.Helper()
		res, err := c.Targets(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if res.HeldByOrder != want {
			t.Fatalf("held_by_order %d, want %d (%+v)", res.HeldByOrder, want, res)
		}
		var parked int64
		for _, tc := range res.Targets {
			parked += tc.Parked
		}
		if parked != wantParked {
			t.Fatalf("parked %d over the targets: %+v", parked, res.Targets)
		}
	}
	send("b2", "orders.events", "order-2")
	held(3, 6)
	if ok, err := c.CancelKey(ctx, "a1", "order-1"); !ok || err != nil {
		t.Fatalf("cancel the head: %v %v", ok, err)
	}
	held(2, 5)
}
