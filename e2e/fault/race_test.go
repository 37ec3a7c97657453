//go:build fault

package fault

import (
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// E1: eight replicas, 5000 messages all due within a few ms of each other. Each shard is
// claimed by its owner (E10 forces every replica to claim every shard). Without faults
// every message is claimed by exactly one replica: delivered exactly once, none early.
func TestE1ReplicasRaceForDueShards(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	for range 8 {
		e2etest.StartReady(t, bridgeBin, s.envWith())
	}
	seqs := c.send("e1", 5000, func(int) time.Duration { return 1500 * time.Millisecond })
	r := c.await(seqs, 30*time.Second)
	requireSafe(t, r)
	if r.dups != 0 || r.streamExtra != 0 {
		t.Fatalf("a message was delivered more than once without any fault: %s", r)
	}
}
