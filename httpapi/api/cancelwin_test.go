package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
)

// TestPostCoveredByRememberedCancel: a POST whose id has a remembered cancel at or after
// its receipt time (here a broker cancel stamped an hour ahead) is not parked: 409. One
// without is parked as usual, also right after a DELETE of its id (a later receipt time).
func TestPostCoveredByRememberedCancel(t *testing.T) {
	c, st := newAPI(t, "")
	ctx := context.Background()
	if _, err := st.CancelAt(ctx, "w-1", time.Now().Add(time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	_, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`60000`), ID: "w-1"})
	if err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("post covered by a cancel: %v, want 409", err)
	}
	if _, err := st.Get(ctx, "w-1"); err == nil {
		t.Fatal("the message covered by a cancel was parked")
	}
	if ok, err := c.Cancel(ctx, "w-2"); err != nil || ok {
		t.Fatalf("delete of nothing: %v %v", ok, err)
	}
	time.Sleep(2 * time.Millisecond) // a later millisecond than the DELETE's receipt
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`60000`), ID: "w-2"}); err != nil {
		t.Fatalf("post after a delete: %v, want parked", err)
	}
}
