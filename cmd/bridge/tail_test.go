package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTail: bridge tail asks for the glob it was given, with the token, prints one line
// per event (an id's control characters quoted, never sent to the terminal), --json one
// JSON object per line, and says so when the bridge ends the stream.
func TestTail(t *testing.T) {
	var query, auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/events" {
			http.NotFound(w, r)
			return
		}
		query, auth = r.URL.Query().Get("target"), r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, ": live events\n\n"+
			`data: {"type":"delivered","at":1700000000250,"id":"m1","target":"nats:orders.a","due":1700000000000,"attempts":1}`+"\n\n"+
			`data: {"type":"dead_lettered","at":1700000001000,"id":"m\u001b[2J","target":"nats:orders.b","attempts":10,"reason":"publish_failed"}`+"\n\n"+
			`data: {"type":"changed","at":1700000002000,"op":"bulk_cancel","target":"orders.*","count":12}`+"\n\n"+
			`data: {"type":"missed","at":1700000003000,"count":5}`+"\n\n")
	}))
	t.Cleanup(srv.Close)
	code, out, errOut := runCmd(t, "tail", "--api", srv.URL, "--token", "tok", "--target", "orders.*")
	if code != 1 || !strings.Contains(errOut, "ended the stream") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if query != "orders.*" || auth != "Bearer tok" {
		t.Fatalf("asked with target %q, Authorization %q", query, auth)
	}
	for _, want := range []string{
		"22:13:20.250  delivered          nats:orders.a  id=m1  late=250ms\n",
		`dead_lettered      nats:orders.b  id="m\u001b[2J"  attempts=10  reason=publish_failed`,
		"changed:bulk_cancel orders.*  messages=12",
		"missed",
		"5 events missed",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Fatal("an escape character reached the terminal")
	}
	_, out, _ = runCmd(t, "tail", "--api", srv.URL, "--json")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], `{"type":"delivered"`) {
		t.Fatalf("--json output:\n%s", out)
	}
}
