//go:build compose

package compose_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// stack is one compose project: deploy/docker-compose.yml with local.override.yml, its
// own project name and free ports.
type stack struct {
	cli     []string // the compose CLI: "docker compose" or the standalone binary
	root    string   // repository root
	project string
	ports   map[string]int // E2E_*_PORT -> port
}

// portVars are the variables local.override.yml interpolates.
var portVars = []string{"E2E_REDIS_PORT", "E2E_NATS_PORT", "E2E_NATS_MONITOR_PORT", "E2E_KAFKA_PORT",
	"E2E_BRIDGE_HTTP_PORT", "E2E_BRIDGE_API_PORT"}

// newStack names a fresh project and picks free ports on 127.0.0.1. It registers the
// final `down -v` (run however the test ends) and the check that it left nothing.
func newStack(t *testing.T, cli []string, root string) *stack {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := &stack{cli: cli, root: root, project: "dbe2e-" + hex.EncodeToString(b), ports: map[string]int{}}
	for _, v := range portVars {
		s.ports[v] = freePort(t)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			out, _ := s.compose(ctx, "ps", "-a")
			logs, _ := s.compose(ctx, "logs", "--no-color", "--tail", "60")
			t.Logf("compose ps -a:\n%s\ncompose logs (tail):\n%s", out, logs)
		}
		if out, err := s.compose(ctx, "down", "-v", "--remove-orphans", "--timeout", "60"); err != nil {
			t.Errorf("down -v: %v\n%s", err, out)
		}
		s.checkNothingLeft(ctx, t)
	})
	return s
}

// freePort is a port of 127.0.0.1 that was free a moment ago (e2etest.FreeAddr's).
func freePort(t *testing.T) int {
	t.Helper()
	_, p, err := net.SplitHostPort(e2etest.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// env is the environment of a compose call: the ports, and nothing else of the caller's
// E2E_* (the files must get their values from here).
func (s *stack) env() []string {
	var env []string
	for v, p := range s.ports {
		env = append(env, v+"="+strconv.Itoa(p))
	}
	return env
}

// compose runs the compose CLI on the project's two files.
func (s *stack) compose(ctx context.Context, args ...string) (string, error) {
	full := append(append([]string(nil), s.cli[1:]...),
		"-p", s.project,
		"-f", filepath.Join(s.root, "deploy/docker-compose.yml"),
		"-f", filepath.Join(s.root, "deploy/compose/local.override.yml"))
	full = append(full, args...)
	return run(ctx, s.root, s.env(), s.cli[0], full...)
}

// container is the id of service's container (also a stopped one).
func (s *stack) container(ctx context.Context, t *testing.T, service string) string {
	t.Helper()
	out, err := s.compose(ctx, "ps", "-a", "-q", service)
	id := strings.TrimSpace(out)
	if err != nil || id == "" || strings.Contains(id, "\n") {
		t.Fatalf("container of %s: %q %v", service, out, err)
	}
	return id
}

// inspect evaluates a Go template on a container (docker inspect -f).
func inspect(ctx context.Context, t *testing.T, id, format string) string {
	t.Helper()
	return strings.TrimSpace(mustRun(ctx, t, "", "docker", "inspect", "-f", format, id))
}

// waitHealthy waits until every long-running service is running and healthy and nats-init
// has exited 0; on timeout it fails with each service's state.
func (s *stack) waitHealthy(ctx context.Context, t *testing.T) {
	t.Helper()
	want := map[string]string{"redis": "running healthy", "nats": "running healthy",
		"nats-init": "exited  0", "kafka": "running healthy", "bridge": "running healthy"}
	const format = `{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}} {{if ne .State.Status "running"}}{{.State.ExitCode}}{{end}}`
	start := time.Now()
	var states []string
	for deadline := start.Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		states = states[:0]
		for _, svc := range []string{"redis", "nats", "nats-init", "kafka", "bridge"} {
			got := strings.TrimSpace(inspect(ctx, t, s.container(ctx, t, svc), format))
			if got != want[svc] {
				states = append(states, fmt.Sprintf("%s: %q (want %q)", svc, got, want[svc]))
			}
		}
		if len(states) == 0 {
			t.Logf("every service healthy (nats-init exited 0) after %s", time.Since(start).Round(time.Second))
			return
		}
	}
	t.Fatalf("services not healthy after 3 min:\n%s", strings.Join(states, "\n"))
}

// checkNothingLeft fails when a container, volume or network of the project remains.
func (s *stack) checkNothingLeft(ctx context.Context, t *testing.T) {
	t.Helper()
	label := "label=com.docker.compose.project=" + s.project
	for _, what := range [][]string{
		{"ps", "-a", "-q", "--filter", label},
		{"volume", "ls", "-q", "--filter", label},
		{"network", "ls", "-q", "--filter", label},
	} {
		out, err := run(ctx, "", nil, "docker", what...)
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("after down -v, docker %s: %q %v", strings.Join(what, " "), out, err)
		}
	}
}

// apiURL is the bridge's message API on the host.
func (s *stack) apiURL(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", s.ports["E2E_BRIDGE_API_PORT"], path)
}

// e2eEnv points the e2e user stories at the stack.
func (s *stack) e2eEnv() []string {
	return []string{
		fmt.Sprintf("E2E_REDIS_URL=redis://127.0.0.1:%d/0", s.ports["E2E_REDIS_PORT"]),
		fmt.Sprintf("E2E_NATS_URL=nats://127.0.0.1:%d", s.ports["E2E_NATS_PORT"]),
		fmt.Sprintf("E2E_KAFKA_BROKERS=127.0.0.1:%d", s.ports["E2E_KAFKA_PORT"]),
	}
}
