package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
)

// TestPostMaxWait: max_wait (string or integer ms, with id) bounds the due time of the
// replacements of a pending message by its first version's parking time plus the max
// wait; GET and the listing show max_wait and due_by; a replacement without max_wait
// keeps the bound; max_wait without id, or a bad one, is 400 invalid_max_wait with the
// API's field names.
func TestPostMaxWait(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	send := func(delay, maxWait, payload string) httpapi.PostResponse {
		t.Helper()
		req := httpapi.PostRequest{Target: "digest.out", ID: "digest-1", Delay: []byte(delay), Payload: str(payload)}
		if maxWait != "" {
			req.MaxWait = []byte(maxWait)
		}
		resp, err := c.Send(ctx, req)
		if err != nil {
			t.Fatalf("send %s %s: %v", delay, maxWait, err)
		}
		return resp
	}
	before := time.Now().UnixMilli()
	first := send(`"1h"`, `"3m"`, "v1")
	if first.Due < before+180_000-1000 || first.Due > time.Now().UnixMilli()+180_000+1000 {
		t.Fatalf("first due %d, want about now + 3m (%d)", first.Due, before+180_000)
	}
	if again := send(`"1h"`, `180000`, "v2"); again.Due != first.Due || again.InDelivery {
		t.Fatalf("replacement due %d, want the bound %d", again.Due, first.Due)
	}
	if again := send(`"2h"`, "", "v3"); again.Due != first.Due {
		t.Fatalf("replacement without max_wait due %d, want the bound %d", again.Due, first.Due)
	}
	m, err := c.Get(ctx, "digest-1")
	if err != nil || m.MaxWait == nil || *m.MaxWait != 180_000 || m.DueBy == nil || *m.DueBy != first.Due || m.Due != first.Due || m.PayloadBase64 != "djM=" {
		t.Fatalf("get = %+v, %v; want max_wait 180000, due_by %d, the latest payload", m, err, first.Due)
	}
	if _, ok := m.Headers["x-delay-max-wait"]; ok {
		t.Fatalf("max wait shown as a header too: %v", m.Headers)
	}
	l, err := c.List(ctx, nil)
	if err != nil || len(l.Messages) != 1 || l.Messages[0].MaxWait != 180_000 || l.Messages[0].DueBy != first.Due {
		t.Fatalf("list = %+v, %v; want max_wait and due_by", l, err)
	}

	for _, tt := range []struct {
		name string
		req  httpapi.PostRequest
		want string
	}{
		{"without id", httpapi.PostRequest{Target: "a.b", MaxWait: []byte(`"3s"`)}, "invalid_max_wait: invalid max-wait: max_wait bounds the replacements of a message with id"},
		{"zero", httpapi.PostRequest{Target: "a.b", ID: "z", MaxWait: []byte(`0`)}, "invalid_max_wait"},
		{"beyond the maximum delay", httpapi.PostRequest{Target: "a.b", ID: "z", MaxWait: []byte(`"25h"`)}, "invalid_max_wait"},
		{"not a duration", httpapi.PostRequest{Target: "a.b", ID: "z", MaxWait: []byte(`"soon"`)}, "invalid_max_wait: invalid max-wait: max_wait"},
		{"with every", httpapi.PostRequest{Target: "a.b", ID: "z", Every: "1m", MaxWait: []byte(`"3s"`)}, "invalid_max_wait"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Send(ctx, tt.req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("send = %v, want an error with %q", err, tt.want)
			}
		})
	}
}
