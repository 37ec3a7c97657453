package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/delaybridge/delaybridge/httpapi"
)

// TestPauseResumeAPI: a pause shows in GET /v1/targets (the glob, and the targets it
// matches), twice at once changes once, a resume undoes it; each call is an audit entry;
// forged and huge globs, unknown fields and a missing target are 400 and change nothing.
func TestPauseResumeAPI(t *testing.T) {
	c, st := newAPI(t, "")
	ctx := context.Background()
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.eu", Delay: []byte(`"1h"`), Payload: str("p")}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	changed := 0
	for range 4 {
		wg.Go(func() {
			r, err := c.PauseTarget(ctx, "orders.*")
			if err != nil || !r.Paused || r.Since == 0 || r.OpID == "" {
				t.Errorf("pause = %+v, %v", r, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if r.Changed {
				changed++
			}
		})
	}
	wg.Wait()
	if changed != 1 {
		t.Fatalf("4 pauses at once changed %d times, want 1", changed)
	}
	ts, err := c.Targets(ctx, false)
	if err != nil || len(ts.Paused) != 1 || ts.Paused[0].Target != "orders.*" || len(ts.Targets) != 1 || !ts.Targets[0].Paused {
		t.Fatalf("targets = %+v, %v", ts, err)
	}
	for _, body := range []string{
		`{"target":"` + strings.Repeat("a", 257) + `"}`,
		`{"target":"` + strings.Repeat("*a", 17) + `"}`,
		`{"target":"["}`,
		`{"target":""}`,
		`{}`,
		`{"target":"x","also":1}`,
		`{"target":"x"} {"target":"y"}`,
	} {
		for _, path := range []string{"/v1/targets/pause", "/v1/targets/resume"} {
			if code, resp := rawCall(t, c, "POST", path, map[string]string{"Content-Type": "application/json"}, body); code != http.StatusBadRequest {
				t.Errorf("%s %.40s = %d %s, want 400", path, body, code, resp)
			}
		}
	}
	if ps, _ := st.Pauses(ctx); len(ps) != 1 {
		t.Fatalf("pause set after refused calls = %+v", ps)
	}
	r, err := c.ResumeTarget(ctx, "orders.*")
	if err != nil || r.Paused || !r.Changed {
		t.Fatalf("resume = %+v, %v", r, err)
	}
	if r, err := c.ResumeTarget(ctx, "orders.*"); err != nil || r.Changed {
		t.Fatalf("resume again = %+v, %v; want unchanged", r, err)
	}
	ts, _ = c.Targets(ctx, false)
	if len(ts.Paused) != 0 || ts.Targets[0].Paused {
		t.Fatalf("targets after resume = %+v", ts)
	}
	a, err := c.Audit(ctx, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]int{}
	for _, e := range a.Entries {
		var sel map[string]string
		_ = json.Unmarshal(e.Selector, &sel)
		if sel["target"] == "orders.*" && e.State == "done" {
			ops[e.Op]++
		}
	}
	if ops["pause"] != 4 || ops["resume"] != 2 {
		t.Fatalf("audit entries %v, want 4 pauses and 2 resumes, done", ops)
	}
}
