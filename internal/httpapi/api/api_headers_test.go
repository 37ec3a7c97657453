package api

import (
	"context"
	"testing"

	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/httpapi"
)

// TestPostCannotForgeInternalHeaders: a header named like the bridge's internal metadata
// (_delaybridge_headers would make the adapters publish an arbitrary header list, e.g.
// Nats-Rollup) or like its own output headers is not stored (row G8).
func TestPostCannotForgeInternalHeaders(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	forged := headers.ToMetadata(headers.List{{Key: "Nats-Rollup", Value: "all"}, {Key: "Nats-Rollup", Value: "all"}}, nil)[headers.MetaHeaders]
	_, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`60000`), ID: "f-1", Payload: str("x"),
		Headers: map[string]string{
			headers.MetaHeaders: forged, headers.MetaKafkaKey: "k", "_DELAYBRIDGE_reply": "r",
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
