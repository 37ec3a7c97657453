package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// runCLI runs a bridge tool command and returns its combined output.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bridgeBin, args...)
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestHelpListsCommandsAndVariables: `bridge --help` names every command and variable.
func TestHelpListsCommandsAndVariables(t *testing.T) {
	out, err := runCLI(t, "--help")
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, want := range []string{"run", "dev", "send", "stats", "cancel", "ls", "targets", "version",
		"BRIDGE_REDIS_URL", "BRIDGE_REDIS_CLUSTER_ADDRS", "BRIDGE_KEY_PREFIX", "BRIDGE_SHARDS", "BRIDGE_NATS_URL",
		"BRIDGE_NATS_SUBJECT", "BRIDGE_NATS_QUEUE", "BRIDGE_NATS_STREAM", "BRIDGE_NATS_CONSUMER",
		"BRIDGE_KAFKA_BROKERS", "BRIDGE_KAFKA_TOPIC", "BRIDGE_KAFKA_GROUP", "BRIDGE_CANCEL_SUBJECT",
		"BRIDGE_DLQ_SUBJECT", "BRIDGE_TARGET_ALLOW", "BRIDGE_MAX_DELAY", "BRIDGE_MAX_PAYLOAD", "BRIDGE_LEASE",
		"BRIDGE_HTTP_ADDR", "BRIDGE_API_ADDR", "BRIDGE_API_TOKEN", "BRIDGE_LOG_LEVEL", "BRIDGE_LOG_FORMAT"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help does not mention %s", want)
		}
	}
	if out, err := runCLI(t, "version"); err != nil || !strings.HasPrefix(out, "delaybridge ") {
		t.Fatalf("version: %v %q", err, out)
	}
	if _, err := runCLI(t, "frobnicate"); err == nil {
		t.Fatal("unknown command exited 0")
	}
}

