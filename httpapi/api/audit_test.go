package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// auditAll reads the whole audit log through the API, newest first.
func auditAll(t *testing.T, c *client.Client) []httpapi.AuditEntry {
	t.Helper()
	var out []httpapi.AuditEntry
	cur := ""
	for {
		p, err := c.Audit(context.Background(), 3, cur)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Entries...)
		if p.NextCursor == nil {
			return out
		}
		cur = *p.NextCursor
	}
}

// TestAuditRecordsChanges: a single cancel, a dry run, a shift by selector and one by id
// are recorded newest first with op id, selector or id, dry run, counts, state, the actor
// header (cleaned) and the caller's address; the bulk answers name their op id.
func TestAuditRecordsChanges(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	for i := range 4 {
		if _, err := c.Send(ctx, httpapi.PostRequest{Target: "aud.x", Delay: []byte(`"1h"`), ID: fmt.Sprintf("a%d", i), Payload: str("x")}); err != nil {
			t.Fatal(err)
		}
	}
	c.Actor = "alice"
	if ok, err := c.Cancel(ctx, "a0"); !ok || err != nil {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	c.Actor = "bob\tx" + strings.Repeat("é", 100)
	dry, err := c.Bulk(ctx, "reschedule", httpapi.BulkRequest{Target: "aud.*", Shift: "+1h", DryRun: true})
	if err != nil || dry.OpID == "" || dry.Matched != 3 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	c.Actor = ""
	real, err := c.Bulk(ctx, "reschedule", httpapi.BulkRequest{Target: "aud.*", DueFrom: []byte(`1000`), Shift: "+1h"})
	if err != nil || real.OpID == "" || real.OpID == dry.OpID || real.Changed != 3 {
		t.Fatalf("shift: %+v %v", real, err)
	}
	one, err := c.Bulk(ctx, "deliver-now", httpapi.BulkRequest{ID: "a1"})
	if err != nil || one.Changed != 1 {
		t.Fatalf("deliver-now a1: %+v %v", one, err)
	}
	got := auditAll(t, c)
	if len(got) != 4 {
		t.Fatalf("%d entries: %+v", len(got), got)
	}
	one_, real_, dry_, cancel := got[0], got[1], got[2], got[3]
	if one_.OpID != one.OpID || one_.Op != "deliver-now" || one_.ID != "a1" || one_.Matched != 1 || one_.Changed != 1 || one_.State != "done" || !one_.Resumable {
		t.Errorf("deliver-now entry %+v", one_)
	}
	if real_.OpID != real.OpID || real_.Op != "reschedule" || string(real_.Selector) != `{"due_from":1000,"target":"aud.*"}` ||
		real_.Shift != "+1h" || real_.DryRun || real_.Matched != 3 || real_.Changed != 3 || real_.State != "done" || real_.Actor != "" {
		t.Errorf("shift entry %+v", real_)
	}
	if dry_.OpID != dry.OpID || !dry_.DryRun || dry_.Matched != 3 || dry_.Changed != 0 ||
		!strings.HasPrefix(dry_.Actor, "bob?xéé") || len(dry_.Actor) > maxActor {
		t.Errorf("dry run entry %+v (actor %q)", dry_, dry_.Actor)
	}
	if cancel.Op != "cancel" || cancel.ID != "a0" || cancel.Matched != 1 || cancel.Changed != 1 || cancel.Actor != "alice" ||
		!strings.HasPrefix(cancel.Remote, "127.0.0.1:") || cancel.State != "done" || cancel.Resumable {
		t.Errorf("cancel entry %+v", cancel)
	}
	for i := 1; i < len(got); i++ {
		if got[i].At > got[i-1].At {
			t.Errorf("entry %d is newer than entry %d", i, i-1)
		}
	}
	// A cancel of an unknown id is recorded too, as nothing changed.
	if ok, _ := c.Cancel(ctx, "nobody"); ok {
		t.Fatal("cancel of an unknown id")
	}
	if e := auditAll(t, c)[0]; e.ID != "nobody" || e.Matched != 0 || e.State != "done" {
		t.Errorf("unknown id entry %+v", e)
	}
}

// TestAuditCursorsAndLimits: forged, altered and foreign cursors are 400 invalid_cursor;
// bad limits and unknown parameters 400.
func TestAuditCursorsAndLimits(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	for i := range 3 {
		c.Cancel(ctx, fmt.Sprintf("x%d", i))
	}
	p, err := c.Audit(ctx, 1, "")
	if err != nil || p.NextCursor == nil || len(p.Entries) != 1 {
		t.Fatalf("%+v %v", p, err)
	}
	list, err := c.List(ctx, url.Values{"limit": {"1"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = list
	forged := base64.RawURLEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")) + "." + strings.Split(*p.NextCursor, ".")[1]
	for _, cur := range []string{"nonsense", forged, *p.NextCursor + "A", base64.RawURLEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))} {
		_, err := c.Audit(ctx, 1, cur)
		wantInvalidCursor(t, "audit cursor "+cur, err)
	}
	// An audit cursor is no list or bulk cursor.
	_, err = c.List(ctx, url.Values{"cursor": {*p.NextCursor}})
	wantInvalidCursor(t, "list with an audit cursor", err)
	_, err = c.Bulk(ctx, "cancel", httpapi.BulkRequest{Target: "x", Cursor: *p.NextCursor})
	wantInvalidCursor(t, "bulk with an audit cursor", err)
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "after=abc"} {
		req, _ := http.NewRequest("GET", c.Base+"/v1/audit?"+q, nil)
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, resp.StatusCode)
		}
	}
}

