package testredis

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvURL names the environment variable that points the tests at an existing server.
const EnvURL = "BRIDGE_TEST_REDIS_URL"

// startTimeout bounds how long a spawned server may take to answer PING.
const startTimeout = 5 * time.Second

// Server is a spawned redis-server. Its methods are safe for concurrent use.
type Server struct {
	port int
	dir  string
	args []string
	// portArgs, when set, adds arguments that depend on the port (the cluster bus port).
	portArgs func(port int) []string
	// busPort is the cluster bus port of a cluster node.
	busPort int
	// password is sent with AUTH before the readiness PING.
	password string
	// sentinelConf, when set, runs the server as a Sentinel with this config file.
	sentinelConf string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
	out  *lockedBuffer
}

// Start spawns redis-server on a free 127.0.0.1 port with a fresh data directory
// (t.TempDir), RDB snapshots off and an AOF fsynced on every write; extraArgs are appended
// to the command line. It blocks until the server answers PING (at most ~5 s) and kills it
// with SIGKILL in t.Cleanup. It calls t.Fatal when redis-server is not on PATH or does not
// start; it never skips.
func Start(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	return start(t, &Server{dir: t.TempDir(), args: extraArgs})
}

// start spawns s on a free port (a few tries); t.Fatal on failure.
func start(t testing.TB, s *Server) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("testredis: redis-server not found on PATH (install the redis-server package): %v", err)
	}
	t.Cleanup(s.Kill)
	var lastErr error
	// A free port may be taken between probing and binding: try a few.
	for range 5 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("testredis: %v", err)
		}
		s.port = port
		if lastErr = s.spawn(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("testredis: %v", lastErr)
	return nil
}

// Addr returns the server's "127.0.0.1:port". It does not block.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns "redis://127.0.0.1:port/0". It does not block.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Kill sends SIGKILL to the server (and its process group) and waits until it has exited.
// Data written before Kill survives in the AOF. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

// Restart starts the server again on the same port and data directory (killing it first
// if it still runs) and blocks until it answers PING; t.Fatal on failure.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	s.killLocked()
	s.mu.Unlock()
	if err := s.spawn(); err != nil {
		t.Fatalf("testredis: restart: %v", err)
	}
}

// URL returns the value of BRIDGE_TEST_REDIS_URL when it is set, else the URL of a server
// spawned for this test by [Start].
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return Start(t).URL()
}

// Client returns a go-redis client for URL(t), closed in t.Cleanup.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("testredis: parse url: %v", err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// Prefix returns a random key prefix ("t" + 10 hex characters) so that tests never collide
// on a shared server.
func Prefix(t testing.TB) string {
	t.Helper()
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testredis: random prefix: %v", err)
	}
	return "t" + hex.EncodeToString(b[:])
}

func (s *Server) spawn() error {
	var args []string
	if s.sentinelConf != "" {
		args = []string{s.sentinelConf, "--sentinel", "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--dir", s.dir}
	} else {
		args = []string{
			"--bind", "127.0.0.1",
			"--port", strconv.Itoa(s.port),
			"--dir", s.dir,
			"--save", "",
			"--appendonly", "yes",
			"--appendfsync", "always",
		}
	}
	if s.portArgs != nil {
		args = append(args, s.portArgs(s.port)...)
	}
	args = append(args, s.args...)
	cmd := exec.Command("redis-server", args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done, s.out = cmd, done, out
	s.mu.Unlock()

	deadline := time.Now().Add(startTimeout)
	var err error
	for {
		if err = pingAuth(s.Addr(), s.password); err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, out.tail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on port %d not answering PING after %s: %v; output: %s",
				s.port, startTimeout, err, out.tail())
		}
	}
}

// running reports whether the server process runs (was not killed).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	// Negative pid: the whole process group (Setpgid made the server its leader).
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd, s.done = nil, nil
}

// ping sends one PING and expects +PONG (a server still loading its AOF answers -LOADING).
func ping(addr string) error { return pingAuth(addr, "") }

// pingAuth is ping after AUTH password (when not empty).
func pingAuth(addr, password string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	r := bufio.NewReader(c)
	if password != "" {
		if _, err := fmt.Fprintf(c, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password); err != nil {
			return err
		}
		if line, err := r.ReadString('\n'); err != nil {
			return err
		} else if strings.TrimSpace(line) != "+OK" {
			return errors.New("auth answered " + strings.TrimSpace(line))
		}
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return errors.New("ping answered " + strings.TrimSpace(line))
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lockedBuffer collects the server's output for error messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.buf.String()
	if len(out) > 2000 {
		out = out[len(out)-2000:]
	}
	return out
}
