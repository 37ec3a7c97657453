//go:build fault

package fault

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiclient "github.com/delaybridge/delaybridge/httpapi/client"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// apiRSSBound is the documented bound (docs/guarantees.md, row H11) on the bridge's resident memory
// while 200 clients post large bodies at once, with the default limits
// (BRIDGE_MAX_PAYLOAD 1 MiB, BRIDGE_API_MAX_INFLIGHT_BYTES 32 MiB).
const apiRSSBound = 256 << 20

// procStatus reads a "kB" field (VmRSS, VmHWM) of /proc/<pid>/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read /proc/%d/status: %v", pid, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", field, line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// openFDs is the number of open file descriptors of pid.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("read /proc/%d/fd: %v", pid, err)
	}
	return len(ents)
}

// TestH11APILimits is row H11: the message API under hostile load. 200 clients post large
// bodies at once (80 valid ~1.3 MiB bodies, 100 of 2 MiB whose payload is over
// BRIDGE_MAX_PAYLOAD, 20 of 2 MiB with a wrong token), retrying on 503: the bridge's
// peak RSS (VmHWM, and VmRSS sampled every 10 ms) stays under apiRSSBound, every valid
// message is parked, every other request gets its 400 or 401. Then 300 idle keep-alive
// connections are all closed by the server after BRIDGE_HTTP_IDLE_TIMEOUT, open file
// descriptors never exceed BRIDGE_API_MAX_CONNS plus the baseline and return to the
// baseline; an idle connection to BRIDGE_HTTP_ADDR is closed too.
func TestH11APILimits(t *testing.T) {
	s := newStack(t)
	b := e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_API_TOKEN", "tok", "BRIDGE_HTTP_IDLE_TIMEOUT", "1s"))
	pid := b.Cmd.Process.Pid
	baseRSS := procStatus(t, pid, "VmRSS")

	// 200 concurrent large bodies.
	valid := base64.StdEncoding.EncodeToString(make([]byte, 1_000_000))
	oversized := strings.Repeat("x", 2<<20-200)
	body := func(i int) []byte {
		if i%10 != 0 && i%2 == 0 {
			return fmt.Appendf(nil, `{"target":"nats:out.load","delay":"1h","id":"load-%d","payload_base64":"%s"}`, i, valid)
		}
		return fmt.Appendf(nil, `{"target":"nats:out.load","delay":"1h","payload":"%s"}`, oversized)
	}
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
				for _, line := range strings.Split(string(data), "\n") {
					if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
						if kb<<10 > peak.Load() {
							peak.Store(kb << 10)
						}
					}
				}
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	type result struct{ final, first, refused503 int }
	results := make([]result, 200)
	startLoad := time.Now()
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			token := "tok"
			if i%10 == 0 {
				token = "wrong"
			}
			deadline := time.Now().Add(90 * time.Second)
			for {
				req, _ := http.NewRequest(http.MethodPost, "http://"+b.APIAddr+"/v1/messages", bytes.NewReader(body(i)))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				code := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				if results[i].first == 0 {
					results[i].first = code
				}
				if code != http.StatusServiceUnavailable && code != 0 || time.Now().After(deadline) {
					results[i].final = code
					return
				}
				if code == http.StatusServiceUnavailable {
					results[i].refused503++
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	close(gate)
	wg.Wait()
	loadTime := time.Since(startLoad)
	close(stopSampling)
	<-sampled
	hwm := procStatus(t, pid, "VmHWM")

	counts := map[int]int{}
	retried, wrong := 0, 0
	for i, r := range results {
		counts[r.final]++
		if r.refused503 > 0 {
			retried++
		}
		exp := http.StatusBadRequest // payload over BRIDGE_MAX_PAYLOAD
		switch {
		case i%10 == 0:
			exp = http.StatusUnauthorized
		case i%2 == 0:
			exp = http.StatusCreated
		}
		if r.final != exp {
			wrong++
			if wrong <= 5 {
				t.Errorf("client %d: final status %d, want %d", i, r.final, exp)
			}
		}
	}
	api := &apiclient.Client{Base: "http://" + b.APIAddr, Token: "tok"}
	st, err := api.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Parked != 80 {
		t.Errorf("parked %d, want the 80 valid messages", st.Parked)
	}
	if hwm > apiRSSBound || peak.Load() > apiRSSBound {
		t.Errorf("peak RSS %s (sampled %s), over the documented bound %s", mib(float64(hwm)), mib(float64(peak.Load())), mib(float64(apiRSSBound)))
	}
	t.Logf("H11 load: 200 clients (80 valid ~1.3 MiB, 100 over-payload 2 MiB, 20 wrong-token 2 MiB): final statuses %v, %d clients got 503 at least once; parked %d; %s; RSS before %s, peak VmHWM %s (sampled VmRSS max %s), bound %s",
		counts, retried, st.Parked, loadTime.Round(time.Millisecond), mib(float64(baseRSS)), mib(float64(hwm)), mib(float64(peak.Load())), mib(float64(apiRSSBound)))

	// 300 idle keep-alive connections. The baseline is taken once the load's own
	// keep-alive connections are gone (closed here, and idle-timed-out by the server).
	client.CloseIdleConnections()
	time.Sleep(2 * time.Second)
	baseFDs := openFDs(t, pid)
	const conns = 300
	var maxFDs atomic.Int64
	stopFD := make(chan struct{})
	fdDone := make(chan struct{})
	go func() {
		defer close(fdDone)
		for {
			if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil && int64(len(ents)) > maxFDs.Load() {
				maxFDs.Store(int64(len(ents)))
			}
			select {
			case <-stopFD:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	closedAfter := make([]time.Duration, conns)
	errs := make([]error, conns)
	var cwg sync.WaitGroup
	for i := range conns {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			closedAfter[i], errs[i] = idleConn(b.APIAddr, "/v1/stats", "tok")
		}()
	}
	cwg.Wait()
	close(stopFD)
	<-fdDone
	var slowest time.Duration
	failed := 0
	for i := range conns {
		if errs[i] != nil {
			failed++
			if failed <= 5 {
				t.Errorf("connection %d: %v", i, errs[i])
			}
		}
		slowest = max(slowest, closedAfter[i])
	}
	// Besides the API's connections, the Redis pool (go-redis: 10 per CPU) grows while
	// the 300 GET /v1/stats run: fdSlack covers it.
	const fdSlack = 30
	afterFDs := openFDs(t, pid)
	for deadline := time.Now().Add(5 * time.Second); afterFDs > baseFDs+fdSlack && time.Now().Before(deadline); afterFDs = openFDs(t, pid) {
		time.Sleep(50 * time.Millisecond)
	}
	if afterFDs > baseFDs+fdSlack {
		t.Errorf("open fds %d after the idle connections were closed, baseline %d", afterFDs, baseFDs)
	}
	if m := int(maxFDs.Load()); m > baseFDs+256+fdSlack {
		t.Errorf("open fds peaked at %d: more than BRIDGE_API_MAX_CONNS (256) over the baseline %d", m, baseFDs)
	}
	if n := serverConns(t, b.APIAddr); n != 0 {
		t.Errorf("%d connections to the API port still established", n)
	}
	opsClosed, err := idleConn(b.HTTPAddr, "/healthz", "")
	if err != nil {
		t.Errorf("ops listener: %v", err)
	}
	t.Logf("H11 idle: %d keep-alive connections, %d not closed by the server; closed at most %s after their answer (BRIDGE_HTTP_IDLE_TIMEOUT 1s); bridge fds %d before, peak %d (cap 256 connections), %d after; ops listener idle connection closed after %s",
		conns, failed, slowest.Round(time.Millisecond), baseFDs, maxFDs.Load(), afterFDs, opsClosed.Round(time.Millisecond))
}

// serverConns counts the established TCP connections whose local end is addr (the
// server's side), from /proc/net/tcp.
func serverConns(t *testing.T, addr string) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatalf("read /proc/net/tcp: %v", err)
	}
	want := fmt.Sprintf(":%04X", p)
	n := 0
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "01" {
			n++
		}
	}
	return n
}

// idleConn opens a connection to addr, sends one keep-alive GET path (with a bearer
// token when set), reads the 200, then waits without sending anything until the server
// closes the connection. It returns how long after the answer that took; an error when
// the answer is not 200 or the connection stays open 20 s.
func idleConn(addr, path, token string) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", path, auth); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // connections over the cap wait to be accepted
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, fmt.Errorf("answer: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		return 0, fmt.Errorf("answer %d (close %v), want a kept-alive 200", resp.StatusCode, resp.Close)
	}
	answered := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 0, errors.New("idle connection still open after 20 s")
	}
	return time.Since(answered), nil
}
