package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The redrive rows of docs/faults.md (issue 23, items 4 and 5): letters refused again
// inside the dead-letter stream's duplicate window, letters beyond 1,000 left ones, two
// runs at once, and an honest REFUSED AGAIN.

// row is the numbers of reason's line in a redrive table (nil when there is none).
func row(out, reason string) []int {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(reason) + `((?:\s+\d+)+)\s*$`).FindStringSubmatch(out)
	if m == nil {
		return nil
	}
	var n []int
	for _, f := range regexp.MustCompile(`\d+`).FindAllString(m[1], -1) {
		v, _ := strconv.Atoi(f)
		n = append(n, v)
	}
	return n
}

// wantRow fails t unless reason's line starts with want.
func wantRow(t *testing.T, out, reason string, want ...int) {
	t.Helper()
	got := row(out, reason)
	if len(got) < len(want) || fmt.Sprint(got[:len(want)]) != fmt.Sprint(want) {
		t.Errorf("%s: %v, want %v first\n%s", reason, got, want, out)
	}
}

// dlqCount is the number of letters in the dead-letter stream.
func dlqCount(t *testing.T, nc *nats.Conn, stream string) int {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Msgs)
}

// putLetters stores n dead letters on subject as the bridge writes them: the message's
// headers (hdr(i)), x-delay-error, and the Nats-Msg-Id of the dead-letter publish.
func putLetters(t *testing.T, nc *nats.Conn, subject, prefix, errText string, n int, hdr func(i int) nats.Header) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m := nats.NewMsg(subject)
		for k, v := range hdr(i) {
			m.Header[k] = v
		}
		m.Header.Set("x-delay-error", errText)
		m.Header.Set("Nats-Msg-Id", fmt.Sprintf("%s-%d", prefix, i))
		m.Data = fmt.Appendf(nil, "%s-%d", prefix, i)
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("dead letters not stored within 30s")
	}
}

