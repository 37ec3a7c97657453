package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestOrderingKeyAPICrossSite: a browser's cross-site POST with ordering_key and
// max_wait, or DELETE with ?ordering_key=, is refused (403) and changes nothing; the same
// from a client that is not a browser goes through.
func TestOrderingKeyAPICrossSite(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", ID: "keep", OrderingKey: "k", Delay: []byte(`"1h"`)}); err != nil {
		t.Fatal(err)
	}
	body := `{"target":"a.b","id":"forged","ordering_key":"k","max_wait":"1s","delay":"1h"}`
	for _, hdr := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
		{"Origin": "http://evil.example", "Content-Type": "application/json"},
	} {
		if code, resp := rawCall(t, c, http.MethodPost, "/v1/messages", hdr, body); code != http.StatusForbidden {
			t.Fatalf("cross-site POST %v = %d %s, want 403", hdr, code, resp)
		}
		if code, resp := rawCall(t, c, http.MethodDelete, "/v1/messages/keep?ordering_key=k", hdr, ""); code != http.StatusForbidden {
			t.Fatalf("cross-site DELETE %v = %d %s, want 403", hdr, code, resp)
		}
	}
	if _, err := c.GetKey(ctx, "keep", "k"); err != nil {
		t.Fatalf("the keyed message after cross-site DELETEs: %v", err)
	}
	var apiErr *client.APIError
	if _, err := c.GetKey(ctx, "forged", "k"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("the forged message: %v, want 404", err)
	}
	if code, resp := rawCall(t, c, http.MethodPost, "/v1/messages", map[string]string{"Content-Type": "application/json"}, body); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("the same POST without a browser's headers = %d %s", code, resp)
	}
}

// TestOrderingKeyAPIOddBytes: keys with a NUL or another control character are refused
// (400 invalid_ordering_key) in a POST and in ?ordering_key=, as are bytes that are not
// UTF-8 in ?ordering_key= (in a JSON body they are read as U+FFFD); a "*" in
// a key is a byte like any other: a bulk change by id with the key "*" or a prefix of the
// key does not reach the message, only its exact key does.
func TestOrderingKeyAPIOddBytes(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	for _, body := range []string{
		`{"target":"a.b","ordering_key":"k\u0000"}`,
		`{"target":"a.b","ordering_key":"\u001b[2J"}`,
	} {
		code, resp := rawCall(t, c, http.MethodPost, "/v1/messages", map[string]string{"Content-Type": "application/json"}, body)
		if code != http.StatusBadRequest || !strings.Contains(resp, "invalid_ordering_key") && !strings.Contains(resp, "invalid_request") {
			t.Fatalf("POST %q = %d %s, want 400", body, code, resp)
		}
	}
	// JSON is UTF-8: a body's invalid byte is read as U+FFFD, and the key is that, as shown.
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", ID: "ff"}); err != nil {
		t.Fatal(err)
	}
	code, resp := rawCall(t, c, http.MethodPost, "/v1/messages", map[string]string{"Content-Type": "application/json"},
		"{\"target\":\"a.b\",\"id\":\"ff\",\"ordering_key\":\"k\xff\"}")
	if code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("POST with a byte that is not UTF-8 = %d %s", code, resp)
	}
	if m, err := c.GetKey(ctx, "ff", "k\ufffd"); err != nil || m.OrderingKey != "k\ufffd" {
		t.Fatalf("get by the key as read = %+v, %v", m, err)
	}
	for _, q := range []string{"%00", "k%FF", "%1B"} {
		if code, resp := rawCall(t, c, http.MethodGet, "/v1/messages/x?ordering_key="+q, nil, ""); code != http.StatusBadRequest || !strings.Contains(resp, "invalid_ordering_key") {
			t.Fatalf("GET ?ordering_key=%s = %d %s, want 400 invalid_ordering_key", q, code, resp)
		}
	}
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", ID: "star", OrderingKey: "k*", Delay: []byte(`"1h"`)}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"*", "k", "k**"} {
		res, err := c.Bulk(ctx, "cancel", httpapi.BulkRequest{ID: "star", OrderingKey: key})
		if err != nil || res.Matched != 0 {
			t.Fatalf("bulk cancel with key %q = %+v, %v; want nothing matched", key, res, err)
		}
	}
	if m, err := c.GetKey(ctx, "star", "k*"); err != nil || m.OrderingKey != "k*" {
		t.Fatalf("get with the exact key = %+v, %v", m, err)
	}
	if res, err := c.Bulk(ctx, "cancel", httpapi.BulkRequest{ID: "star", OrderingKey: "k*"}); err != nil || res.Changed != 1 {
		t.Fatalf("bulk cancel with the exact key = %+v, %v", res, err)
	}
}

