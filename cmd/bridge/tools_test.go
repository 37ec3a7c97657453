package main

import (
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseInterleaved(t *testing.T) {
	for _, c := range []struct {
		args []string
		pos  []string
		id   string
	}{
		{[]string{"--id", "a", "x"}, []string{"x"}, "a"},
		{[]string{"x", "--id", "a"}, []string{"x"}, "a"},
		{[]string{"x", "--id", "a", "y"}, []string{"x", "y"}, "a"},
		{[]string{"-", "--id", "a"}, []string{"-"}, "a"},
		{[]string{"--id", "a", "--", "--id", "b"}, []string{"--id", "b"}, "a"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		id := fs.String("id", "", "")
		pos, err := parseInterleaved(fs, c.args)
		if err != nil || !slices.Equal(pos, c.pos) || *id != c.id {
			t.Errorf("%q: positional %q, id %q, %v; want %q, %q", c.args, pos, *id, err, c.pos, c.id)
		}
	}
}

// TestAPITokenAsRunReadsIt: the CLI takes the token as `bridge run` does: the variable or
// its file, never both.
func TestAPITokenAsRunReadsIt(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := apiToken("", []string{"BRIDGE_API_TOKEN_FILE=" + file}); err != nil || tok != "from-file" {
		t.Fatalf("file: %q %v", tok, err)
	}
	if tok, err := apiToken("", []string{"BRIDGE_API_TOKEN=env"}); err != nil || tok != "env" {
		t.Fatalf("variable: %q %v", tok, err)
	}
	_, err := apiToken("", []string{"BRIDGE_API_TOKEN=env", "BRIDGE_API_TOKEN_FILE=" + file})
	if err == nil || !strings.Contains(err.Error(), "set only one of BRIDGE_API_TOKEN and BRIDGE_API_TOKEN_FILE") {
		t.Fatalf("both: %v", err)
	}
	if tok, err := apiToken("flag", []string{"BRIDGE_API_TOKEN=env", "BRIDGE_API_TOKEN_FILE=" + file}); err != nil || tok != "flag" {
		t.Fatalf("--token wins: %q %v", tok, err)
	}
}

func TestReachable(t *testing.T) {
	for addr, want := range map[string]string{"[::]:8080": "127.0.0.1:8080", "0.0.0.0:8081": "127.0.0.1:8081", "127.0.0.1:9": "127.0.0.1:9"} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := reachable(a); got != want {
			t.Errorf("reachable(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestUnknownCommand: a misspelt command names itself and lists the commands, not every
// variable (that is --help's), and exits 2.
func TestUnknownCommand(t *testing.T) {
	var out, errOut strings.Builder
	code := run(t.Context(), []string{"sned"}, nil, strings.NewReader(""), &out, &errOut)
	got := errOut.String()
	if code != 2 || out.Len() != 0 || !strings.HasPrefix(got, "bridge: unknown command sned\n") {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, out.String(), got)
	}
	if !strings.Contains(got, "bridge send ") || !strings.Contains(got, "bridge targets") || strings.Contains(got, "BRIDGE_REDIS_URL") {
		t.Fatalf("stderr lists no commands, or variables too:\n%s", got)
	}
}

// TestUnauthorizedNamesToken: a 401 from the message API tells how to give the token.
func TestUnauthorizedNamesToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="delaybridge"`)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"missing or wrong bearer token"}`))
	}))
	t.Cleanup(srv.Close)
	var out, errOut strings.Builder
	code := run(t.Context(), []string{"stats", "--api", srv.URL}, nil, strings.NewReader(""), &out, &errOut)
	if got := errOut.String(); code != 1 || !strings.Contains(got, "--token") || !strings.Contains(got, "BRIDGE_API_TOKEN") {
		t.Fatalf("exit %d, stderr %q", code, got)
	}
}
