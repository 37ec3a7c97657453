package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestSelectorBounds: a target selector over 256 bytes or with more than 16 "*" is 400 on
// every surface that takes one (GET /v1/messages, each POST /v1/bulk/*), and the Go
// client (the CLI's) returns the server's reason; at the bounds it is taken.
func TestSelectorBounds(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", Delay: []byte(`"1h"`), ID: "m", Payload: str("p")}); err != nil {
		t.Fatal(err)
	}
	atBound := []string{strings.Repeat("*", 16), strings.Repeat("*a", 16) + strings.Repeat("a", 256-32)}
	over := map[string]string{
		strings.Repeat("*", 17):          `17 "*", at most 16`,
		strings.Repeat("*", 10000):       "bytes, at most 256",
		strings.Repeat("a", 257):         "257 bytes, at most 256",
		strings.Repeat("*a.", 17):        `17 "*", at most 16`,
		"a.*" + strings.Repeat("b", 254): "257 bytes, at most 256",
	}
	for _, pattern := range atBound {
		if _, err := c.List(ctx, url.Values{"target": {pattern}}); err != nil {
			t.Errorf("list with a %d-byte selector: %v", len(pattern), err)
		}
		if _, err := c.Bulk(ctx, "cancel", httpapi.BulkRequest{Target: pattern, DryRun: true}); err != nil {
			t.Errorf("bulk with a %d-byte selector: %v", len(pattern), err)
		}
	}
	for pattern, want := range over {
		check := func(what string, err error) {
			t.Helper()
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest ||
				!strings.HasPrefix(apiErr.Message, "invalid_request: target: selector too long") || !strings.Contains(apiErr.Message, want) {
				t.Errorf("%s with a %d-byte selector: %v, want 400 naming %q", what, len(pattern), err, want)
			}
		}
		_, err := c.List(ctx, url.Values{"target": {pattern}})
		check("list", err)
		for _, op := range []string{"cancel", "deliver-now"} {
			_, err := c.Bulk(ctx, op, httpapi.BulkRequest{Target: pattern})
			check("bulk "+op, err)
		}
		_, err = c.Bulk(ctx, "reschedule", httpapi.BulkRequest{Target: pattern, Shift: "+1h"})
		check("bulk reschedule", err)
	}
	if _, err := c.Get(ctx, "m"); err != nil {
		t.Fatalf("refused selectors changed something: %v", err)
	}
}

// TestSelectorCompiledOnce: the target matcher a request builds compiles the glob once,
// not per entry: matching an entry allocates nothing (a compile per entry allocated its
// tokens and the name's runes, and took 3.8 s over a 10,000-star selector).
func TestSelectorCompiledOnce(t *testing.T) {
	pattern := strings.Repeat("*a", 15) + "*"
	target := "nats:" + strings.Repeat("ab", 120)
	q, err := listQuery(url.Values{"target": {pattern}})
	if err != nil {
		t.Fatal(err)
	}
	sel, _, err := (&api{cfg: Config{Now: time.Now}}).bulkRequest("cancel", httpapi.BulkRequest{Target: pattern})
	if err != nil {
		t.Fatal(err)
	}
	if !q.Match(target) || !sel.Match(target) {
		t.Fatal("no match")
	}
	for name, match := range map[string]func(string) bool{"list": q.Match, "bulk": sel.Match} {
		if n := testing.AllocsPerRun(100, func() { match(target) }); n != 0 {
			t.Errorf("%s: %v allocations per entry matched, want 0 (the glob compiled per entry)", name, n)
		}
	}
}
