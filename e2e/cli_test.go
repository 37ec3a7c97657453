package e2e

import (
	"bufio"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
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
	for _, want := range []string{"run", "dev", "send", "stats", "cancel", "version",
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
