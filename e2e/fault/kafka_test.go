//go:build fault

package fault

import (
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// C9: 50 records with a bad x-delay at the head of partition 0, then 1000 good records.
// The bad ones go to the delay.dlq topic (invalid_delay) and are committed past; the
// partition never stalls: lost 0, early 0, and the group's committed offsets cover all
// 1050 records.
func TestC9PoisonRecordAtPartitionHead(t *testing.T) {
	k := newKafkaStack(t)
	c := newKafkaChecker(t, k)
	bad := c.send("c9-bad", 50, 0, func(int) time.Duration { return 0 }, func(int) string { return "abc" })
	good := c.send("c9", 1000, -1, uniform(time.Second), nil)
	b := e2etest.StartReady(t, bridgeBin, k.envWith())
	r := c.await(good, 30*time.Second)
	requireKafkaSafe(t, r)
	got, reasons := c.awaitDead(bad, 10*time.Second)
	var sum int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		sum = 0
		for _, off := range k.committed(t, "delay.in") {
			sum += off
		}
		if sum >= 1050 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("C9: %d/%d poison records dead-lettered %v; good %s; committed offsets sum %d", got, len(bad), reasons, r, sum)
	if got != len(bad) || reasons["invalid_delay"] != len(bad) {
		t.Fatalf("poison records not dead-lettered as invalid_delay: %d/%d %v", got, len(bad), reasons)
	}
	if sum != 1050 {
		t.Fatalf("committed offsets sum to %d, want 1050", sum)
	}
	waitEmpty(t, b)
}
