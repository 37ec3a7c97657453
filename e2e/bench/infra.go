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
	"sync/atomic"
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
	// infos counts the INFO calls of the harness (see redisStats.infos).
	infos atomic.Int64
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
	// calls is the sum of calls over every cmdstat_* line of INFO commandstats: every
	// command Redis executed, those called by Lua scripts included (an EVALSHA that calls
	// ZADD and HSET counts 3). cmds is the same per command (keys as in INFO: "evalsha",
	// "client|setname").
	calls int64
	cmds  map[string]int64
	// usec is the usec field of the same lines: microseconds Redis spent in each command
	// (a script's figure includes the commands it called).
	usec map[string]int64
	// reads is total_reads_processed: socket read events, about one per round trip (a
	// pipeline that arrives in one segment is one read).
	reads int64
	// infos is how many INFO calls the harness sent to this server before this one: the
	// harness's own INFOs are counted by Redis too, and deltas subtract them (see sub).
	infos int64
}

// sub returns b - a for the counters (calls, cmds, reads), without the harness's own INFO
// calls: b's INFO answer counts a's INFO and every INFO sent between, not its own.
func (b redisStats) sub(a redisStats) (calls, reads int64, cmds map[string]int64) {
	own := b.infos - a.infos
	cmds = map[string]int64{}
	for k, v := range b.cmds {
		if d := v - a.cmds[k]; d != 0 {
			cmds[k] = d
		}
	}
	if cmds["info"] -= own; cmds["info"] <= 0 {
		delete(cmds, "info")
	}
	return b.calls - a.calls - own, b.reads - a.reads - own, cmds
}

// add sums the counters of two servers (a cluster's masters).
func (a redisStats) add(b redisStats) redisStats {
	a.usedMemory += b.usedMemory
	a.cpu += b.cpu
	a.forks += b.forks
	a.calls += b.calls
	a.reads += b.reads
	a.infos += b.infos
	m := make(map[string]int64, len(a.cmds)+len(b.cmds))
	for k, v := range a.cmds {
		m[k] += v
	}
	for k, v := range b.cmds {
		m[k] += v
	}
	a.cmds = m
	u := make(map[string]int64, len(a.usec)+len(b.usec))
	for k, v := range a.usec {
		u[k] += v
	}
	for k, v := range b.usec {
		u[k] += v
	}
	a.usec = u
	return a
}

// usecSince returns the microseconds spent per command between a and b.
func (b redisStats) usecSince(a redisStats) map[string]int64 {
	out := map[string]int64{}
	for k, v := range b.usec {
		if d := v - a.usec[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// rewriting reports whether the server is rewriting its AOF (INFO persistence), or has one
// scheduled.
func (r *redisProc) rewriting() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.infos.Add(1)
	s, err := r.rdb.Info(ctx, "persistence").Result()
	return err == nil && (strings.Contains(s, "aof_rewrite_in_progress:1") || strings.Contains(s, "aof_rewrite_scheduled:1"))
}

// bgRewrite starts an AOF rewrite (BGREWRITEAOF: one command in the row's counts). An
// error is ignored: the caller waits for rewriting to be false either way.
func (r *redisProc) bgRewrite() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.rdb.BgRewriteAOF(ctx).Err()
}

func (r *redisProc) stats() redisStats {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	infos := r.infos.Add(1) - 1
	s, err := r.rdb.Info(ctx, "memory", "cpu", "stats", "commandstats").Result()
	if err != nil {
		return redisStats{infos: infos}
	}
	st := redisStats{cmds: map[string]int64{}, usec: map[string]int64{}, infos: infos}
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
		case "total_reads_processed":
			st.reads, _ = strconv.ParseInt(v, 10, 64)
		}
		if name, ok := strings.CutPrefix(k, "cmdstat_"); ok {
			// calls=N,usec=...,usec_per_call=...,rejected_calls=...,failed_calls=...
			for _, field := range strings.Split(v, ",") {
				f, n, _ := strings.Cut(field, "=")
				c, _ := strconv.ParseInt(n, 10, 64)
				switch f {
				case "calls":
					st.cmds[name] = c
					st.calls += c
				case "usec":
					st.usec[name] = c
				}
			}
		}
	}
	return st
}

