package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestOrderingKeyAPI: POST takes ordering_key; GET and the listing show it and, for a
// message its predecessor holds, held_by; GET and DELETE name a keyed message by id and
// ?ordering_key= (without it, or with another key, even one of the same shard, it is not
// found and not cancelled);
// the audit entry of the cancel names the key; a bulk change by id takes the key too.
func TestOrderingKeyAPI(t *testing.T) {
	c, st := newAPI(t, "")
	ctx := context.Background()
	const key = "order-4"
	for _, id := range []string{"o1-created", "o1-paid", "o1-cancelled"} {
		if st.ShardOf(id) == st.ShardOfKey(key) {
			t.Fatalf("%s lies in its key's shard: a lookup without key would reach it; pick another id", id)
		}
	}
	for _, m := range []struct{ id, delay string }{{"o1-created", `"1h"`}, {"o1-paid", `"30m"`}, {"o1-cancelled", `0`}} {
		if _, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.events", ID: m.id, OrderingKey: key,
			Delay: []byte(m.delay), Payload: str(m.id)}); err != nil {
			t.Fatalf("send %s: %v", m.id, err)
		}
	}
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.events", ID: "plain", Delay: []byte(`"1h"`)}); err != nil {
		t.Fatal(err)
	}

	m, err := c.GetKey(ctx, "o1-paid", key)
	if err != nil || m.OrderingKey != key || m.HeldBy != "o1-created" || m.PayloadBase64 != "bzEtcGFpZA==" {
		t.Fatalf("get with key = %+v, %v; want ordering_key %s, held_by o1-created", m, err, key)
	}
	if _, ok := m.Headers["x-delay-ordering-key"]; ok {
		t.Fatalf("ordering key shown as a header too: %v", m.Headers)
	}
	if m, err := c.GetKey(ctx, "o1-created", key); err != nil || m.HeldBy != "" {
		t.Fatalf("get of the head = %+v, %v; want no held_by", m, err)
	}
	if m, err := c.Get(ctx, "plain"); err != nil || m.OrderingKey != "" || m.HeldBy != "" {
		t.Fatalf("get of a message without key = %+v, %v", m, err)
	}
	sameShard := "" // another key of the same shard: the store finds the id there
	for i := 0; sameShard == ""; i++ {
		if k := fmt.Sprintf("order-x%d", i); st.ShardOfKey(k) == st.ShardOfKey(key) {
			sameShard = k
		}
	}
	var apiErr *client.APIError
	for _, other := range []string{"", "order-9", sameShard} {
		if _, err := c.GetKey(ctx, "o1-paid", other); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
			t.Fatalf("get with key %q: %v, want 404", other, err)
		}
		if ok, err := c.CancelKey(ctx, "o1-paid", other); ok || err != nil {
			t.Fatalf("cancel with key %q = %v, %v; want not found", other, ok, err)
		}
	}

	l, err := c.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]string{}
	for _, m := range l.Messages {
		got[m.ID] = [2]string{m.OrderingKey, m.HeldBy}
	}
	want := map[string][2]string{"o1-created": {key, ""}, "o1-paid": {key, "o1-created"},
		"o1-cancelled": {key, "o1-paid"}, "plain": {"", ""}}
	for id, w := range want {
		if got[id] != w {
			t.Fatalf("listed %s with key and held_by %q, want %q (all: %v)", id, got[id], w, got)
		}
	}

	res, err := c.Bulk(ctx, "reschedule", httpapi.BulkRequest{ID: "o1-paid", Shift: "+1m"})
	if err != nil || res.Matched != 0 {
		t.Fatalf("bulk by id without key = %+v, %v; want nothing matched", res, err)
	}
	res, err = c.Bulk(ctx, "reschedule", httpapi.BulkRequest{ID: "o1-paid", OrderingKey: key, Shift: "+1m"})
	if err != nil || res.Matched != 1 || res.Changed != 1 {
		t.Fatalf("bulk by id and key = %+v, %v; want it changed", res, err)
	}

	if ok, err := c.CancelKey(ctx, "o1-paid", key); !ok || err != nil {
		t.Fatalf("cancel with key = %v, %v", ok, err)
	}
	if m, err := c.GetKey(ctx, "o1-cancelled", key); err != nil || m.HeldBy != "o1-created" {
		t.Fatalf("after the cancel of o1-paid: %+v, %v; want o1-cancelled held by o1-created", m, err)
	}
	a, err := c.Audit(ctx, 1, "")
	if err != nil || len(a.Entries) != 1 {
		t.Fatalf("audit = %+v, %v", a, err)
	}
	if e := a.Entries[0]; e.Op != "cancel" || e.ID != "o1-paid" || e.OrderingKey != key || e.Changed != 1 {
		t.Fatalf("audit entry of the cancel = %+v; want cancel of o1-paid with its key", e)
	}
}

