//go:build fault

package fault

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// arrivals is the accounting that the NATS checker and the Kafka checker (kchecker)
// share: per seq the earliest legal arrival (send time + delay) and the copies seen, the
// arrivals that came early (before their x-delay-due, or before send time + delay), and
// the lateness of every first copy. mu guards it (and what the checkers embedding it add).
type arrivals struct {
	mu       sync.Mutex
	earliest map[string]time.Time // seq -> earliest legal arrival
	copies   map[string]int
	early    []string
	lateness []time.Duration
}

func newArrivals() arrivals {
	return arrivals{earliest: map[string]time.Time{}, copies: map[string]int{}}
}

// tolerance covers the millisecond rounding of due times (Redis TIME in ms, delays in ms).
const tolerance = 2 * time.Millisecond

// expect records that seq, sent now with delay d, may not arrive before now + d.
func (c *arrivals) expect(seq string, d time.Duration) {
	c.mu.Lock()
	c.earliest[seq] = time.Now().Add(d.Truncate(time.Millisecond))
	c.mu.Unlock()
}

// arrivedLocked counts a copy of seq that arrived at now with x-delay-due dueHeader.
// c.mu is held.
func (c *arrivals) arrivedLocked(seq, dueHeader string, now time.Time) {
	due, err := strconv.ParseInt(dueHeader, 10, 64)
	c.copies[seq]++
	earliest, known := c.earliest[seq]
	switch {
	case !known || err != nil:
		c.early = append(c.early, fmt.Sprintf("seq %q: unknown or no x-delay-due (%v)", seq, err))
	case now.UnixMilli() < due:
		c.early = append(c.early, fmt.Sprintf("seq %s: %d ms before its x-delay-due", seq, due-now.UnixMilli()))
	case now.Before(earliest.Add(-tolerance)):
		c.early = append(c.early, fmt.Sprintf("seq %s: %s before send time + delay", seq, earliest.Sub(now)))
	case c.copies[seq] == 1:
		c.lateness = append(c.lateness, now.Sub(earliest))
	}
}

// waitAll waits until every seq arrived at least once, or timeout passed.
func (c *arrivals) waitAll(seqs []string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		missing := 0
		for _, s := range seqs {
			if c.copies[s] == 0 {
				missing++
			}
		}
		c.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lostDupsLocked counts the seqs that never arrived and the extra copies of the others.
// c.mu is held.
func (c *arrivals) lostDupsLocked(seqs []string) (lost, dups int) {
	for _, s := range seqs {
		switch n := c.copies[s]; {
		case n == 0:
			lost++
		case n > 1:
			dups += n - 1
		}
	}
	return lost, dups
}

// sortedLatenessLocked is the lateness of every first copy, sorted. c.mu is held.
func (c *arrivals) sortedLatenessLocked() []time.Duration {
	l := slices.Clone(c.lateness)
	slices.Sort(l)
	return l
}

// reportEarlyLocked reports the first 5 early arrivals as errors of t. c.mu is held.
func (c *arrivals) reportEarlyLocked(t *testing.T) {
	t.Helper()
	for i, e := range c.early {
		if i == 5 {
			break
		}
		t.Errorf("early: %s", e)
	}
}
