package e2e

import (
	"maps"
	"os/exec"
	"os/user"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// runCLIEnv runs a bridge command with env (and nothing else) and returns its combined
// output.
func runCLIEnv(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bridgeBin, args...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// regexpLine reports whether a whole line of s matches re.
func regexpLine(s, re string) bool {
	return regexp.MustCompile(`(?m)^` + re + `\s*$`).MatchString(s)
}

// TestRedriveAfterFix: the operator's story. Messages to a target the allow-list does not
// name are dead-lettered (target_not_allowed), with an invalid one (invalid_delay); the
// operator widens the allow-list, restarts the bridge, counts the dead letters with
// `bridge redrive --dry-run`, then redrives target_not_allowed only: those reach their
// target (with their payloads, once), the invalid one stays in the dead-letter stream.
// Both runs are in the audit log (actor the OS user, remote "cli"); with an unreachable
// Redis a real redrive is refused (its letters stay), a dry run warns and counts, and
// --no-audit runs unrecorded.
func TestRedriveAfterFix(t *testing.T) {
	s := newStack(t)
	dlqStream := s.createStream(t, "DLQ", s.name("delay.dlq"))
	target := s.name("billing.due")
	env := map[string]string{}
	for k, v := range s.env {
		env[k] = v
	}
	env["BRIDGE_TARGET_ALLOW"] = s.name("orders.*")
	b := startBridge(t, env)
	for _, p := range []string{"p1", "p2", "p3"} {
		hdr := nats.Header{}
		hdr.Set("x-target", target)
		hdr.Set("x-delay", "100ms")
		hdr.Set("x-delay-id", "redrive-"+p)
		if reply := request(t, s.nc, s.name("delay.in"), hdr, p); !strings.HasPrefix(reply["error"].(string), "target_not_allowed") {
			t.Fatalf("reply %v, want target_not_allowed", reply)
		}
	}
	bad := nats.Header{}
	bad.Set("x-target", target)
	bad.Set("x-delay", "soon")
	if reply := request(t, s.nc, s.name("delay.in"), bad, "bad"); !strings.HasPrefix(reply["error"].(string), "invalid_delay") {
		t.Fatalf("reply %v, want invalid_delay", reply)
	}
	if err, _ := b.Stop(t, 15*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}

	fixed := startBridge(t, s.env) // the fix: every target allowed
	arrivals := subscribe(t, s.nc, target)
	out, err := runCLIEnv(t, s.env, "redrive", "--dry-run")
	if err != nil || !regexpLine(out, `target_not_allowed\s+3\s+0`) || !regexpLine(out, `invalid_delay\s+1\s+0`) {
		t.Fatalf("redrive --dry-run: %v\n%s", err, out)
	}
	noRedis := maps.Clone(s.env)
	noRedis["BRIDGE_REDIS_URL"] = "redis://" + freeAddr(t)
	out, err = runCLIEnv(t, noRedis, "redrive", "--dry-run")
	if err != nil || !strings.Contains(out, "warning: this dry run is not recorded") || !regexpLine(out, `target_not_allowed\s+3\s+0`) {
		t.Fatalf("redrive --dry-run, Redis unreachable: %v\n%s", err, out)
	}
	out, err = runCLIEnv(t, noRedis, "redrive", "--reason", "target_not_allowed")
	if err == nil || !strings.Contains(out, "redrive not run") || !strings.Contains(out, "BRIDGE_REDIS_URL") || !strings.Contains(out, "--no-audit") {
		t.Fatalf("redrive, Redis unreachable: %v\n%s", err, out)
	}
	select {
	case a := <-arrivals:
		t.Fatalf("a dry run delivered %q", a.msg.Data)
	case <-time.After(500 * time.Millisecond):
	}
	out, err = runCLIEnv(t, s.env, "redrive", "--reason", "target_not_allowed")
	if err != nil || !regexpLine(out, `target_not_allowed\s+3\s+0\s+0\s+0`) || !regexpLine(out, `invalid_delay\s+0\s+0\s+1\s+0`) {
		t.Fatalf("redrive: %v\n%s", err, out)
	}
	got := map[string]int{}
	for range 3 {
		a := receive(t, arrivals, 10*time.Second)
		got[string(a.msg.Data)]++
		if a.msg.Header.Get("x-delay-error") != "" || !strings.HasPrefix(a.msg.Header.Get("x-delay-id"), "redrive-") {
			t.Errorf("delivered headers %v", a.msg.Header)
		}
	}
	if got["p1"] != 1 || got["p2"] != 1 || got["p3"] != 1 {
		t.Fatalf("delivered %v, want p1, p2, p3 once each", got)
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), dlqStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("dead-letter stream holds %d messages, want the invalid one", info.State.Msgs)
	}
	select {
	case a := <-arrivals:
		t.Fatalf("delivered again: %q", a.msg.Data)
	case <-time.After(time.Second):
	}

	out, err = runCLIEnv(t, noRedis, "redrive", "--no-audit", "--reason", "invalid_delay")
	if err != nil || !regexpLine(out, `invalid_delay\s+0\s+1\s+0\s+0`) {
		t.Fatalf("redrive --no-audit, Redis unreachable: %v\n%s", err, out)
	}
	checkRedriveAudit(t, &client.Client{Base: "http://" + fixed.APIAddr}, 3, 1)
}

// checkRedriveAudit checks the audit log's redrive entries: the dry run and the real run
// of TestRedriveAfterFix (selected: the letters of target_not_allowed, then the others),
// by the OS user from "cli", and nothing more.
func checkRedriveAudit(t *testing.T, c *client.Client, selected, others int64) {
	t.Helper()
	page, err := c.Audit(t.Context(), 100, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []httpapi.AuditEntry
	for _, e := range page.Entries {
		if e.Op == "redrive" {
			got = append(got, e)
		}
	}
	me := "-"
	if u, err := user.Current(); err == nil {
		me = u.Username
	}
	want := []struct {
		sel              string
		dry              bool
		matched, changed int64
	}{
		{`{"broker":"nats","reasons":["target_not_allowed"]}`, false, selected, selected}, // newest first
		{`{"broker":"nats"}`, true, selected + others, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("redrive entries %+v, want %d", got, len(want))
	}
	for i, w := range want {
		e := got[i]
		if string(e.Selector) != w.sel || e.DryRun != w.dry || e.Matched != w.matched || e.Changed != w.changed ||
			e.State != "done" || e.Actor != me || e.Remote != "cli" {
			t.Errorf("entry %d: %+v (selector %s), want %+v by %s from cli, done", i, e, e.Selector, w, me)
		}
	}
}