// startCluster spawns a Redis Cluster of masters (no replicas) with AOF fsync, as
// internal/testredis.StartCluster does for the tests (slots split evenly, ADDSLOTSRANGE /
// SET-CONFIG-EPOCH / MEET, no redis-cli), and waits until every node reports
// cluster_state:ok. The nodes are returned in slot order.
func startCluster(fsync string, masters int) (_ []*redisProc, err error) {
	var nodes []*redisProc
	defer func() {
		if err != nil {
			for _, n := range nodes {
				n.stop()
			}
		}
	}()
	bus := map[*redisProc]string{}
	for range masters {
		b := freeAddr()
		_, bport, _ := net.SplitHostPort(b)
		n, err := startRedis(fsync, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", bport, "--cluster-node-timeout", "5000", "--cluster-require-full-coverage", "yes")
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
		bus[n] = bport
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const slots = 16384
	for i, n := range nodes {
		lo, hi := i*slots/masters, (i+1)*slots/masters-1
		if err := n.rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return nil, fmt.Errorf("cluster addslotsrange on %s: %w", n.addr, err)
		}
		if err := n.rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return nil, fmt.Errorf("cluster set-config-epoch on %s: %w", n.addr, err)
		}
	}
	for _, n := range nodes[1:] {
		host, port, _ := net.SplitHostPort(n.addr)
		if err := nodes[0].rdb.Do(ctx, "CLUSTER", "MEET", host, port, bus[n]).Err(); err != nil {
			return nil, fmt.Errorf("cluster meet %s: %w", n.addr, err)
		}
	}
	for {
		ok := true
		for _, n := range nodes {
			info, err := n.rdb.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", masters)) {
				ok = false
				break
			}
		}
		if ok {
			return nodes, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster of %d masters not ok within 30 s", masters)
		case <-time.After(50 * time.Millisecond):
		}
	}
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
	apiAddr  string
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

// reserveAddrs returns n distinct loopback addresses whose ports were free a moment ago:
// all n listeners are open at once, so no two addresses share a port (n separate freeAddr
// calls may get the same port back).
func reserveAddrs(n int) []string {
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

// startBridges starts n bridge processes with env, at most 8 starting at a time, each on
// its own HTTP and API ports (a start that loses a port race is retried on new ports),
// and returns once every one answers /readyz with 200 (checked again once all are up,
// since the first may have become unready while the others started). On error the ones
// started are stopped.
func startBridges(bin string, env map[string]string, n int) ([]*bridgeProc, error) {
	addrs := reserveAddrs(2 * n)
	bs := make([]*bridgeProc, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			httpAddr, apiAddr := addrs[2*i], addrs[2*i+1]
			for try := 0; ; try++ {
				bs[i], errs[i] = startBridge(bin, env, httpAddr, apiAddr)
				if errs[i] == nil || try == 2 || !strings.Contains(errs[i].Error(), "address already in use") {
					return
				}
				a := reserveAddrs(2)
				httpAddr, apiAddr = a[0], a[1]
			}
		})
	}
	wg.Wait()
	var started []*bridgeProc
	var firstErr error
	for i, b := range bs {
		if b != nil {
			started = append(started, b)
		}
		if errs[i] != nil && firstErr == nil {
			firstErr = fmt.Errorf("bridge %d of %d: %w", i+1, n, errs[i])
		}
	}
	if firstErr == nil {
		deadline := time.Now().Add(30 * time.Second)
		for _, b := range started {
			for httpStatus("http://"+b.httpAddr+"/readyz") != http.StatusOK {
				if time.Now().After(deadline) {
					firstErr = fmt.Errorf("bridge %s: /readyz not 200 30 s after all %d started:\n%s", b.httpAddr, n, tail(b.out.String(), 2000))
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if firstErr != nil {
				break
			}
		}
	}
	if firstErr != nil {
		stopBridges(started)
		return nil, firstErr
	}
	return started, nil
}

// stopBridges sends SIGTERM to every bridge at once, then waits for each (SIGKILL after
// 10 s), so that a fleet stops in about the time of one.
func stopBridges(bs []*bridgeProc) {
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Go(b.stop)
	}
	wg.Wait()
}

// startBridge starts one bridge on httpAddr (BRIDGE_HTTP_ADDR) and apiAddr
// (BRIDGE_API_ADDR) and waits until its /readyz answers 200 (at most 30 s).
func startBridge(bin string, env map[string]string, httpAddr, apiAddr string) (*bridgeProc, error) {
	b := &bridgeProc{httpAddr: httpAddr, apiAddr: apiAddr, out: &syncBuffer{}, done: make(chan struct{})}
	b.cmd = exec.Command(bin)
	b.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"BRIDGE_HTTP_ADDR=" + b.httpAddr, "BRIDGE_API_ADDR=" + apiAddr, "BRIDGE_LOG_LEVEL=warn"}
	if profileDir != "" {
		b.cmd.Env = append(b.cmd.Env, "BRIDGE_PPROF=true")
	}
	for k, v := range env {
		b.cmd.Env = append(b.cmd.Env, k+"="+v)
	}
	for k, v := range extraEnv {
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
			if err = os.MkdirAll(filepath.Dir(file), 0o755); err == nil {
				err = os.WriteFile(file, data, 0o644)
			}
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

// peakRSS is the peak resident set of the process (VmHWM of /proc/<pid>/status) in MiB,
// NaN when unknown.
func (b *bridgeProc) peakRSS() float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
	if err != nil {
		return nan()
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return nan()
			}
			return kb / 1024
		}
	}
	return nan()
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
