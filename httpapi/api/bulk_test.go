package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestBulkEndpoints: reschedule (dry run, then a shift), deliver-now by due range in RFC
// 3339, cancel by a broker:name glob; the answers count what matched and changed.
func TestBulkEndpoints(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	dues := map[string]int64{}
	for _, m := range []struct{ id, target string }{{"a1", "a.x"}, {"a2", "a.x"}, {"a3", "a.y"}, {"b1", "b.y"}, {"b2", "b.y"}} {
		resp, err := c.Send(ctx, httpapi.PostRequest{Target: m.target, Delay: []byte(`"1h"`), ID: m.id, Payload: str("x")})
		if err != nil {
			t.Fatal(err)
		}
		dues[m.id] = resp.Due
	}
	bulk := func(op string, req httpapi.BulkRequest) httpapi.BulkResponse {
		t.Helper()
		res, err := c.Bulk(ctx, op, req)
		if err != nil || res.NextCursor != nil {
			t.Fatalf("%s %+v: %+v, %v", op, req, res, err)
		}
		return res
	}
	if res := bulk("reschedule", httpapi.BulkRequest{Target: "a.*", Shift: "+1h", DryRun: true}); res.Matched != 3 || res.Changed != 0 {
		t.Fatalf("dry run: %+v", res)
	}
	if res := bulk("reschedule", httpapi.BulkRequest{Target: "a.*", Shift: "+1h"}); res.Matched != 3 || res.Changed != 3 {
		t.Fatalf("shift: %+v", res)
	}
	if m, err := c.Get(ctx, "a1"); err != nil || m.Due != dues["a1"]+3_600_000 {
		t.Fatalf("a1 after +1h: %+v %v", m, err)
	}
	from := time.UnixMilli(dues["a1"] + 3_600_000 - 1000).UTC().Format(time.RFC3339Nano)
	req := httpapi.BulkRequest{Target: "a.x", DueFrom: []byte(`"` + from + `"`), DueTo: []byte(strconv.FormatInt(dues["a3"]+3_600_000, 10))}
	if res := bulk("deliver-now", req); res.Matched != 2 || res.Changed != 2 {
		t.Fatalf("deliver-now: %+v", res)
	}
	if m, err := c.Get(ctx, "a2"); err != nil || m.Due > time.Now().UnixMilli()+1000 {
		t.Fatalf("a2 after deliver-now: %+v %v", m, err)
	}
	if res := bulk("reschedule", httpapi.BulkRequest{ID: "b1", Shift: "+2h", DryRun: true}); res.Matched != 1 || res.Changed != 0 {
		t.Fatalf("one id, dry run: %+v", res)
	}
	if res := bulk("reschedule", httpapi.BulkRequest{ID: "b1", Target: "a.*", Shift: "+2h"}); res.Matched != 0 {
		t.Fatalf("one id of another target: %+v", res)
	}
	if res := bulk("reschedule", httpapi.BulkRequest{ID: "b1", Shift: "+2h"}); res.Matched != 1 || res.Changed != 1 {
		t.Fatalf("one id: %+v", res)
	}
	if m, err := c.Get(ctx, "b1"); err != nil || m.Due != dues["b1"]+7_200_000 {
		t.Fatalf("b1 after +2h: %+v %v", m, err)
	}
	if res := bulk("cancel", httpapi.BulkRequest{ID: "nobody"}); res.Matched != 0 {
		t.Fatalf("an unknown id: %+v", res)
	}
	if res := bulk("cancel", httpapi.BulkRequest{Target: "nats:b.*", DueTo: []byte(`0`)}); res.Matched != 0 {
		t.Fatalf("due_to 0 (1970) matched %+v", res)
	}
	if res := bulk("cancel", httpapi.BulkRequest{Target: "nats:b.*"}); res.Matched != 2 || res.Changed != 2 {
		t.Fatalf("cancel: %+v", res)
	}
	var apiErr *client.APIError
	if _, err := c.Get(ctx, "b1"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("b1 after cancel: %v", err)
	}
}

func TestBulkRejects(t *testing.T) {
	c, _ := newAPI(t, "")
	for _, tc := range []struct {
		op   string
		req  httpapi.BulkRequest
		want string
	}{
		{"cancel", httpapi.BulkRequest{}, "at least one of id, target, due_from, due_to"},
		{"cancel", httpapi.BulkRequest{ID: "a", Cursor: "x"}, "takes no cursor"},
		{"cancel", httpapi.BulkRequest{Target: "["}, "not a valid glob"},
		{"cancel", httpapi.BulkRequest{DueFrom: []byte(`"tomorrow"`)}, "due_from"},
		{"cancel", httpapi.BulkRequest{DueFrom: []byte(`2000`), DueTo: []byte(`1000`)}, "due_to is before due_from"},
		{"cancel", httpapi.BulkRequest{Target: "a", Shift: "+1h"}, "cancel takes neither"},
		{"reschedule", httpapi.BulkRequest{Target: "a"}, "exactly one of shift and deliver_at"},
		{"reschedule", httpapi.BulkRequest{Target: "a", Shift: "+1h", DeliverAt: []byte(`1`)}, "exactly one"},
		{"reschedule", httpapi.BulkRequest{Target: "a", Shift: "soon"}, "signed Go duration"},
		{"reschedule", httpapi.BulkRequest{Target: "a", Shift: "0s"}, "signed Go duration"},
		{"explode", httpapi.BulkRequest{Target: "a"}, "unknown bulk operation"},
	} {
		_, err := c.Bulk(context.Background(), tc.op, tc.req)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, tc.want) ||
			!strings.HasPrefix(apiErr.Message, "invalid_request: ") {
			t.Errorf("%s %+v: %v, want 400 invalid_request containing %q", tc.op, tc.req, err, tc.want)
		}
	}
}

func TestBulkNeedsTheToken(t *testing.T) {
	c, _ := newAPI(t, "s3cret")
	c.Token = ""
	var apiErr *client.APIError
	if _, err := c.Bulk(context.Background(), "cancel", httpapi.BulkRequest{Target: "a"}); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("without token: %v", err)
	}
}
