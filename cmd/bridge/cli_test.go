package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/delaybridge/delaybridge/config"
)

// fakeAPI is a message API that answers every call the CLI makes with a fixed body and
// records each request as "METHOD /path Authorization".
type fakeAPI struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

// newFakeAPI answers with the bodies by "METHOD /path" (201 for POST /v1/messages, else 200).
func newFakeAPI(t testing.TB, bodies map[string]string) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.Path
		f.mu.Lock()
		f.seen = append(f.seen, key+" "+r.Header.Get("Authorization"))
		f.mu.Unlock()
		body, ok := bodies[key]
		if !ok {
			http.Error(w, `{"error":"not faked: `+key+`"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if key == "POST /v1/messages" {
			w.WriteHeader(http.StatusCreated)
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPI) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

// runCmd runs the CLI with no environment and returns its exit code and outputs.
func runCmd(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = run(t.Context(), args, nil, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

const statsBody = `{"parked":1,"per_shard":[1],"next_due":null,"now":0}`

// TestGlobalFlagsBeforeCommand: --api and --token work before the command as after it,
// in every form the flag package takes, also before bulk's operation; before a command
// that does not use the API they are refused, naming the commands that take them.
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	api := newFakeAPI(t, map[string]string{
		"GET /v1/stats":        statsBody,
		"GET /v1/messages":     `{"messages":[],"next_cursor":null}`,
		"POST /v1/bulk/resume": `{"op_id":"x","matched":0,"changed":0,"next_cursor":null}`,
		"POST /v1/bulk/cancel": `{"op_id":"y","matched":2,"changed":2,"next_cursor":null}`,
	})
	for _, c := range []struct {
		args []string
		want string // the request the fake API saw
	}{
		{[]string{"--api", api.URL, "stats"}, "GET /v1/stats "},
		{[]string{"--api=" + api.URL, "--token", "s3", "ls"}, "GET /v1/messages Bearer s3"},
		{[]string{"-token=s3", "-api", api.URL, "ls", "--limit", "5"}, "GET /v1/messages Bearer s3"},
		{[]string{"--token", "early", "stats", "--api", api.URL, "--token", "late"}, "GET /v1/stats Bearer late"},
		{[]string{"--api", api.URL, "bulk", "resume", "0123456789abcdef0123456789abcdef"}, "POST /v1/bulk/resume "},
		{[]string{"--api", api.URL, "bulk", "cancel", "--target", "x.*"}, "POST /v1/bulk/cancel "},
	} {
		before := len(api.requests())
		code, out, errOut := runCmd(t, c.args...)
		seen := api.requests()[before:]
		if code != 0 || len(seen) != 1 || seen[0] != c.want {
			t.Errorf("%q: exit %d, requests %q (want %q)\nstdout: %s\nstderr: %s", c.args, code, seen, c.want, out, errOut)
		}
	}

	code, _, errOut := runCmd(t, "--api", api.URL, "dev")
	if code != 2 || !strings.Contains(errOut, "--api and --token are flags of the commands that use the message API (send, stats") {
		t.Errorf("--api before dev: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCmd(t, "--api")
	if code != 2 || !strings.Contains(errOut, "flag needs an argument: --api") {
		t.Errorf("--api without a value: exit %d, stderr %q", code, errOut)
	}
}

// TestHelpNamesAPIFlags: the top-level help names --api and --token, the variables they
// default from and the default address, and points to each command's own --help.
func TestHelpNamesAPIFlags(t *testing.T) {
	code, out, _ := runCmd(t, "--help")
	for _, want := range []string{"--api host:port", "--token T", "BRIDGE_API_ADDR, else " + config.DefaultAPIAddr,
		"BRIDGE_API_TOKEN_FILE", "before or after the command", "bridge COMMAND --help"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("--help (exit %d) does not say %q", code, want)
		}
	}
}

// TestCommandHelpOnce: `bridge CMD --help` prints the command's usage once and exits 0;
// a bad flag prints the problem and the usage once and exits 2.
func TestCommandHelpOnce(t *testing.T) {
	for _, cmd := range [][]string{{"send"}, {"stats"}, {"cancel"}, {"ls"}, {"targets"}, {"bulk"},
		{"bulk", "resume"}, {"audit"}, {"healthcheck"}, {"redrive"}, {"dev"},
		{"dead-letters", "ls"}, {"dead-letters", "show"}, {"dead-letters", "purge"}} {
		usage := "usage: bridge " + strings.Join(cmd, " ")
		code, out, errOut := runCmd(t, append(cmd, "--help")...)
		if n := strings.Count(errOut, usage); code != 0 || n != 1 || out != "" {
			t.Errorf("%q --help: exit %d, usage printed %d times, stdout %q\n%s", cmd, code, n, out, errOut)
		}
		code, _, errOut = runCmd(t, append(cmd, "--no-such-flag")...)
		if n := strings.Count(errOut, usage); code != 2 || n != 1 || !strings.Contains(errOut, "no-such-flag") {
			t.Errorf("%q --no-such-flag: exit %d, usage printed %d times\n%s", cmd, code, n, errOut)
		}
	}
	code, _, errOut := runCmd(t, "ls", "extra")
	if n := strings.Count(errOut, "usage: bridge ls"); code != 2 || n != 1 || !strings.Contains(errOut, `bridge ls takes no arguments, got ["extra"]`) {
		t.Errorf("ls extra: exit %d, usage printed %d times\n%s", code, n, errOut)
	}
}

// TestTimesFixedWidth: every time the CLI prints has milliseconds, trailing zeros kept,
// so rows line up: 19:00:40.890Z, not 19:00:40.89Z.
func TestTimesFixedWidth(t *testing.T) {
	const due = 1796151640890 // 2026-12-01T19:00:40.890Z
	api := newFakeAPI(t, map[string]string{
		"POST /v1/messages": fmt.Sprintf(`{"id":"a","due":%d}`, due),
		"GET /v1/stats":     fmt.Sprintf(`{"parked":1,"per_shard":[1],"next_due":%d,"now":%d}`, due, due-1000),
		"GET /v1/audit": fmt.Sprintf(`{"entries":[{"op_id":"o","at":%d,"op":"reschedule","id":"a","deliver_at":%d,"dry_run":false,`+
			`"matched":1,"changed":1,"state":"done"}],"next_cursor":null}`, due-10, due+100),
	})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "--api", api.URL, "--target", "t", "--delay", "1s", "x"}, "due 2026-12-01T19:00:40.890Z "},
		{[]string{"stats", "--api", api.URL}, "2026-12-01T19:00:40.890Z (in 1s)"},
		{[]string{"audit", "--api", api.URL}, "2026-12-01 19:00:40.880  reschedule  id=a deliver_at=2026-12-01T19:00:40.990Z"},
	} {
		code, out, errOut := runCmd(t, c.args...)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("%q: exit %d, want %q in:\n%s%s", c.args[0], code, c.want, out, errOut)
		}
	}
	for _, ms := range []int64{due, due - 890, due - 800, due + 1} {
		if got := timeOut(t, ms); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(got) {
			t.Errorf("%d printed as %q", ms, got)
		}
	}
}

// timeOut is a unix ms time as `bridge send` prints it.
func timeOut(t testing.TB, ms int64) string {
	t.Helper()
	var out strings.Builder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"a","due":%d}`, ms)
	}))
	defer srv.Close()
	run(t.Context(), []string{"send", "--api", srv.URL, "--target", "t", "x"}, nil, strings.NewReader(""), &out, io.Discard)
	m := regexp.MustCompile(`due (\S+) `).FindStringSubmatch(out.String())
	if m == nil {
		return out.String()
	}
	return m[1]
}

// TestDevListensOnLoopback: the dev bridge's operations endpoint listens where its banner
// says, on loopback unless BRIDGE_HTTP_ADDR says otherwise; a listener on every interface
// is shown as such.
func TestDevListensOnLoopback(t *testing.T) {
	cfg, err := devConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(cfg.HTTPAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Fatalf("dev listens on %q by default, not on loopback", cfg.HTTPAddr)
	}
	if cfg, err := devConfig([]string{"BRIDGE_HTTP_ADDR=:9"}); err != nil || cfg.HTTPAddr != ":9" {
		t.Fatalf("BRIDGE_HTTP_ADDR=:9: dev listens on %q (%v)", cfg.HTTPAddr, err)
	}
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "",
		"0.0.0.0:8080":   "   (listening on every interface, port 8080)",
		"[::]:9":         "   (listening on every interface, port 9)",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := allInterfaces(a); got != want {
			t.Errorf("allInterfaces(%s) = %q, want %q", addr, got, want)
		}
	}
}
