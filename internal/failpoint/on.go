//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

type point struct {
	at   int64 // crash on this hit
	hits atomic.Int64
}

// points is read once from the environment; a failpoints build is a test binary.
var points = mustParse(os.Getenv(Env))

func mustParse(spec string) map[string]*point {
	ps, err := parse(spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", Env, err)
		os.Exit(2)
	}
	return ps
}

func parse(spec string) (map[string]*point, error) {
	ps := map[string]*point{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, action, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want <point>=crash@<n>", item)
		}
		switch name {
		case AfterPark, AfterClaim, AfterPublish:
		default:
			return nil, fmt.Errorf("%q: unknown point %q", item, name)
		}
		verb, n, hasN := strings.Cut(action, "@")
		if verb != "crash" {
			return nil, fmt.Errorf("%q: unknown action %q (want crash)", item, verb)
		}
		at := int64(1)
		if hasN {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("%q: bad count %q", item, n)
			}
			at = v
		}
		ps[name] = &point{at: at}
	}
	return ps, nil
}

// Inject kills the process with SIGKILL when the named point is armed and reached for
// the configured time.
func Inject(name string) {
	p := points[name]
	if p == nil || p.hits.Add(1) != p.at {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s: crash\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught; never go on
}

// ClaimAll reports whether DELAYBRIDGE_TEST_CLAIM_ALL is "1".
func ClaimAll() bool { return os.Getenv(ClaimAllEnv) == "1" }
