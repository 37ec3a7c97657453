// Package e2e runs the built bridge binary as a user would: configured by environment,
// driven only through NATS and HTTP, against a spawned redis-server and an embedded
// nats-server.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bridgeBin is the binary built once by TestMain.
var bridgeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "delaybridge-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	bridgeBin = filepath.Join(dir, "bridge")
	args := []string{"build", "-race", "-o", bridgeBin, "../cmd/bridge"}
	if os.Getenv("E2E_NORACE") == "1" { // for measuring lateness on a normal binary
		args = slices.Delete(args, 1, 2)
	}
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build bridge:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bridge is a running bridge process.
type bridge struct {
	cmd      *exec.Cmd
	out      *syncBuffer
	httpAddr string
	apiAddr  string
	done     chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startProcess starts the bridge with env (on top of a minimal environment) and args,
// without waiting for readiness. It is killed in cleanup if still running.
func startProcess(t testing.TB, env map[string]string, args ...string) *bridge {
	t.Helper()
	b := &bridge{out: &syncBuffer{}, done: make(chan error, 1)}
	if _, ok := env["BRIDGE_HTTP_ADDR"]; !ok {
		env["BRIDGE_HTTP_ADDR"] = freeAddr(t)
	}
	if _, ok := env["BRIDGE_API_ADDR"]; !ok {
		env["BRIDGE_API_ADDR"] = freeAddr(t)
	}
	b.httpAddr, b.apiAddr = env["BRIDGE_HTTP_ADDR"], env["BRIDGE_API_ADDR"]
	b.cmd = exec.Command(bridgeBin, args...)
	b.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.cmd.Env = append(b.cmd.Env, k+"="+env[k])
	}
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start bridge: %v", err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-b.done:
		default:
			_ = b.cmd.Process.Kill()
			<-b.done
		}
		if t.Failed() {
			t.Logf("bridge output:\n%s", b.out.String())
		}
	})
	return b
}

// startBridge starts the bridge and waits until /readyz answers 200.
func startBridge(t testing.TB, env map[string]string, args ...string) *bridge {
	t.Helper()
	b := startProcess(t, env, args...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-b.done:
			b.done <- err
			t.Fatalf("bridge exited before ready: %v\n%s", err, b.out.String())
		default:
		}
		if code, _ := httpGet("http://" + b.httpAddr + "/readyz"); code == http.StatusOK {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge not ready within 30s\n%s", b.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for the exit, returning its error and how long it took.
func (b *bridge) stop(t testing.TB, timeout time.Duration) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-b.done:
		b.done <- err
		return err, time.Since(start)
	case <-time.After(timeout):
		t.Fatalf("bridge did not exit within %s of SIGTERM\n%s", timeout, b.out.String())
		return nil, 0
	}
}

// wait waits for the process to exit by itself.
func (b *bridge) wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-b.done:
		b.done <- err
		return err
	case <-time.After(timeout):
		t.Fatalf("bridge still running after %s\n%s", timeout, b.out.String())
		return nil
	}
}

func httpGet(url string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
