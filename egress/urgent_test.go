package egress

import (
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// TestUrgentClaimLeavesHeldAcks: a claim of a shard whose head a wake-up lowered to a due
// time within the lead (a message parked at or near its due time) does not take the held
// acks along, so that its round trip is not slowed by their script run; a claim of a head
// known from an earlier claim does, once the acks were held ackHold. Acks past the hold
// and settleDelay, a lease at half or short capacity still go with any claim.
func TestUrgentClaimLeavesHeldAcks(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := &scheduler{cfg: Config{BatchSize: 256, Lease: 30 * time.Second}, clock: &redisClock{},
		now: func() time.Time { return now }, ahead: 32 * time.Millisecond, ackHold: ackHold,
		shards: map[int]*shardState{}}
	due := now.UnixMilli()
	s.shards[0] = &shardState{shard: 0, head: due + 1, offered: true}    // parked 1 ms before due
	s.shards[1] = &shardState{shard: 1, head: due + 1}                   // known from a claim
	s.shards[2] = &shardState{shard: 2, head: due + 1000, offered: true} // parked well ahead
	claim := func(sh int) []delaystore.ClaimRequest { return []delaystore.ClaimRequest{{Shard: sh, Max: 256}} }
	if !s.urgent(claim(0)) || s.urgent(claim(1)) || s.urgent(claim(2)) {
		t.Fatalf("urgent: shard 0 %v (want true), 1 %v, 2 %v (want false)", s.urgent(claim(0)), s.urgent(claim(1)), s.urgent(claim(2)))
	}
	queue := func(age time.Duration) {
		s.settleQ, s.settleT, s.settleBy = []*settlement{{shard: 1, n: 1}}, now.Add(-age), time.Time{}
	}
	queue(ackHold + time.Millisecond)
	if s.settleNow(true, true) {
		t.Fatal("held acks went with an urgent claim")
	}
	if !s.settleNow(true, false) {
		t.Fatal("held acks did not go with a claim of a known head")
	}
	queue(ackHold + settleDelay)
	if !s.settleNow(true, true) {
		t.Fatal("acks past the hold and settleDelay waited for another round trip")
	}
	queue(time.Millisecond)
	s.settleBy = time.Now().Add(-time.Second) // a lease at half (settleBy is on the process clock)
	if !s.settleNow(true, true) {
		t.Fatal("acks whose lease is at half waited")
	}
	s.settleBy = time.Time{}
	s.total = replicaCapacity * 256 / 2
	if !s.settleNow(true, true) {
		t.Fatal("acks waited while capacity was short")
	}
}