// TestDevQuickStart is the README's 60-second quick start: `bridge dev`, then
// `bridge send --delay 1s --target demo.hello hi`, and the message is printed by dev on
// arrival; `bridge stats` and `bridge cancel` work against it.
func TestDevQuickStart(t *testing.T) {
	api := freeAddr(t)
	env := map[string]string{"BRIDGE_HTTP_ADDR": freeAddr(t), "BRIDGE_API_ADDR": api}
	b := startProcess(t, env, "dev", "--nats-port", "-1")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.Out.String(), "Try it") {
		if time.Now().After(deadline) {
			t.Fatalf("dev banner not printed:\n%s", b.Out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(b.Out.String(), "NOTHING IS DURABLE") {
		t.Fatalf("dev does not say it is not durable:\n%s", b.Out.String())
	}

	out, err := runCLI(t, "send", "--api", api, "--delay", "1s", "--target", "demo.hello", "hi")
	if err != nil || !strings.Contains(out, "parked") {
		t.Fatalf("send: %v %s", err, out)
	}
	out, err = runCLI(t, "send", "--api", api, "--delay", "1h", "--id", "later", "--target", "demo.later", "x")
	if err != nil {
		t.Fatalf("send: %v %s", err, out)
	}
	out, err = runCLI(t, "stats", "--api", api)
	if err != nil || !regexp.MustCompile(`parked\s+[12]`).MatchString(out) {
		t.Fatalf("stats: %v %s", err, out)
	}
	out, err = runCLI(t, "cancel", "--api", api, "later")
	if err != nil || !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel: %v %s", err, out)
	}
	out, err = runCLI(t, "cancel", "later", "--api", api) // flags after the arguments too
	if err == nil || !strings.Contains(out, "no pending message with that id") {
		t.Fatalf("cancel of nothing: err=%v out=%s; want a failure naming it", err, out)
	}
	out, err = runCLI(t, "send", "--api", api, "hi")
	if err == nil || !strings.Contains(out, "--target is required") {
		t.Fatalf("send without --target: err=%v out=%s", err, out)
	}
	out, err = runCLI(t, "send", "--api", api, "--target", "demo.later", "x", "--delay", "1h", "--id", "later2")
	if err != nil || !strings.Contains(out, "parked later2") {
		t.Fatalf("send with flags after the payload: %v %s", err, out)
	}
	out, err = runCLI(t, "ls", "--api", api, "--target", "demo.l*")
	if err != nil || !regexp.MustCompile(`(?m)^later2\s+nats:demo\.later\s+\d{4}-\d\d-\d\d [0-9:.]+\s+(59m\d+s|1h0m0s)\s+0\s+1\s+-$`).MatchString(out) ||
		!strings.Contains(out, "\n1 match in all\n") {
		t.Fatalf("ls: %v %s", err, out)
	}
	out, err = runCLI(t, "send", "--api", api, "--delay", "1h", "--window", "10m", "--id", "spread", "--target", "demo.spread", "x")
	if err != nil || !strings.Contains(out, "parked spread") {
		t.Fatalf("send --window: %v %s", err, out)
	}
	out, err = runCLI(t, "ls", "--api", api, "--target", "demo.spread")
	if err != nil || !regexp.MustCompile(`(?m)^spread\s+nats:demo\.spread\s+\d{4}-\d\d-\d\d [0-9:.]+ \(drawn in a 10m0s window\)\s+(59m\d+s|1h\d+m\d+s)\s+0\s+1\s+-$`).MatchString(out) {
		t.Fatalf("ls of a message with a window: %v %s", err, out)
	}
	if out, err = runCLI(t, "cancel", "--api", api, "spread"); err != nil {
		t.Fatalf("cancel spread: %v %s", err, out)
	}
	out, err = runCLI(t, "targets", "--api", api)
	if err != nil || !regexp.MustCompile(`(?m)^nats:demo\.later\s+1\s+\d{4}-\d\d-\d\d [0-9:.]+\s+(59m\d+s|1h0m0s)\s+-$`).MatchString(out) {
		t.Fatalf("targets: %v %s", err, out)
	}
	out, err = runCLI(t, "ls", "--api", api, "--limit", "0")
	if err == nil || !strings.Contains(out, "limit") {
		t.Fatalf("ls --limit 0: %v %s", err, out)
	}
	out, err = runCLI(t, "bulk", "reschedule", "--api", api, "--target", "demo.later", "--shift", "+30m", "--dry-run")
	if err != nil || !strings.Contains(out, "reschedule: matched 1, changed (dry run) 0") {
		t.Fatalf("bulk dry run: %v %s", err, out)
	}
	out, err = runCLI(t, "bulk", "cancel", "--api", api, "--target", "demo.l*")
	if err != nil || !strings.Contains(out, "cancel: matched 1, changed 1") {
		t.Fatalf("bulk cancel: %v %s", err, out)
	}
	out, err = runCLI(t, "bulk", "cancel", "--api", api)
	if err == nil || !strings.Contains(out, "at least one of id, target, due_from, due_to") {
		t.Fatalf("bulk without a selector: %v %s", err, out)
	}
	out, err = runCLI(t, "send", "--api", api, "--delay", "abc", "--target", "demo.hello", "x")
	if err == nil || !strings.Contains(out, "invalid_delay") {
		t.Fatalf("send with a bad delay: err=%v out=%s", err, out)
	}

	deadline = time.Now().Add(10 * time.Second)
	for {
		found := false
		sc := bufio.NewScanner(strings.NewReader(b.Out.String()))
		for sc.Scan() {
			if strings.Contains(sc.Text(), "arrived on demo.hello") && strings.Contains(sc.Text(), `"hi"`) {
				found = true
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev did not print the arrival:\n%s", b.Out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a duplicate publish would arrive within this
	if n := strings.Count(b.Out.String(), "arrived on demo.hello"); n != 1 {
		t.Fatalf("demo.hello arrived %d times, want once:\n%s", n, b.Out.String())
	}
	if err, _ := b.Stop(t, 30*time.Second); err != nil {
		t.Fatalf("dev exit after SIGTERM: %v", err)
	}
}

// TestDevCoreRequest: `bridge dev` answers a core NATS request on delay.in and
// delay.cancel with the documented reply (not a JetStream PubAck), as the README's quick
// start promises for any NATS client; a rejected message also lands in the dev stream's
// dead letters.
func TestDevCoreRequest(t *testing.T) {
	env := map[string]string{"BRIDGE_HTTP_ADDR": freeAddr(t), "BRIDGE_API_ADDR": freeAddr(t)}
	b := startProcess(t, env, "dev", "--nats-port", "-1")
	urlRe := regexp.MustCompile(`NATS\s+(nats://\S+)`)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.Out.String(), "Try it") {
		if time.Now().After(deadline) {
			t.Fatalf("dev banner not printed:\n%s", b.Out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	m := urlRe.FindStringSubmatch(b.Out.String())
	if m == nil {
		t.Fatalf("no NATS URL in the banner:\n%s", b.Out.String())
	}
	nc, err := nats.Connect(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	request := func(subject string, hs ...string) map[string]any {
		t.Helper()
		msg := nats.NewMsg(subject)
		msg.Data = []byte("hi")
		for i := 0; i+1 < len(hs); i += 2 {
			msg.Header.Add(hs[i], hs[i+1])
		}
		reply, err := nc.RequestMsg(msg, 10*time.Second)
		if err != nil {
			t.Fatalf("request %s %v: %v", subject, hs, err)
		}
		var body map[string]any
		if err := json.Unmarshal(reply.Data, &body); err != nil {
			t.Fatalf("reply to %s is not JSON: %q", subject, reply.Data)
		}
		if _, ok := body["stream"]; ok {
			t.Fatalf("reply to %s is a JetStream PubAck: %s", subject, reply.Data)
		}
		return body
	}

	bad := request("delay.in", "x-delay", "banana", "x-target", "demo.hello")
	if e, _ := bad["error"].(string); !strings.HasPrefix(e, "invalid_delay") {
		t.Fatalf("x-delay:banana: reply %v, want {\"error\": \"invalid_delay: ...\"}", bad)
	}
	ok := request("delay.in", "x-delay", "1h", "x-target", "demo.hello", "x-delay-id", "dev-req")
	if ok["id"] != "dev-req" || ok["due"] == nil {
		t.Fatalf("valid request: reply %v, want {\"id\": \"dev-req\", \"due\": ...}", ok)
	}
	cancel := request("delay.cancel", "x-delay-id", "dev-req")
	if cancel["id"] != "dev-req" || cancel["cancelled"] != true {
		t.Fatalf("cancel request: reply %v, want {\"id\": \"dev-req\", \"cancelled\": true}", cancel)
	}
	again := request("delay.cancel", "x-delay-id", "dev-req")
	if again["cancelled"] != false {
		t.Fatalf("second cancel: reply %v, want cancelled false", again)
	}

	// The rejected message is a dead letter in the dev stream.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	for {
		st, err := js.Stream(ctx, "DELAYBRIDGE")
		if err != nil {
			t.Fatalf("dev stream: %v", err)
		}
		if st.CachedInfo().State.Msgs == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("dev stream holds %d messages, want the 1 dead letter", st.CachedInfo().State.Msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err, _ := b.Stop(t, 30*time.Second); err != nil {
		t.Fatalf("dev exit after SIGTERM: %v", err)
	}
}
