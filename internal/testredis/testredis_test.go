package testredis

import (
	"regexp"
	"testing"
)

func TestStartKillRestart(t *testing.T) {
	s := Start(t, "--maxmemory", "64mb")
	if err := ping(s.Addr()); err != nil {
		t.Fatal(err)
	}
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Fatalf("URL %q, want %q", s.URL(), want)
	}
	s.Kill()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("server answers after Kill")
	}
	s.Kill() // idempotent
	s.Restart(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	s.Restart(t) // restarting a running server kills it first
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("after second restart: %v", err)
	}
}

func TestURL(t *testing.T) {
	t.Setenv(EnvURL, "redis://example:1/0")
	if got := URL(t); got != "redis://example:1/0" {
		t.Fatalf("URL = %q", got)
	}
}

func TestPrefix(t *testing.T) {
	a, b := Prefix(t), Prefix(t)
	if !regexp.MustCompile(`^t[0-9a-f]{10}$`).MatchString(a) || a == b {
		t.Fatalf("prefixes %q, %q", a, b)
	}
}
