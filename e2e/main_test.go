// Package e2e runs the built bridge binary as a user would: configured by environment,
// driven only through NATS and HTTP, against a spawned redis-server and an embedded
// nats-server.
package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// bridgeBin is the binary built once by TestMain.
var bridgeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "delaybridge-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	// E2E_NORACE=1 builds without the race detector, for measuring lateness.
	if bridgeBin, err = e2etest.Build(dir, os.Getenv("E2E_NORACE") != "1"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build bridge:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type bridge = e2etest.Bridge

func freeAddr(t testing.TB) string { return e2etest.FreeAddr(t) }

// startProcess starts the bridge without waiting for readiness (e2etest.Start).
func startProcess(t testing.TB, env map[string]string, args ...string) *bridge {
	t.Helper()
	return e2etest.Start(t, bridgeBin, env, args...)
}

// startBridge starts the bridge and waits until /readyz answers 200.
func startBridge(t testing.TB, env map[string]string, args ...string) *bridge {
	t.Helper()
	return e2etest.StartReady(t, bridgeBin, env, args...)
}

func httpGet(url string) (int, string) { return e2etest.HTTPGet(url) }

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