// TestOrderingKeyAPIConcurrentReplace: the same keyed replace sent by 32 clients at once,
// 4 times each, while a successor waits: one version is pending (the listing has it
// once), it keeps its place (the successor stays held by it), and nothing else is parked.
func TestOrderingKeyAPIConcurrentReplace(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	send := func(id, payload string) error {
		_, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", ID: id, OrderingKey: "order-9", Delay: []byte(`"1h"`), Payload: str(payload)})
		return err
	}
	if err := send("head", "v0"); err != nil {
		t.Fatal(err)
	}
	if err := send("next", "n"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 128)
	for g := range 32 {
		wg.Go(func() {
			for i := range 4 {
				if err := send("head", fmt.Sprintf("v%d-%d", g, i)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	l, err := c.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	held := map[string]string{}
	for _, m := range l.Messages {
		got[m.ID]++
		held[m.ID] = m.HeldBy
	}
	if len(l.Messages) != 2 || got["head"] != 1 || got["next"] != 1 || held["next"] != "head" || held["head"] != "" {
		t.Fatalf("after concurrent replaces: %+v; want head once, next held by it", l.Messages)
	}
}

// TestOrderingKeyAPIIntEdges: delays and max waits at and beyond int64's edges, negative
// ones and ones that overflow when added to now are refused with a clear 400, never
// wrapped into the past or parked.
func TestOrderingKeyAPIIntEdges(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	for _, tt := range []struct {
		name           string
		delay, maxWait string
		want           string
	}{
		{"delay int64 max ms", `9223372036854775807`, "", "delay"},
		{"delay beyond int64", `9223372036854775808`, "", "delay"},
		{"delay huge float", `1e300`, "", "delay"},
		{"delay negative", `-1`, "", "delay"},
		{"delay negative duration", `"-5s"`, "", "delay"},
		{"delay int64 min", `-9223372036854775808`, "", "delay"},
		{"delay max duration", `"2562047h47m16.854775807s"`, "", "delay"},
		{"max_wait int64 max ms", `"1s"`, `9223372036854775807`, "invalid_max_wait"},
		{"max_wait beyond int64", `"1s"`, `9223372036854775808`, "max_wait"},
		{"max_wait negative", `"1s"`, `-1`, "invalid_max_wait"},
		{"max_wait negative duration", `"1s"`, `"-3s"`, "invalid_max_wait"},
		{"max_wait max duration", `"1s"`, `"2562047h47m16.854775807s"`, "invalid_max_wait"},
		{"max_wait ISO huge", `"1s"`, `"P999999999999D"`, "invalid_max_wait"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httpapi.PostRequest{Target: "a.b", ID: "edge", OrderingKey: "k", Delay: []byte(tt.delay)}
			if tt.maxWait != "" {
				req.MaxWait = []byte(tt.maxWait)
			}
			_, err := c.Send(ctx, req)
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("send = %v, want 400 naming %q", err, tt.want)
			}
		})
	}
	if l, err := c.List(ctx, nil); err != nil || len(l.Messages) != 0 {
		t.Fatalf("parked after refusals: %+v, %v", l, err)
	}
}