// TestOrderingKeyAPIRefused: a bad ordering key is 400 invalid_ordering_key with the API's
// field names, in a POST, in ?ordering_key= of GET and DELETE, and in a bulk selector;
// nothing is parked or cancelled.
func TestOrderingKeyAPIRefused(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	long := strings.Repeat("k", 257)
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", ID: "max", OrderingKey: long[:256]}); err != nil {
		t.Fatalf("a key of 256 bytes: %v", err)
	}
	for _, tt := range []struct {
		name string
		req  httpapi.PostRequest
		want string
	}{
		{"too long", httpapi.PostRequest{Target: "a.b", OrderingKey: long}, "invalid_ordering_key: invalid ordering key: ordering_key of 257 bytes (at most 256)"},
		{"recurring", httpapi.PostRequest{Target: "a.b", ID: "r", Every: "1m", OrderingKey: "k"}, "invalid_ordering_key: invalid ordering key: ordering_key on a recurring message (every)"},
		{"twice", httpapi.PostRequest{Target: "a.b", OrderingKey: "k", Headers: map[string]string{"x-delay-ordering-key": "j"}}, "invalid_ordering_key: invalid ordering key: ordering_key given 2 times"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Send(ctx, tt.req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("send = %v, want an error with %q", err, tt.want)
			}
		})
	}
	for _, q := range []string{"ordering_key=", "ordering_key=a&ordering_key=b", "ordering_key=" + long} {
		for _, method := range []string{http.MethodGet, http.MethodDelete} {
			status, body := rawCall(t, c, method, "/v1/messages/max?"+q, nil, "")
			if status != http.StatusBadRequest || !strings.Contains(body, `"invalid_ordering_key: invalid ordering key: ordering_key`) {
				t.Fatalf("%s ?%.40s = %d %s, want 400 invalid_ordering_key", method, q, status, body)
			}
		}
	}
	if m, err := c.GetKey(ctx, "max", long[:256]); err != nil || m.OrderingKey != long[:256] {
		t.Fatalf("get with a key of 256 bytes = %+v, %v", m, err)
	}
	for _, tt := range []struct {
		name string
		req  httpapi.BulkRequest
		want string
	}{
		{"without id", httpapi.BulkRequest{Target: "*", OrderingKey: "k"}, "invalid_request: ordering_key names the message id with it"},
		{"too long", httpapi.BulkRequest{ID: "max", OrderingKey: long}, "invalid_ordering_key: ordering_key: invalid ordering key: ordering_key of 257 bytes"},
	} {
		t.Run("bulk "+tt.name, func(t *testing.T) {
			_, err := c.Bulk(ctx, "cancel", tt.req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("bulk = %v, want an error with %q", err, tt.want)
			}
		})
	}
	l, err := c.List(ctx, url.Values{})
	if err != nil || len(l.Messages) != 1 || l.Messages[0].OrderingKey != long[:256] {
		t.Fatalf("list = %+v, %v; want only the message with the 256-byte key", l, err)
	}
}
