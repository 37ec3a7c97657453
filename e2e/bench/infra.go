package main

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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"
)

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// redisProc is a spawned redis-server (AOF on, no RDB snapshots).
type redisProc struct {
	cmd  *exec.Cmd
	addr string
	dir  string
	rdb  *redis.Client
	done chan struct{}
}

// startRedis spawns redis-server with AOF fsync (everysec or always) and extra arguments.
func startRedis(fsync string, extra ...string) (*redisProc, error) {
	dir, err := os.MkdirTemp("", "delaybridge-bench-redis-")
	if err != nil {
		return nil, err
	}
	addr := freeAddr()
	_, port, _ := net.SplitHostPort(addr)
	args := append([]string{"--bind", "127.0.0.1", "--port", port, "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", fsync, "--logfile", filepath.Join(dir, "redis.log")}, extra...)
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	r := &redisProc{cmd: cmd, addr: addr, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	r.rdb = redis.NewClient(&redis.Options{Addr: addr})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := r.rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r, nil
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("redis-server not ready: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startReplica spawns a replica of primary (same AOF fsync) and waits until primary counts
// it online.
func startReplica(primary *redisProc, fsync string) (*redisProc, error) {
	host, port, _ := net.SplitHostPort(primary.addr)
	r, err := startRedis(fsync, "--replicaof", host, port)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := primary.rdb.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") {
			return r, nil
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("replica of %s not online: %v %q", primary.addr, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisProc) stop() {
	_ = r.rdb.Close()
	_ = r.cmd.Process.Kill()
	<-r.done
	os.RemoveAll(r.dir)
}

// redisStats is the part of INFO the benchmark uses.
type redisStats struct {
	usedMemory int64
	cpu        float64 // used_cpu_sys + used_cpu_user (+ _children: AOF rewrites), seconds
	forks      int64   // total_forks: AOF rewrites (there are no RDB saves)
}

func (r *redisProc) stats() redisStats {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := r.rdb.Info(ctx, "memory", "cpu", "stats").Result()
	if err != nil {
		return redisStats{}
	}
	var st redisStats
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			st.usedMemory, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children":
			f, _ := strconv.ParseFloat(v, 64)
			st.cpu += f
		case "total_forks":
			st.forks, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return st
}

// natsProc is an embedded nats-server with JetStream (file store).
type natsProc struct {
	s   *server.Server
	dir string
}

func startNATS() (*natsProc, error) {
	dir, err := os.MkdirTemp("", "delaybridge-bench-nats-")
	if err != nil {
		return nil, err
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("nats-server not ready")
	}
	return &natsProc{s: s, dir: dir}, nil
}

func (n *natsProc) url() string { return n.s.ClientURL() }

func (n *natsProc) stop() {
	n.s.Shutdown()
	n.s.WaitForShutdown()
	os.RemoveAll(n.dir)
}

// bridgeProc is one running bridge binary.
type bridgeProc struct {
	cmd      *exec.Cmd
	httpAddr string
	out      *syncBuffer
	done     chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 { // keep the tail bounded
		s.b.Reset()
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startBridge(bin string, env map[string]string) (*bridgeProc, error) {
	b := &bridgeProc{httpAddr: freeAddr(), out: &syncBuffer{}, done: make(chan struct{})}
	b.cmd = exec.Command(bin)
	b.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"BRIDGE_HTTP_ADDR=" + b.httpAddr, "BRIDGE_API_ADDR=" + freeAddr(), "BRIDGE_LOG_LEVEL=warn"}
	if profileDir != "" {
		b.cmd.Env = append(b.cmd.Env, "BRIDGE_PPROF=true")
	}
	for k, v := range env {
		b.cmd.Env = append(b.cmd.Env, k+"="+v)
	}
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-b.done:
			return nil, fmt.Errorf("bridge exited before ready:\n%s", b.out.String())
		default:
		}
		if httpStatus("http://"+b.httpAddr+"/readyz") == http.StatusOK {
			return b, nil
		}
		if time.Now().After(deadline) {
			b.stop()
			return nil, fmt.Errorf("bridge not ready in 30s:\n%s", b.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cpuProfile fetches a CPU profile of d from the bridge's /debug/pprof (BRIDGE_PPROF) into
// file; failures are reported on stderr and otherwise ignored.
func (b *bridgeProc) cpuProfile(file string, d time.Duration) {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.httpAddr, int(d.Seconds()))
	resp, err := http.Get(url)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s", resp.Status)
	}
	if err == nil {
		defer resp.Body.Close()
		var data []byte
		if data, err = io.ReadAll(resp.Body); err == nil {
			err = os.WriteFile(file, data, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "profile %s: %v\n", file, err)
	}
}

func (b *bridgeProc) stop() {
	select {
	case <-b.done:
		return
	default:
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

// cpuSeconds is utime+stime of the process from /proc/<pid>/stat.
func (b *bridgeProc) cpuSeconds() float64 { return procCPU(b.cmd.Process.Pid) }

func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// after ")": state(3) ... utime is field 14, stime 15 (1-based in proc(5)) -> index 11, 12 here.
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// selfCPU is the CPU time of this (harness) process: embedded NATS, publishers,
// subscribers, and for asynq its client and server.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func httpStatus(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
