package api

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/ingress/intake"
)

// newAPIHosts serves the message API over a fresh store with BRIDGE_API_HOSTS hosts and
// token; it returns the listener's address and a client for it.
func newAPIHosts(t *testing.T, token string, hosts ...string) (string, *client.Client, *delaystore.Store) {
	t.Helper()
	st := storetest.New(t, time.Second)
	h := New(Config{
		Rules: intake.Rules{MaxDelay: 24 * time.Hour, MaxPayload: 64, Targets: intake.TargetPolicy{
			Brokers: map[string]bool{"nats": true}, Allow: []string{"*"},
		}},
		DefaultBroker: "nats", Token: token, Hosts: hosts,
	}, st, adminOf(t, st), nil)
	srv := serveAPI(t, h)
	return srv.Listener.Addr().String(), &client.Client{Base: srv.URL, Token: token, HTTP: srv.Client}, st
}

// rawRequest writes req (a request head, CRLF line ends added; a body after an empty
// line) on a new connection to addr and returns the answer's status and body.
func rawRequest(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, strings.ReplaceAll(req, "\n", "\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHostNotAllowed (issue 37 item 6): without a token, a request whose Host is a DNS
// name other than localhost and the BRIDGE_API_HOSTS names is refused with 403
// host_not_allowed on every route (a page on a name rebound to 127.0.0.1 is same-origin
// to the browser, so the cross-origin guard passes it); IP literals, localhost and the
// listed names pass with any port, in any case, with a trailing dot; with a token every
// host passes.
func TestHostNotAllowed(t *testing.T) {
	addr, c, st := newAPIHosts(t, "", "bridge.internal", "Console.Example.")
	ctx := context.Background()
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "zz.a", Delay: []byte(`"1h"`), ID: "keep", Payload: str("p")}); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	bulk := `{"target":"zz.*"}`
	post := func(host string) string {
		return "POST /v1/bulk/cancel HTTP/1.1\nHost: " + host + "\nContent-Type: application/json\nOrigin: http://" + host +
			"\nSec-Fetch-Site: same-origin\nContent-Length: " + strconv.Itoa(len(bulk)) + "\nConnection: close\n\n" + bulk
	}
	get := func(path, host string) string {
		return "GET " + path + " HTTP/1.1\nHost: " + host + "\nConnection: close\n\n"
	}
	refused := []string{
		"evil.test:" + port, "evil.test", "EVIL.TEST:" + port, "evil.test.:" + port, "localhost.evil.test:" + port,
		"localhost.evil.test.", "foo.localhost", "127.0.0.1.evil.test", "xn--80ak6aa92e.com:" + port, "bridge.internal.evil.test",
		"internal", "localhost:" + port + "x", "localhost:-1", "[::1]x", "[127.0.0.1]:" + port, "[evil.test]:" + port,
	}
	for _, host := range refused {
		for _, req := range []string{post(host), get("/v1/messages", host), get("/v1/messages/keep", host), get("/v1/stats", host),
			get("/ui/", host), get("/ui/app.js", host), get("/no/such/path", host), get("/v1/audit", host)} {
			code, body := rawRequest(t, addr, req)
			if code != http.StatusForbidden || !strings.Contains(body, `"error":"host_not_allowed: `) {
				t.Errorf("Host %q: %s = %d %s, want 403 host_not_allowed", host, strings.SplitN(req, "\n", 2)[0], code, body)
			}
		}
	}
	// An absolute-form request URI names the host net/http serves (r.Host): it is checked
	// whatever the Host header says.
	if code, body := rawRequest(t, addr, "GET http://evil.test:"+port+"/v1/messages HTTP/1.1\nHost: 127.0.0.1:"+port+"\nConnection: close\n\n"); code != http.StatusForbidden ||
		!strings.Contains(body, "host_not_allowed") {
		t.Errorf("absolute-form http://evil.test = %d %s, want 403 host_not_allowed", code, body)
	}
	if code, body := rawRequest(t, addr, "GET http://127.0.0.1@evil.test:"+port+"/v1/messages HTTP/1.1\nHost: 127.0.0.1:"+port+"\nConnection: close\n\n"); code != http.StatusForbidden ||
		!strings.Contains(body, "host_not_allowed") {
		t.Errorf("absolute-form http://127.0.0.1@evil.test = %d %s, want 403 host_not_allowed", code, body)
	}
	// A Host header with userinfo is malformed: net/http answers 400 before the API; the
	// guard refuses it too, should a server ever pass one.
	for _, host := range []string{"user@localhost", "localhost@evil.test:" + port, "127.0.0.1@evil.test"} {
		if code, _ := rawRequest(t, addr, post(host)); code != http.StatusBadRequest && code != http.StatusForbidden {
			t.Errorf("Host %q = %d, want 400 or 403", host, code)
		}
		if hostAllowed(host, map[string]bool{"localhost": true}) {
			t.Errorf("hostAllowed(%q) = true", host)
		}
	}
	if s, err := st.Stats(ctx); err != nil || s.Parked != 1 {
		t.Fatalf("refused requests changed the store: %+v %v", s, err)
	}
	allowed := []string{
		"127.0.0.1:" + port, "127.0.0.1", "10.1.2.3:80", "[::1]:" + port, "[::1]", "[::ffff:127.0.0.1]:" + port,
		"localhost", "localhost:" + port, "LOCALHOST:1", "localhost.", "localhost.:" + port, "localhost:",
		"bridge.internal:" + port, "BRIDGE.Internal.", "console.example:443",
	}
	for _, host := range allowed {
		if code, body := rawRequest(t, addr, get("/v1/stats", host)); code != http.StatusOK {
			t.Errorf("Host %q: GET /v1/stats = %d %s, want 200", host, code, body)
		}
		if code, body := rawRequest(t, addr, get("/ui/", host)); code != http.StatusOK {
			t.Errorf("Host %q: GET /ui/ = %d %s, want 200", host, code, body)
		}
	}
	if code, body := rawRequest(t, addr, "GET http://127.0.0.1:"+port+"/v1/stats HTTP/1.1\nHost: evil.test\nConnection: close\n\n"); code != http.StatusOK {
		t.Errorf("absolute-form http://127.0.0.1 = %d %s, want 200", code, body)
	}
	// HTTP/1.0 without a Host: no browser sends that.
	if code, body := rawRequest(t, addr, "GET /v1/stats HTTP/1.0\n\n"); code != http.StatusOK {
		t.Errorf("HTTP/1.0 without Host = %d %s, want 200", code, body)
	}
	// The listed name is a full API: the same bulk cancel goes through.
	if code, body := rawRequest(t, addr, post("bridge.internal:"+port)); code != http.StatusOK || !strings.Contains(body, `"changed":1`) {
		t.Fatalf("bulk cancel through bridge.internal = %d %s, want 200 changed 1", code, body)
	}

	// With a token, every host is allowed (and the token is required).
	taddr, _, _ := newAPIHosts(t, "s3cret")
	for _, host := range []string{"evil.test:" + port, "localhost.evil.test"} {
		code, body := rawRequest(t, taddr, "GET /v1/stats HTTP/1.1\nHost: "+host+"\nAuthorization: Bearer s3cret\nConnection: close\n\n")
		if code != http.StatusOK {
			t.Errorf("token, Host %q = %d %s, want 200", host, code, body)
		}
		if code, _ := rawRequest(t, taddr, get("/v1/stats", host)); code != http.StatusUnauthorized {
			t.Errorf("token, Host %q without it = %d, want 401", host, code)
		}
	}
}

