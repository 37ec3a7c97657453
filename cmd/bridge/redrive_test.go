package main

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testnats"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// TestRedriveWritesOnlyToANamedRedis: with no Redis named (no BRIDGE_REDIS_URL, cluster or
// sentinel variable) bridge redrive never falls back to 127.0.0.1:6379: a run is refused
// before it touches anything, naming BRIDGE_REDIS_URL and --no-audit, and the letter stays;
// a dry run counts and says it is not recorded. With a Redis named, the dry run is
// recorded there.
func TestRedriveWritesOnlyToANamedRedis(t *testing.T) {
	ns := testnats.Start(t)
	nc := testnats.Connect(t, ns.URL())
	testnats.CreateStream(t, nc, "DLQ", "delay.dlq")
	if err := nc.Publish("delay.dlq", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	env := []string{"BRIDGE_NATS_URL=" + ns.URL()}

	code, out, errOut := runEnv(t, env, "redrive", "--wait", "0")
	if code != 1 || !strings.Contains(errOut, "redrive not run: no Redis named") ||
		!strings.Contains(errOut, "BRIDGE_REDIS_URL") || !strings.Contains(errOut, "--no-audit") {
		t.Fatalf("run without a Redis: exit %d\n%s%s", code, out, errOut)
	}
	if info, err := nc.JetStream(); err != nil {
		t.Fatal(err)
	} else if si, err := info.StreamInfo("DLQ"); err != nil || si.State.Msgs != 1 {
		t.Fatalf("the letter after a refused run: %+v, %v", si, err)
	}

	code, out, errOut = runEnv(t, env, "redrive", "--dry-run", "--wait", "0")
	if code != 0 || !strings.Contains(errOut, "not recorded in the audit log: no Redis named") {
		t.Fatalf("dry run without a Redis: exit %d\n%s%s", code, out, errOut)
	}

	rs := testredis.Start(t)
	code, out, errOut = runEnv(t, append(env, "BRIDGE_REDIS_URL="+rs.URL()), "redrive", "--dry-run", "--wait", "0")
	if code != 0 || strings.Contains(errOut, "not recorded") {
		t.Fatalf("dry run with a Redis named: exit %d\n%s%s", code, out, errOut)
	}
	opts, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if keys, err := rdb.Keys(t.Context(), "{delay:audit}:*").Result(); err != nil || len(keys) == 0 {
		t.Fatalf("audit keys in the named Redis: %v, %v", keys, err)
	}
}

// runEnv runs the bridge command args with environ as its environment.
func runEnv(t testing.TB, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = run(t.Context(), args, environ, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}
