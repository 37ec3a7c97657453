package bridge

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/config"
	"github.com/delaybridge/delaybridge/internal/testnats"
)

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// closedAddr is a 127.0.0.1 address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRedisLogThroughHostLogger: two bridges in one process, each given its own logger by
// the host, with Redis unreachable: go-redis's messages about each bridge's Redis
// ("connection pool: failed to dial ... <address>") reach that bridge's logger, tagged
// component=go-redis, and not the other's (issue 23, item 12).
func TestRedisLogThroughHostLogger(t *testing.T) {
	n := testnats.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	addrs := []string{closedAddr(t), closedAddr(t)}
	logs := []*lockedBuffer{{}, {}}
	for i, addr := range addrs {
		cfg, err := config.Load(map[string]string{"BRIDGE_REDIS_URL": "redis://" + addr, "BRIDGE_NATS_URL": n.URL(),
			"BRIDGE_HTTP_ADDR": "127.0.0.1:0", "BRIDGE_API_ADDR": ""})
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(cfg, WithLogger(slog.New(slog.NewTextHandler(logs[i], nil))))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = b.Run(ctx) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for i, addr := range addrs {
		for !strings.Contains(logs[i].String(), "component=go-redis") || !strings.Contains(logs[i].String(), addr) {
			if time.Now().After(deadline) {
				t.Fatalf("bridge %d (Redis %s): no go-redis message in its logger:\n%s", i, addr, logs[i].String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range addrs {
		for _, line := range strings.Split(logs[i].String(), "\n") {
			if strings.Contains(line, "component=go-redis") && strings.Contains(line, addrs[1-i]) {
				t.Fatalf("bridge %d's logger got the other bridge's go-redis message: %s", i, line)
			}
		}
	}
}