// TestCheckHostName: the entries BRIDGE_API_HOSTS takes.
func TestCheckHostName(t *testing.T) {
	for _, ok := range []string{"bridge.internal", "Bridge.Example.COM", "localhost", "a", "xn--80ak6aa92e.com", "bridge.internal.",
		"a-b.c-d", strings.Repeat("a", 63) + ".x"} {
		if p := CheckHostName(ok); p != "" {
			t.Errorf("%q: %s, want accepted", ok, p)
		}
	}
	for _, bad := range []struct{ name, want string }{
		{"", "empty"},
		{"*.example.com", "wildcard"},
		{"*", "wildcard"},
		{"bridge.internal:8081", "port"},
		{"http://bridge.internal", "scheme"},
		{"bridge.internal/ui", "path"},
		{"user@bridge.internal", "user"},
		{"127.0.0.1", "IP address"},
		{"[::1]", "IP address"},
		{"::1", "IP address"},
		{"exa mple.com", "letters, digits"},
		{"bücher.example", "xn--"},
		{"a..b", "1-63"},
		{".", "1-253"},
		{"-a.b", "hyphen"},
		{strings.Repeat("a", 64) + ".x", "1-63"},
		{strings.Repeat("a.", 127) + "ab", "1-253"},
	} {
		if p := CheckHostName(bad.name); !strings.Contains(p, bad.want) {
			t.Errorf("%q: %q, want a problem naming %q", bad.name, p, bad.want)
		}
	}
}