// waitCount waits until the dead-letter stream holds n letters.
func waitCount(t *testing.T, nc *nats.Conn, stream string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for dlqCount(t, nc, stream) != n {
		if time.Now().After(deadline) {
			t.Fatalf("dead-letter stream holds %d letters, want %d", dlqCount(t, nc, stream), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRedriveRefusedInsideDuplicateWindow (item 4): messages without a target are
// dead-lettered (missing_target), then redriven at once, still without a target: the bridge
// refuses them again within the dead-letter stream's 2-minute duplicate window. Each must
// end up in the stream as a new letter (counted REFUSED AGAIN), the old one deleted only
// then: the stream's count never drops. Through a core ingress (the bridge's reply) and a
// JetStream one (the PubAck; REFUSED AGAIN seen by watching the dead letters).
func TestRedriveRefusedInsideDuplicateWindow(t *testing.T) {
	for _, ingress := range []string{"core", "jetstream"} {
		t.Run(ingress, func(t *testing.T) {
			s := newStack(t)
			dlq := s.createStream(t, "DLQ", s.name("delay.dlq"))
			env := map[string]string{}
			for k, v := range s.env {
				env[k] = v
			}
			js, err := jetstream.New(s.nc)
			if err != nil {
				t.Fatal(err)
			}
			if ingress == "jetstream" {
				env["BRIDGE_NATS_STREAM"] = s.createStream(t, "IN", s.name("delay.in"))
			}
			startBridge(t, env)
			for i := range 9 {
				hdr := nats.Header{}
				hdr.Set("x-delay", "30s")
				m := &nats.Msg{Subject: s.name("delay.in"), Header: hdr, Data: fmt.Appendf(nil, "m%d", i)}
				if ingress == "jetstream" {
					if _, err := js.PublishMsg(t.Context(), m); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if reply := request(t, s.nc, m.Subject, hdr, string(m.Data)); !strings.HasPrefix(fmt.Sprint(reply["error"]), "missing_target") {
					t.Fatalf("reply %v, want missing_target", reply)
				}
			}
			waitCount(t, s.nc, dlq, 9)
			for run := range 2 {
				out, err := runCLIEnv(t, env, "redrive", "--reason", "missing_target")
				if n := dlqCount(t, s.nc, dlq); n != 9 {
					t.Fatalf("run %d: dead-letter stream holds %d letters after the redrive, want 9 (refused again, kept as new letters)\n%s", run, n, out)
				}
				if err != nil {
					t.Fatalf("run %d: %v\n%s", run, err, out)
				}
				wantRow(t, out, "missing_target", 0, 9, 0, 0)
			}
		})
	}
}

// TestRedriveBeyondLeftLetters (item 5): 2,300 target_not_allowed letters ahead of 100
// invalid_delay ones (fixed since). The dry run counts all 2,400 by reason; --reason
// invalid_delay reaches all 100 (the 2,300 left hold nothing) and exits 0; then
// --reason target_not_allowed, with the allow-list still narrow, reports all 2,300 as
// refused again (none as redriven) and keeps them all.
func TestRedriveBeyondLeftLetters(t *testing.T) {
	s := newStack(t)
	dlq := s.createStream(t, "DLQ", s.name("delay.dlq"))
	env := map[string]string{}
	for k, v := range s.env {
		env[k] = v
	}
	env["BRIDGE_TARGET_ALLOW"] = s.name("orders.*")
	held, target := s.name("held.x"), s.name("orders.ok")
	putLetters(t, s.nc, s.name("delay.dlq"), "held", "target_not_allowed: "+held, 2300, func(int) nats.Header {
		return nats.Header{"x-target": {held}, "x-delay": {"10ms"}}
	})
	putLetters(t, s.nc, s.name("delay.dlq"), "late", "invalid_delay: soon", 100, func(int) nats.Header {
		return nats.Header{"x-target": {target}, "x-delay": {"10ms"}}
	})
	startBridge(t, env)
	arrivals := subscribe(t, s.nc, target)

	out, err := runCLIEnv(t, env, "redrive", "--dry-run")
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	wantRow(t, out, "target_not_allowed", 2300, 0)
	wantRow(t, out, "invalid_delay", 100, 0)

	out, err = runCLIEnv(t, env, "redrive", "--reason", "invalid_delay")
	if err != nil {
		t.Fatalf("redrive: %v\n%s", err, out)
	}
	wantRow(t, out, "invalid_delay", 100, 0, 0)
	wantRow(t, out, "target_not_allowed", 0, 0, 2300)
	got := map[string]int{}
	for range 100 {
		got[string(receive(t, arrivals, 10*time.Second).msg.Data)]++
	}
	if len(got) != 100 {
		t.Fatalf("delivered %d distinct letters, want 100: %v", len(got), got)
	}
	if n := dlqCount(t, s.nc, dlq); n != 2300 {
		t.Fatalf("dead-letter stream holds %d, want the 2300 left", n)
	}

	out, err = runCLIEnv(t, env, "redrive", "--reason", "target_not_allowed")
	if err != nil {
		t.Fatalf("redrive of the refused: %v\n%s", err, out)
	}
	wantRow(t, out, "target_not_allowed", 0, 2300, 0)
	if n := dlqCount(t, s.nc, dlq); n != 2300 {
		t.Fatalf("dead-letter stream holds %d after the refused redrive, want 2300", n)
	}
}

// TestRedriveConcurrentRuns (item 5): two runs at once over 600 letters both exit 0,
// between them redrive each letter once (claims), and each is delivered once.
func TestRedriveConcurrentRuns(t *testing.T) {
	s := newStack(t)
	dlq := s.createStream(t, "DLQ", s.name("delay.dlq"))
	target := s.name("billing.due")
	putLetters(t, s.nc, s.name("delay.dlq"), "c", "publish_failed: 10 attempts", 600, func(int) nats.Header {
		return nats.Header{"x-target": {target}}
	})
	startBridge(t, s.env)
	arrivals := subscribe(t, s.nc, target)
	outs, errs := redriveTogether(s.env, "--wait", "0")
	redriven := 0
	for i := range 2 {
		if errs[i] != nil {
			t.Errorf("run %d: %v\n%s", i, errs[i], outs[i])
		}
		if r := row(outs[i], "publish_failed"); len(r) > 0 {
			redriven += r[0]
		}
	}
	got := map[string]int{}
	deadline := time.After(30 * time.Second)
	for len(got) < 600 {
		select {
		case a := <-arrivals:
			got[string(a.msg.Data)]++
		case <-deadline:
			t.Fatalf("%d of 600 letters delivered", len(got))
		}
	}
	for quiet := false; !quiet; {
		select {
		case a := <-arrivals: // a second copy
			got[string(a.msg.Data)]++
		case <-time.After(time.Second):
			quiet = true
		}
	}
	for p, n := range got {
		if n != 1 {
			t.Errorf("%s delivered %d times", p, n)
		}
	}
	if redriven != 600 {
		t.Errorf("the runs redrove %d letters between them, want 600\n%s\n%s", redriven, outs[0], outs[1])
	}
	if n := dlqCount(t, s.nc, dlq); n != 0 {
		t.Errorf("dead-letter stream holds %d, want 0", n)
	}
}

// redriveTogether runs two `bridge redrive` with args at once, in env, and returns each
// one's combined output (with how long it took) and exit error.
func redriveTogether(env map[string]string, args ...string) (outs []string, errs []error) {
	var wg sync.WaitGroup
	outs, errs = make([]string, 2), make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bridgeBin, append([]string{"redrive"}, args...)...)
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			start := time.Now()
			b, err := cmd.CombinedOutput()
			outs[i], errs[i] = string(b)+fmt.Sprintf("(took %s)\n", time.Since(start).Round(time.Millisecond)), err
		}()
	}
	wg.Wait()
	return outs, errs
}
