//go:build fault

package fault

import (
	"os"
	"strconv"
	"testing"
)

func getenv(k string) string { return os.Getenv(k) }

func itoa(i int) string { return strconv.Itoa(i) }

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("FAULT_SEED %q: %v", s, err)
	}
	return v
}
