package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// TestPostCannotForgeInternalHeaders: a header named like the bridge's own output headers
// or a Nats-* header is not stored (row G8); one named with the bridge's reserved prefix
// (_delaybridge_headers would make the adapters publish an arbitrary header list, e.g.
// Nats-Rollup), in any case, is refused: 400 invalid_headers naming it, nothing parked.
func TestPostCannotForgeInternalHeaders(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	forged := headers.ToMetadata(headers.List{{Key: "Nats-Rollup", Value: "all"}, {Key: "Nats-Rollup", Value: "all"}}, nil)[headers.MetaHeaders]
	for _, name := range []string{headers.MetaHeaders, headers.MetaKafkaKey, "_DELAYBRIDGE_reply"} {
		_, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`60000`), ID: "r-1", Payload: str("x"),
			Headers: map[string]string{name: forged, "tenant": "acme"}})
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest ||
			!strings.Contains(apiErr.Message, "invalid_headers") || !strings.Contains(apiErr.Message, name) {
			t.Fatalf("header %s: %v, want 400 invalid_headers naming it", name, err)
		}
	}
	if _, err := c.Get(ctx, "r-1"); err == nil {
		t.Fatal("a message with a reserved header was parked")
	}
	_, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`60000`), ID: "f-1", Payload: str("x"),
		Headers: map[string]string{
			"Nats-Rollup": "all", "Nats-Expected-Last-Sequence": "1", "x-delay-source": "forged",
			"x-delay-due": "1", "x-delay-error": "e", "tenant": "acme",
		}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Get(ctx, "f-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Headers) != 2 || m.Headers["tenant"] != "acme" || m.Headers["x-delay-hops"] != "1" {
		t.Fatalf("stored headers %q, want only tenant and x-delay-hops", m.Headers)
	}
}
