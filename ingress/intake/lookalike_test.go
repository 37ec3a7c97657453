package intake

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// lookalikeCounts is a LookalikeCounter for one goroutine.
type lookalikeCounts map[string]int

func (c lookalikeCounts) Lookalike(header string) { c[header]++ }

// TestLookalikeWarnsOncePerMinute: x-dealy and X-Dealy (one name) are counted each time
// under header="x-delay" and warned about once a minute on the injected clock; the
// contract names themselves and other headers are neither.
func TestLookalikeWarnsOncePerMinute(t *testing.T) {
	var logs strings.Builder
	m := lookalikeCounts{}
	now := time.Unix(1_800_000_000, 0)
	l := NewLookalikes(slog.New(slog.NewTextHandler(&logs, nil)), m, func() time.Time { return now })
	h := headers.List{{Key: "x-dealy", Value: "30s"}, {Key: "x-target", Value: "a"}, {Key: "X-Delay", Value: "1s"}, {Key: "tenant", Value: "x"}}
	l.Check(h, "nats:delay.in")
	now = now.Add(59 * time.Second)
	l.Check(headers.List{{Key: "X-Dealy", Value: "30s"}}, "http")
	now = now.Add(time.Second)
	l.Check(h, "nats:delay.in")
	l.Check(headers.List{{Key: "x-taget", Value: "a"}}, "http")
	if n := m["x-delay"]; n != 3 {
		t.Errorf("x-delay look-alikes counted %v, want 3", n)
	}
	if n := m["x-target"]; n != 1 {
		t.Errorf("x-target look-alikes counted %v, want 1", n)
	}
	out := logs.String()
	if n := strings.Count(out, "header=x-dealy resembles=x-delay"); n != 2 || !strings.Contains(out, "header=x-taget resembles=x-target source=http") {
		t.Fatalf("%d warnings for x-dealy (want 2: at 0s and 60s), or none for x-taget:\n%s", n, out)
	}
}

// TestLookalikeNamesBounded: past lookalikeNames distinct names within a minute, new ones
// are counted but not logged; a minute later they are logged again.
func TestLookalikeNamesBounded(t *testing.T) {
	var logs strings.Builder
	now := time.Unix(1_800_000_000, 0)
	l := NewLookalikes(slog.New(slog.NewTextHandler(&logs, nil)), nil, func() time.Time { return now })
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789" // 36 x 36 names "x-de??y"
	for i := range lookalikeNames + 50 {
		l.Check(headers.List{{Key: "x-de" + chars[i%36:i%36+1] + chars[i/36:i/36+1] + "y"}}, "http")
	}
	if n := strings.Count(logs.String(), "\n"); len(l.warned) != lookalikeNames || n != lookalikeNames {
		t.Fatalf("%d names remembered, %d warnings; want %d", len(l.warned), n, lookalikeNames)
	}
	now = now.Add(time.Minute)
	before := strings.Count(logs.String(), "\n")
	l.Check(headers.List{{Key: "x-delya"}}, "http")
	if strings.Count(logs.String(), "\n") != before+1 {
		t.Fatal("no warning once the remembered names were a minute old")
	}
}
