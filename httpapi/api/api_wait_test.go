package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestNotReplicated503: with BRIDGE_REDIS_MIN_REPLICAS 1 and the only replica paused, an
// upsert and a delete are not confirmed: 503, never 201 or 204.
func TestNotReplicated503(t *testing.T) {
	st, replica := storetest.NewConfirmed(t, time.Second)
	c := newAPIOn(t, "", st)
	ctx := context.Background()
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`60000`), ID: "kept", Payload: str("x")}); err != nil {
		t.Fatal(err)
	}

	replica.Signal(t, syscall.SIGSTOP)
	defer replica.Signal(t, syscall.SIGCONT)
	var apiErr *client.APIError
	_, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`60000`), ID: "o-1", Payload: str("x")})
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || !strings.Contains(apiErr.Message, "replicas confirmed") {
		t.Fatalf("POST with the replica paused: %v, want 503 naming the replicas", err)
	}
	_, err = c.Cancel(ctx, "kept")
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable {
		t.Fatalf("DELETE with the replica paused: %v, want 503", err)
	}
	t.Log(apiErr.Message)
}
