//go:build compose

package compose_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestComposeStack runs deploy/docker-compose.yml for real (`make e2e-compose`): local
// images, local.override.yml, every health check, the e2e user stories through the
// published ports, then what only a container shows. It needs a Docker engine (installed
// and started when missing) and fails, never skips, without one.
func TestComposeStack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	requireDocker(ctx, t)
	cli := composeCLI(ctx, t)
	buildImages(ctx, t, root)
	s := newStack(t, cli, root)
	t.Logf("project %s, ports %v", s.project, s.ports)

	start := time.Now()
	if out, err := s.compose(ctx, "up", "-d", "--no-build", "--pull", "never"); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	s.waitHealthy(ctx, t)
	t.Logf("stack up and healthy in %s", time.Since(start).Round(time.Second))

	ok := t.Run("bridge container", func(t *testing.T) { checkBridgeContainer(ctx, t, s) }) &&
		t.Run("e2e user stories", func(t *testing.T) { runStories(ctx, t, s) }) &&
		t.Run("stop drains, restart keeps parked", func(t *testing.T) { checkStopAndRestart(ctx, t, s) })
	if !ok {
		return
	}
	t.Run("down -v leaves nothing", func(t *testing.T) {
		if out, err := s.compose(ctx, "down", "-v", "--remove-orphans"); err != nil {
			t.Fatalf("down -v: %v\n%s", err, out)
		}
		s.checkNothingLeft(ctx, t)
		t.Logf("down -v: no container, volume or network labelled com.docker.compose.project=%s left", s.project)
	})
}

// checkBridgeContainer: the bridge runs as uid/gid 65532, is healthy, and its health check
// runs without a shell (the image has none).
func checkBridgeContainer(ctx context.Context, t *testing.T, s *stack) {
	id := s.container(ctx, t, "bridge")
	if u := inspect(ctx, t, id, "{{.Config.User}}"); u != "65532:65532" {
		t.Errorf("image user %q, want 65532:65532", u)
	}
	// docker top passes its options to the host's ps; it needs the pid column.
	top := mustRun(ctx, t, "", "docker", "top", id, "-o", "pid,uid,gid,args")
	lines := strings.Split(strings.TrimSpace(top), "\n")
	if len(lines) != 2 || !strings.HasPrefix(strings.Join(strings.Fields(lines[1])[1:], " "), "65532 65532 /usr/local/bin/bridge run") {
		t.Errorf("docker top: want one process, uid and gid 65532, /usr/local/bin/bridge run:\n%s", top)
	}
	t.Logf("docker top: %s", strings.Join(strings.Fields(lines[len(lines)-1]), " "))
	if h := inspect(ctx, t, id, "{{.State.Health.Status}}"); h != "healthy" {
		t.Errorf("health %q, want healthy", h)
	}
	if out, err := run(ctx, "", nil, "docker", "exec", id, "/usr/local/bin/bridge", "healthcheck"); err != nil {
		t.Errorf("docker exec bridge healthcheck: %v", err)
	} else {
		t.Logf("docker exec bridge healthcheck: exit 0 %s", strings.TrimSpace(out))
	}
	if _, err := run(ctx, "", nil, "docker", "exec", id, "sh", "-c", "true"); err == nil {
		t.Errorf("docker exec sh: the image has a shell; it should have none (distroless)")
	}
}

// runStories runs the e2e user stories (go test ./e2e/) against the stack's published
// ports; tests that kill or specially configure a server keep their own local ones.
func runStories(ctx context.Context, t *testing.T, s *stack) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-timeout", "20m", "./e2e/")
	cmd.Dir = s.root
	cmd.Env = append(os.Environ(), s.e2eEnv()...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	t.Logf("go test -count=1 ./e2e/ with %v", s.e2eEnv())
	if err := cmd.Run(); err != nil {
		t.Fatalf("e2e user stories against the compose stack: %v", err)
	}
	t.Logf("e2e user stories passed against the stack in %s", time.Since(start).Round(time.Second))
}

// checkStopAndRestart parks a message for an hour through the API, stops the whole stack
// (the bridge must drain and exit 0 within its stop_grace_period), removes the Redis
// container (its volume stays), starts the stack again and finds the message still parked.
func checkStopAndRestart(ctx context.Context, t *testing.T, s *stack) {
	id := "compose-" + s.project
	park(ctx, t, s, id)
	bridge, redis := s.container(ctx, t, "bridge"), s.container(ctx, t, "redis")
	grace, err := strconv.Atoi(inspect(ctx, t, bridge, "{{.Config.StopTimeout}}"))
	if err != nil || grace <= 0 {
		t.Fatalf("bridge stop timeout %v: want the compose file's stop_grace_period", err)
	}
	start := time.Now()
	if out, err := s.compose(ctx, "stop"); err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	took := time.Since(start)
	code := inspect(ctx, t, bridge, "{{.State.ExitCode}} {{.State.OOMKilled}}")
	t.Logf("compose stop took %s (bridge stop_grace_period %ds), bridge exit %s", took.Round(time.Millisecond), grace, code)
	if code != "0 false" || took >= time.Duration(grace)*time.Second {
		logs, _ := s.compose(ctx, "logs", "--no-color", "--tail", "30", "bridge")
		t.Fatalf("bridge: exit code and OOM %q after %s, want 0 within %ds\n%s", code, took, grace, logs)
	}
	if out, err := s.compose(ctx, "rm", "-f", "redis"); err != nil {
		t.Fatalf("rm redis: %v\n%s", err, out)
	}
	if out, err := s.compose(ctx, "up", "-d", "--no-build", "--pull", "never"); err != nil {
		t.Fatalf("up again: %v\n%s", err, out)
	}
	s.waitHealthy(ctx, t)
	if s.container(ctx, t, "redis") == redis {
		t.Fatalf("redis container was not recreated")
	}
	if v := inspect(ctx, t, s.container(ctx, t, "redis"), `{{range .Mounts}}{{.Name}} {{.Destination}}{{end}}`); v != s.project+"_redis-data /data" {
		t.Fatalf("redis mounts %q, want the volume %s_redis-data on /data", v, s.project)
	}
	got := getMessage(ctx, t, s, id)
	t.Logf("after stop, a new Redis container on the same volume and start: GET /v1/messages/%s -> %s", id, got)
	if !strings.Contains(got, `"target":"nats:compose.parked"`) {
		t.Fatalf("parked message lost or changed: %s", got)
	}
}

// park sends one message due in an hour through the bridge's API.
func park(ctx context.Context, t *testing.T, s *stack, id string) {
	t.Helper()
	body := fmt.Sprintf(`{"target":"compose.parked","delay":"1h","id":%q,"payload":"kept across a restart"}`, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.apiURL("/v1/messages"), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	code, answer := do(t, req)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/messages: %d %s", code, answer)
	}
	if got := getMessage(ctx, t, s, id); !strings.Contains(got, `"target":"nats:compose.parked"`) {
		t.Fatalf("GET after park: %s", got)
	}
}

// getMessage is GET /v1/messages/{id}; anything but 200 fails the test.
func getMessage(ctx context.Context, t *testing.T, s *stack, id string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.apiURL("/v1/messages/"+id), nil)
	if err != nil {
		t.Fatal(err)
	}
	code, body := do(t, req)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/messages/%s: %d %s", id, code, body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("GET /v1/messages/%s: %v: %s", id, err, body)
	}
	return body
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return resp.StatusCode, string(b)
}
