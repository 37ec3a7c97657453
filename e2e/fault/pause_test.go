//go:build fault

package fault

import (
	"encoding/json"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// E2: a replica is paused (SIGSTOP) for twice the lease while it holds claimed batches,
// then resumed (SIGCONT). Its fleet membership (BRIDGE_OWNERSHIP_TTL 1 s, shorter than the
// pause) expires meanwhile, so the other replica takes its shards, re-claims the expired
// leases and publishes;
// the paused one wakes up and publishes its stale batches too. Those copies carry the
// same Nats-Msg-Id, so the OUT stream drops them (extra copies 0), and their acks are
// fenced by the lease token: they do not delete the newer claims' entries, and the store
// ends empty.
func TestE2ReplicaPausedLongerThanLease(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	const lease = time.Second
	// Runs of 64 positions: the 6000 messages spread over every shard, so that both
	// replicas hold claimed batches (with the default runs of 4096 they fall in two shards,
	// both B's in about one run of four, and A would hold nothing).
	env := func() map[string]string {
		return s.envWith("BRIDGE_LEASE", lease.String(), "BRIDGE_OWNERSHIP_TTL", "1s", "BRIDGE_SHARD_RUN", "64")
	}
	a := e2etest.StartReady(t, bridgeBin, env())
	b := e2etest.StartReady(t, bridgeBin, env())

	// 6000 messages due within one second, 1.5 s after they are sent: both replicas are
	// busy claiming and publishing when A is stopped in the middle of that second.
	start := time.Now()
	seqs := c.send("e2", 6000, func(i int) time.Duration {
		return 1500*time.Millisecond + time.Duration(i%1000)*time.Millisecond
	})
	time.Sleep(time.Until(start.Add(2 * time.Second)))
	signal(t, a, syscall.SIGSTOP)
	time.Sleep(2 * lease)
	signal(t, a, syscall.SIGCONT)

	r := c.await(seqs, 30*time.Second)
	requireSafe(t, r)
	fenced := fencedAcks(a.Out.String())
	t.Logf("stale publishes (duplicates on the wire) %d, OUT stream extra copies %d, A's acks fenced %d",
		r.dups, r.streamExtra, fenced)
	if fenced == 0 {
		t.Fatal("A held no claimed batch when it was stopped: this run proved nothing")
	}
	if r.streamExtra != 0 {
		t.Fatalf("stale publishes were not deduplicated by JetStream: %s", r)
	}
	// Duplicates on the wire are not only A's stale batches: under load B's own publishes
	// can outlive 4/5 of its lease and be retried, or B's lease can expire too. So the
	// count of duplicates is reported, not matched against the fenced acks; the stale ack
	// check itself is covered by delaystore's TestLeaseExpiry.
	if n := parkedCount(t, b); n != 0 {
		t.Fatalf("%d entries left in the store after every message was delivered", n)
	}
}

func signal(t *testing.T, b *e2etest.Bridge, sig syscall.Signal) {
	t.Helper()
	if err := b.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v", sig, err)
	}
}

// A stale claim ends in a fenced ack (A published before the pause) or, since issue 12
// settles each target group on its own, as often in a fenced retry (A's messages' contexts
// ended during the pause, so their publish failed afterwards).
var fencedRe = regexp.MustCompile(`msg="(?:acks|retries) fenced[^"]*".* stale=(\d+)`)

// fencedAcks sums the acks the store fenced, from the bridge's log.
func fencedAcks(out string) int {
	n := 0
	for _, m := range fencedRe.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// parkedCount returns the parked total from the message API.
func parkedCount(t *testing.T, b *e2etest.Bridge) int64 {
	t.Helper()
	var st struct{ Parked int64 }
	if err := json.Unmarshal([]byte(parked(t, b)), &st); err != nil {
		t.Fatal(err)
	}
	return st.Parked
}