// TestResumeEndpoint: an operation cut off by its time is finished by POST
// /v1/bulk/resume, every message shifted once; op ids that are malformed (400), unknown
// (404), no bulk operation (409) or done (200, nothing changed) are answered so.
func TestResumeEndpoint(t *testing.T) {
	c := newAPIBudget(t) // one chunk per request
	ctx := context.Background()
	dues := map[string]int64{}
	for i := range 1100 {
		res, err := c.Send(ctx, httpapi.PostRequest{Target: "res.x", Delay: []byte(`"1h"`), ID: fmt.Sprintf("r%04d", i), Payload: str("p")})
		if err != nil {
			t.Fatal(err)
		}
		dues[res.ID] = res.Due
	}
	first, err := c.Bulk(ctx, "reschedule", httpapi.BulkRequest{Target: "res.*", Shift: "+1h"})
	if err != nil || first.NextCursor == nil || first.OpID == "" {
		t.Fatalf("first request: %+v %v, want a cut-off operation", first, err)
	}
	total, calls := first.Changed, 0
	for res := first; res.NextCursor != nil; calls++ {
		if res, err = c.Resume(ctx, first.OpID); err != nil || res.OpID != first.OpID || calls > 100 {
			t.Fatalf("resume %d: %+v %v", calls, res, err)
		}
		total += res.Changed
	}
	if total != 1100 {
		t.Fatalf("changed %d in all, want 1100", total)
	}
	for id, due := range dues {
		if m, err := c.Get(ctx, id); err != nil || m.Due != due+3_600_000 {
			t.Fatalf("%s due +%d, %v; want shifted once", id, m.Due-due, err)
		}
	}
	if e := auditAll(t, c)[0]; e.OpID != first.OpID || e.State != "done" || e.Changed != 1100 || e.Matched != 1100 {
		t.Fatalf("entry %+v, want done 1100/1100", e)
	}
	again, err := c.Resume(ctx, first.OpID)
	if err != nil || again.Changed != 0 || again.NextCursor != nil {
		t.Fatalf("resume of a finished operation: %+v %v", again, err)
	}
	// The finished operation's cursor: nothing again.
	if res, err := c.Bulk(ctx, "reschedule", httpapi.BulkRequest{Target: "res.*", Shift: "+1h", Cursor: *first.NextCursor}); err != nil || res.Changed != 0 {
		t.Fatalf("its old cursor: %+v %v", res, err)
	}
	c.Cancel(ctx, "nobody")
	single := auditAll(t, c)[0].OpID
	want := func(id string, status int, prefix string) {
		t.Helper()
		_, err := c.Resume(ctx, id)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != status || !strings.HasPrefix(apiErr.Message, prefix) {
			t.Errorf("resume %q: %v, want %d %s", id, err, status, prefix)
		}
	}
	for _, id := range []string{"", "../x", "{delay:0}:z", strings.ToUpper(first.OpID), first.OpID + "0", "*"} {
		want(id, http.StatusBadRequest, "invalid_request")
	}
	want("0123456789abcdef0123456789abcdef", http.StatusNotFound, "unknown_op")
	want(single, http.StatusConflict, "not_resumable")
}
