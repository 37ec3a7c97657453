package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestAnswersInDelivery: a message claimed by a replica (in delivery) answers DELETE with
// 409 in_delivery and is kept; a POST replacing it answers 201 with in_delivery; a POST
// replacing a waiting message answers 201 without it, and its DELETE 204.
func TestAnswersInDelivery(t *testing.T) {
	c, st := newAPI(t, "")
	ctx := context.Background()
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`0`), ID: "busy", Payload: str("x")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for claimed := false; !claimed; {
		cl, err := st.Claim(ctx, st.ShardOf("busy"), 10)
		if err != nil {
			t.Fatal(err)
		}
		claimed = len(cl.Messages) == 1
		if !claimed && time.Now().After(deadline) {
			t.Fatal("busy not claimed")
		}
	}
	ok, err := c.Cancel(ctx, "busy")
	var apiErr *client.APIError
	if ok || !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || !strings.HasPrefix(apiErr.Message, "in_delivery: ") {
		t.Fatalf("DELETE of a message in delivery = %v, %v; want 409 in_delivery", ok, err)
	}
	if _, err := c.Get(ctx, "busy"); err != nil {
		t.Fatalf("get after the 409: %v, want kept", err)
	}
	resp, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`60000`), ID: "busy", Payload: str("y")})
	if err != nil || !resp.InDelivery {
		t.Fatalf("replace of a message in delivery = %+v, %v; want in_delivery", resp, err)
	}
	resp, err = c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`60000`), ID: "busy", Payload: str("z")})
	if err != nil || resp.InDelivery {
		t.Fatalf("replace of a waiting message = %+v, %v; want no in_delivery", resp, err)
	}
	if ok, err := c.Cancel(ctx, "busy"); !ok || err != nil {
		t.Fatalf("DELETE of a waiting message = %v, %v; want 204", ok, err)
	}
}
