package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/testnats"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// TestInProcess runs the example against a spawned redis-server and an embedded NATS: the
// bridge starts in the test's process, the message comes back a second later, and run
// returns nil after stopping the bridge.
func TestInProcess(t *testing.T) {
	r, n := testredis.Start(t), testnats.Start(t)
	environ := []string{"BRIDGE_REDIS_URL=" + r.URL(), "BRIDGE_NATS_URL=" + n.URL(),
		"BRIDGE_KEY_PREFIX=" + testredis.Prefix(t), "BRIDGE_HTTP_ADDR=127.0.0.1:0", "BRIDGE_API_ADDR="}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, environ, &out); err != nil {
		t.Fatalf("run: %v (output %q)", err, out.String())
	}
	if !strings.Contains(out.String(), `arrived on demo.inprocess`) || !strings.Contains(out.String(), `"hello from the same process"`) {
		t.Fatalf("output %q", out.String())
	}
	t.Log(strings.TrimSpace(out.String()))
}
