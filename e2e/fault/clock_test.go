//go:build fault

package fault

import (
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/clock"
	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// E3: three replicas whose wall clocks disagree by up to a minute (-30 s, 0, +30 s, set
// with the failpoints build's DELAYBRIDGE_TEST_CLOCK_OFFSET, which shifts every local clock
// reading the bridge schedules by). Due times are computed and checked with Redis TIME only,
// so no replica sends early, whatever its clock says; a replica running ahead only wakes
// up too soon and finds nothing due, one running behind is corrected by the Redis time of
// every script reply.
func TestE3ClockSkewBetweenReplicas(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	for _, off := range []string{"-30s", "0s", "30s"} {
		e2etest.StartReady(t, bridgeBin, s.envWith(clock.OffsetEnv, off))
	}
	seqs := c.send("e3", 3000, uniform(2*time.Second))
	r := c.await(seqs, 30*time.Second)
	requireSafe(t, r)
}
