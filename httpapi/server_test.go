package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/api"
	"github.com/delaybridge/delaybridge/ingress/intake"
)

// serveAPI serves the message API (token "tok", 64 KiB payloads) with sc on a fresh
// loopback listener and returns its address.
func serveAPI(t *testing.T, budget int64, sc httpapi.ServerConfig) string {
	t.Helper()
	st := storetest.New(t, time.Second)
	h := api.New(api.Config{
		Rules: intake.Rules{MaxDelay: time.Hour, MaxPayload: 64 << 10, Targets: intake.TargetPolicy{
			Brokers: map[string]bool{"nats": true}, Allow: []string{"*"},
			Own: map[string][]string{"nats": {"delay.in"}},
		}},
		DefaultBroker:    "nats",
		Token:            "tok",
		MaxInflightBytes: budget,
	}, st, nil, nil)
	return serveHandler(t, h, sc)
}

func serveHandler(t *testing.T, h http.Handler, sc httpapi.ServerConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- httpapi.ServeListener(ctx, ln, h, sc, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// rawPost opens a connection and sends a POST /v1/messages header announcing
// contentLength bytes, then the first bodyPrefix bytes of the body.
func rawPost(t *testing.T, addr, token string, contentLength, bodyPrefix int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", token, contentLength)
	if bodyPrefix > 0 {
		if _, err := c.Write([]byte(strings.Repeat(" ", bodyPrefix))); err != nil {
			t.Fatal(err)
		}
	}
	return c, bufio.NewReader(c)
}

// readResponse reads one response within 5 s.
func readResponse(t *testing.T, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// closedByServer reports whether the server closes c within d (EOF or reset), without
// the client sending anything more.
func closedByServer(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestAPIUnauthorizedBodyNotRead: a request with a wrong token is answered 401 and its
// connection closed without waiting for (reading or draining) the body it announced.
// 200 KiB: net/http drains an unread body of less than 256 KiB after the handler to keep
// the connection, unless the answer says Connection: close.
func TestAPIUnauthorizedBodyNotRead(t *testing.T) {
	addr := serveAPI(t, 0, httpapi.ServerConfig{})
	c, br := rawPost(t, addr, "wrong", 200<<10, 1024)
	resp := readResponse(t, c, br)
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("status %d, close %v: want 401 with Connection: close", resp.StatusCode, resp.Close)
	}
	if !closedByServer(c, br, 3*time.Second) {
		t.Fatal("the server kept the connection open waiting for the body of an unauthorized request")
	}
}

// TestAPIBodyLimits: a Content-Length over the per-request limit is refused with 413
// unread; a chunked body over it is cut off with 413.
func TestAPIBodyLimits(t *testing.T) {
	addr := serveAPI(t, 0, httpapi.ServerConfig{})
	c, br := rawPost(t, addr, "tok", 10<<20, 0)
	resp := readResponse(t, c, br)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Fatalf("announced 10 MiB: status %d, close %v; want 413 and close", resp.StatusCode, resp.Close)
	}
	if !closedByServer(c, br, 3*time.Second) {
		t.Fatal("connection not closed after 413")
	}

	body := `{"target":"a.b","payload":"` + strings.Repeat("x", 300<<10) + `"}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages", io.MultiReader(strings.NewReader(body))) // no length: chunked
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked 300 KiB body: status %d, want 413", r.StatusCode)
	}
}

// TestAPIInflightBudget: while one request holds the body budget, a request that does not
// fit is answered 503 with Retry-After at once, without its body; once the first ends,
// requests go through again.
func TestAPIInflightBudget(t *testing.T) {
	addr := serveAPI(t, 200<<10, httpapi.ServerConfig{}) // per-request limit 192 KiB, budget 200 KiB
	holder, _ := rawPost(t, addr, "tok", 150<<10, 10)

	post := func(body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Content-Type", "application/json")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r
	}
	var resp *http.Response
	deadline := time.Now().Add(5 * time.Second)
	for { // the holder's reservation happens in the server's goroutine: poll
		resp = post(`{"target":"a.b","delay":"1h","payload":"` + strings.Repeat("z", 100<<10) + `"}`)
		if resp.StatusCode == http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Fatalf("second body while the budget is held: status %d, Retry-After %q, close %v; want 503, set, close",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close)
	}

	holder.Close() // the held request ends (its body cut short)
	body := `{"target":"a.b","delay":"1h","payload":"` + strings.Repeat("y", 50<<10) + `"}`
	deadline = time.Now().Add(5 * time.Second)
	for {
		r := post(body)
		if r.StatusCode == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the holder left: status %d, want 201", r.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServerIdleTimeout: an idle keep-alive connection is closed by the server after
// IdleTimeout.
func TestServerIdleTimeout(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	addr := serveHandler(t, h, httpapi.ServerConfig{IdleTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp := readResponse(t, c, br); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("status %d close %v", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	if !closedByServer(c, br, 5*time.Second) {
		t.Fatal("idle keep-alive connection still open after 5 s (IdleTimeout 300ms)")
	}
	t.Logf("idle connection closed after %s", time.Since(start).Round(time.Millisecond))
}

// TestServerMaxConns: with MaxConns 1, a second connection is served only once the first
// is closed.
func TestServerMaxConns(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	addr := serveHandler(t, h, httpapi.ServerConfig{MaxConns: 1})
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fbr := bufio.NewReader(first)
	fmt.Fprint(first, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	readResponse(t, first, fbr) // accepted and kept alive

	second, err := net.Dial("tcp", addr) // completes in the kernel's backlog
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	sbr := bufio.NewReader(second)
	fmt.Fprint(second, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := sbr.Peek(1); err == nil {
		t.Fatal("second connection served while the first is open (MaxConns 1)")
	}
	first.Close()
	if resp := readResponse(t, second, sbr); resp.StatusCode != 200 {
		t.Fatalf("second connection after the first closed: status %d", resp.StatusCode)
	}
}

// TestServerPanicAnswered: a handler that panics gets its request answered 500 (not a
// dropped connection, which a client cannot tell from a crashed bridge), the panic is
// logged at Error with its stack, and the server goes on serving.
func TestServerPanicAnswered(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/boom" {
			var empty []int
			_ = empty[len(r.URL.Path)-5] // index out of range [0] with length 0
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- httpapi.ServeListener(ctx, ln, h, httpapi.ServerConfig{}, logger) }()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + ln.Addr().String()
	for range 2 {
		resp, err := http.Get(base + "/boom")
		if err != nil {
			t.Fatalf("a panicking handler's request: %v, want an answer", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), `"error"`) {
			t.Fatalf("answer %d %s, want 500 with an error", resp.StatusCode, body)
		}
		resp, err = http.Get(base + "/ok")
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("after a panic: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	mu.Lock()
	out := logged.String()
	mu.Unlock()
	if strings.Count(out, "level=ERROR") != 2 || !strings.Contains(out, "index out of range") || !strings.Contains(out, "server_test.go") {
		t.Fatalf("the panics are not logged at Error with their stack:\n%s", out)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
