package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os/exec"
	"os/user"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// parkMany parks n messages "<prefix>-<i>" for target through c, 16 at a time, and
// returns their due times.
func parkMany(t *testing.T, c *client.Client, prefix, target string, n int) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	dues := make(map[string]int64, n)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				p := "x"
				res, err := c.Send(context.Background(), httpapi.PostRequest{ID: fmt.Sprintf("%s-%05d", prefix, i), Target: target, Delay: []byte(`"2h"`), Payload: &p})
				if err != nil {
					t.Errorf("park %d: %v", i, err)
					continue
				}
				mu.Lock()
				dues[res.ID] = res.Due
				mu.Unlock()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return dues
}

// listDues reads every parked message of target through c (GET /v1/messages pages).
func listDues(t *testing.T, c *client.Client, target string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	q := url.Values{"target": {target}, "limit": {"1000"}}
	for {
		page, err := c.List(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.Messages {
			out[m.ID] = m.Due
		}
		if page.NextCursor == nil {
			return out
		}
		q.Set("cursor", *page.NextCursor)
	}
}

// auditEntry finds op id in the audit log through c.
func findAudit(t *testing.T, c *client.Client, op string) httpapi.AuditEntry {
	t.Helper()
	cur := ""
	for {
		p, err := c.Audit(context.Background(), 1000, cur)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Entries {
			if e.OpID == op {
				return e
			}
		}
		if p.NextCursor == nil {
			t.Fatalf("no audit entry %s", op)
		}
		cur = *p.NextCursor
	}
}

// TestBulkShiftKilledAndResumed is issue 27 item 2: the replica serving a +1h shift of
// 10,000 messages is killed (SIGKILL) in the middle; its audit entry shows the counts of
// the messages shifted so far, running under the operation's lease and interrupted once
// it ran out (issue 37 item 5); messages parked after the shift began are left alone;
// `bridge bulk resume` on another replica finishes it while a third replica's resume of
// the same operation races it: every message is shifted exactly once, the entry is done
// with 10,000 matched and changed.
func TestBulkShiftKilledAndResumed(t *testing.T) {
	s := newStack(t)
	env := maps.Clone(s.env)
	env["BRIDGE_SHARDS"] = "16"
	a := startBridge(t, maps.Clone(env))
	b := startBridge(t, maps.Clone(env))
	c3 := startBridge(t, maps.Clone(env))
	ca := &client.Client{Base: "http://" + a.APIAddr, Actor: "alice"}
	cb := &client.Client{Base: "http://" + b.APIAddr}
	const n = 10_000
	dues := parkMany(t, cb, "k", "audit.shift", n)

	opts, err := redis.ParseURL(s.env["BRIDGE_REDIS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	prefix := s.env["BRIDGE_KEY_PREFIX"]
	shift := make(chan error, 1)
	go func() {
		_, err := ca.Bulk(context.Background(), "reschedule", httpapi.BulkRequest{Target: "audit.*", Shift: "+1h"})
		shift <- err
	}()
	// Kill replica A as soon as the shift has saved progress in shard 7 of 16 (about half
	// of it is done: the shards go in order).
	deadline := time.Now().Add(20 * time.Second)
	for rdb.HLen(context.Background(), fmt.Sprintf("{%s:7}:b", prefix)).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the shift saved no progress within 20s")
		}
	}
	a.Kill(t)
	if err := <-shift; err == nil {
		t.Fatal("the shift answered although its replica was killed")
	}
	mid := listDues(t, cb, "audit.*")
	shifted := 0
	for id, due := range mid {
		if due == dues[id]+3_600_000 {
			shifted++
		}
	}
	if shifted == 0 || shifted == n {
		t.Fatalf("%d of %d shifted when the replica was killed: want the middle", shifted, n)
	}
	t.Logf("killed with %d of %d shifted", shifted, n)
	late := parkMany(t, cb, "late", "audit.shift", 100)

	page, err := cb.Audit(context.Background(), 10, "")
	if err != nil || len(page.Entries) == 0 || page.Entries[0].Op != "reschedule" {
		t.Fatalf("audit: %+v %v", page, err)
	}
	op := page.Entries[0]
	if op.Actor != "alice" || !op.Resumable || op.Shift != "+1h" || op.State != "running" {
		t.Fatalf("the killed shift's entry: %+v, want running (under its lease) by alice", op)
	}
	// The counts so far, under the lease and once interrupted: what was shifted (issue 37
	// item 5: they read 0 until the first lease renewal, 3 s into the run).
	if op.Matched != int64(shifted) || op.Changed != int64(shifted) {
		t.Fatalf("the killed shift's entry: matched %d, changed %d; %d were shifted", op.Matched, op.Changed, shifted)
	}
	for {
		e := findAudit(t, cb, op.OpID)
		if e.State == "interrupted" {
			if e.Matched != int64(shifted) || e.Changed != int64(shifted) {
				t.Fatalf("the interrupted entry: matched %d, changed %d; %d were shifted", e.Matched, e.Changed, shifted)
			}
			break
		}
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatal("the entry never showed interrupted")
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Two replicas resume it at once: the CLI on B, the API on the third.
	var wg sync.WaitGroup
	var cliOut string
	var cliErr error
	wg.Go(func() {
		cmd := exec.Command(bridgeBin, "bulk", "resume", "--api", b.APIAddr, op.OpID)
		cmd.Env = []string{"USER=fallback"}
		out, err := cmd.CombinedOutput()
		cliOut, cliErr = string(out), err
	})
	var other httpapi.BulkResponse
	var otherErr error
	wg.Go(func() {
		c := &client.Client{Base: "http://" + c3.APIAddr}
		for {
			other, otherErr = c.Resume(context.Background(), op.OpID)
			if otherErr != nil || other.NextCursor == nil {
				return
			}
		}
	})
	wg.Wait()
	if cliErr != nil {
		t.Fatalf("bridge bulk resume: %v\n%s", cliErr, cliOut)
	}
	if apiErr, ok := otherErr.(*client.APIError); otherErr != nil && (!ok || apiErr.Status != http.StatusConflict) {
		t.Fatalf("the racing resume: %v, want done or 409", otherErr)
	}
	t.Logf("CLI: %s; racing resume: %+v %v", strings.TrimSpace(cliOut), other, otherErr)

	after := listDues(t, cb, "audit.*")
	for id, due := range dues {
		if after[id] != due+3_600_000 {
			t.Fatalf("%s moved by %d ms, want exactly 1h", id, after[id]-due)
		}
	}
	for id, due := range late {
		if after[id] != due {
			t.Fatalf("%s, parked after the shift began, moved by %d ms", id, after[id]-due)
		}
	}
	e := findAudit(t, cb, op.OpID)
	if e.State != "done" || e.Matched != n || e.Changed != n {
		t.Fatalf("entry after the resume: %+v, want done %d/%d", e, n, n)
	}
}

// TestAuditCLI: `bridge bulk` and `bridge cancel` are recorded with the OS user as actor,
// `bridge audit` lists them newest first (text and JSON), and refuses a made-up cursor.
func TestAuditCLI(t *testing.T) {
	s := newStack(t)
	b := startBridge(t, maps.Clone(s.env))
	c := &client.Client{Base: "http://" + b.APIAddr}
	parkMany(t, c, "cli", "audit.cli", 5)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bridgeBin, append(args[:1:1], append([]string{"--api", b.APIAddr}, args[1:]...)...)...)
		if args[0] == "bulk" {
			cmd = exec.Command(bridgeBin, append([]string{"bulk", args[1], "--api", b.APIAddr}, args[2:]...)...)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bridge %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := run("bulk", "cancel", "--target", "audit.cli", "--dry-run")
	if !strings.Contains(out, "matched 5") || !strings.Contains(out, "(op ") {
		t.Fatalf("bulk dry run: %s", out)
	}
	run("cancel", "cli-00001")
	me := "-"
	if u, err := user.Current(); err == nil {
		me = u.Username
	}
	text := run("audit")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "cancel") || !strings.Contains(lines[1], "id=cli-00001") ||
		!strings.Contains(lines[2], `{"target":"audit.cli"}`) || !strings.Contains(lines[2], "true") || !strings.Contains(lines[1], " "+me+" ") {
		t.Fatalf("bridge audit:\n%s", text)
	}
	var e httpapi.AuditEntry
	if err := json.Unmarshal([]byte(strings.Split(run("audit", "--json", "--limit", "1"), "\n")[0]), &e); err != nil ||
		e.Op != "cancel" || e.Actor != me || e.State != "done" || e.Matched != 1 {
		t.Fatalf("bridge audit --json: %+v %v", e, err)
	}
	cmd := exec.Command(bridgeBin, "audit", "--api", b.APIAddr, "--cursor", "bm9wZQ.AAAA")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "invalid_cursor") {
		t.Fatalf("a made-up cursor: %v\n%s", err, out)
	}
	cmd = exec.Command(bridgeBin, "bulk", "resume", "--api", b.APIAddr, "{delay:0}:z")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "invalid_request") {
		t.Fatalf("a forged op id: %v\n%s", err, out)
	}
}
