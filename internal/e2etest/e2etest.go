// Package e2etest runs the bridge binary as a user would, for the e2e and fault suites:
// build it once, start it with an environment, wait for /readyz, stop it with SIGTERM or
// kill it with SIGKILL, read its output.
package e2etest

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
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds the bridge (package github.com/delaybridge/delaybridge/cmd/bridge) into dir
// and returns the binary's path; race adds -race, tags are build tags. It must run inside
// the module.
func Build(dir string, race bool, tags ...string) (string, error) {
	bin := filepath.Join(dir, "bridge")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "github.com/delaybridge/delaybridge/cmd/bridge")
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return bin, nil
}

// Bridge is a running bridge process.
type Bridge struct {
	Cmd      *exec.Cmd
	Out      *SyncBuffer // stdout and stderr
	HTTPAddr string
	APIAddr  string
	done     chan error
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Start starts bin with env (on top of PATH and HOME only) and args, without waiting for
// readiness; BRIDGE_HTTP_ADDR and BRIDGE_API_ADDR get free ports unless env sets them
// (env is updated). The process dies with the test binary and is killed in cleanup; its
// output is logged when the test failed.
func Start(t testing.TB, bin string, env map[string]string, args ...string) *Bridge {
	t.Helper()
	b := &Bridge{Out: &SyncBuffer{}, done: make(chan error, 1)}
	if _, ok := env["BRIDGE_HTTP_ADDR"]; !ok {
		env["BRIDGE_HTTP_ADDR"] = FreeAddr(t)
	}
	if _, ok := env["BRIDGE_API_ADDR"]; !ok {
		env["BRIDGE_API_ADDR"] = FreeAddr(t)
	}
	b.HTTPAddr, b.APIAddr = env["BRIDGE_HTTP_ADDR"], env["BRIDGE_API_ADDR"]
	b.Cmd = exec.Command(bin, args...)
	b.Cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.Cmd.Env = append(b.Cmd.Env, k+"="+env[k])
	}
	b.Cmd.Stdout, b.Cmd.Stderr = b.Out, b.Out
	b.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.Cmd.Start(); err != nil {
		t.Fatalf("start bridge: %v", err)
	}
	go func() { b.done <- b.Cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-b.done:
			b.done <- err
		default:
			_ = b.Cmd.Process.Kill()
			b.done <- <-b.done
		}
		if t.Failed() {
			t.Logf("bridge output:\n%s", b.Out.String())
		}
	})
	return b
}

// StartReady starts bin as Start does and waits until /readyz answers 200.
func StartReady(t testing.TB, bin string, env map[string]string, args ...string) *Bridge {
	t.Helper()
	b := Start(t, bin, env, args...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b.Exited() {
			t.Fatalf("bridge exited before ready: %v\n%s", b.Wait(t, 0), b.Out.String())
		}
		if code, _ := HTTPGet("http://" + b.HTTPAddr + "/readyz"); code == http.StatusOK {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge not ready within 30s\n%s", b.Out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Exited reports whether the process has exited.
func (b *Bridge) Exited() bool {
	select {
	case err := <-b.done:
		b.done <- err
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits for the exit, returning its error and how long it took.
func (b *Bridge) Stop(t testing.TB, timeout time.Duration) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := b.Cmd.Process.Signal(syscall.SIGTERM); err != nil && !b.Exited() {
		t.Fatalf("SIGTERM: %v", err)
	}
	return b.Wait(t, timeout), time.Since(start)
}

// Kill sends SIGKILL and waits for the exit.
func (b *Bridge) Kill(t testing.TB) {
	t.Helper()
	if err := b.Cmd.Process.Kill(); err != nil && !b.Exited() {
		t.Fatalf("SIGKILL: %v", err)
	}
	b.Wait(t, 10*time.Second)
}

// Wait waits up to timeout for the process to exit by itself and returns its exit error.
func (b *Bridge) Wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-b.done:
		b.done <- err
		return err
	case <-time.After(timeout):
		t.Fatalf("bridge still running after %s\n%s", timeout, b.Out.String())
		return nil
	}
}

// HTTPGet returns the status code and body of a GET (0 and the error text when the
// request fails), bounded by 2 s.
func HTTPGet(url string) (int, string) {
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
