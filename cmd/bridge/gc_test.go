package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// `bridge run` sets GOGC to defaultGOGC when the environment does not set it, and then a
// soft memory limit of memLimitShare of the cgroup's memory.max unless GOMEMLIMIT is set;
// with GOGC set it changes nothing.
func TestGCDefault(t *testing.T) {
	origGC, origLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(origGC); debug.SetMemoryLimit(origLimit) })
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	limited, unlimited := write("limited", "1073741824\n"), write("unlimited", "max\n")
	reset := func() { debug.SetGCPercent(100); debug.SetMemoryLimit(math.MaxInt64) }
	for _, tc := range []struct {
		name      string
		environ   []string
		memMax    string
		gogc      int
		limit     int64
		wantLimit int64 // the runtime's limit afterwards
	}{
		{"defaults with a cgroup limit", []string{"PATH=/bin"}, limited, defaultGOGC, 805306368, 805306368},
		{"defaults, cgroup without limit", nil, unlimited, defaultGOGC, defaultMemLimit, defaultMemLimit},
		{"defaults, no cgroup file", nil, filepath.Join(dir, "absent"), defaultGOGC, defaultMemLimit, defaultMemLimit},
		{"GOMEMLIMIT set", []string{"GOMEMLIMIT=100MiB"}, limited, defaultGOGC, 0, math.MaxInt64},
		{"GOGC set", []string{"GOGC=50"}, limited, 100, 0, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reset()
			gogc, limit, set := setGCDefault(tc.environ, tc.memMax)
			if set != (tc.gogc == defaultGOGC) || limit != tc.limit {
				t.Fatalf("setGCDefault = %d, %d, %v", gogc, limit, set)
			}
			if got := debug.SetGCPercent(100); got != tc.gogc {
				t.Fatalf("GC percent = %d, want %d", got, tc.gogc)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.wantLimit {
				t.Fatalf("memory limit = %d, want %d", got, tc.wantLimit)
			}
		})
	}
}
