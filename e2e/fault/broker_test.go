//go:build fault

package fault

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testproxy"
)

// D2: a target whose stream never confirms (it is full: MaxMsgs 1, DiscardNew) fails
// every publish but the first. (A subject no stream captures gets a flushed core publish,
// as docs/contract.md section 2 says, so "no stream" alone is not a failure for the bridge; a stream
// that answers with an error is the target that never confirms.) Those messages are retried with backoff and dead-lettered
// (publish_failed) after BRIDGE_MAX_ATTEMPTS, while another target, fed at the same
// time, keeps flowing: lost 0, early 0.
func TestD2TargetNeverConfirms(t *testing.T) {
	s := newStack(t)
	createStream(t, s.js, jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, MaxMsgs: 1, Discard: jetstream.DiscardNew})
	c := newChecker(t, s)
	dlq := watchDeadLetters(t, s.nc, "delay.dlq")
	e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_MAX_ATTEMPTS", "3", "BRIDGE_RETRY_BACKOFF", "100ms"))
	bad := sendTo(t, c.js, "full.x", "d2-bad", 200, uniform(time.Second))
	seqs := c.send("d2", 2000, uniform(time.Second))
	r := c.await(seqs, 30*time.Second)
	requireSafe(t, r)
	got, reasons := dlq.await(bad, len(bad)-1, 20*time.Second)
	stored := streamMsgs(t, s.js, "FULL")
	t.Logf("D2: healthy target %s; full target: %d of %d dead-lettered %v, %d stored", r, got, len(bad), reasons, stored)
	if stored != 1 || got != len(bad)-1 || reasons["publish_failed"] != len(bad)-1 {
		t.Fatalf("want 1 stored and %d dead-lettered publish_failed, got %d stored, %d dead-lettered %v", len(bad)-1, stored, got, reasons)
	}
}

// D4: the bridge's NATS user may not publish to forbidden.>. Core NATS reports that only
// asynchronously (Publish returns nil, the error handler fires), JetStream by never
// acknowledging. Either way the messages are dead-lettered at once with reason forbidden
// (BRIDGE_MAX_ATTEMPTS 10 with a 1 s backoff would take minutes), and allowed targets
// lose nothing.
func TestD4PublishPermissionDenied(t *testing.T) {
	s := newStackOpts(t, withBridgeUser("forbidden.>"))
	createStream(t, s.js, jetstream.StreamConfig{Name: "FORB", Subjects: []string{"forbidden.js.>"}})
	c := newChecker(t, s)
	dlq := watchDeadLetters(t, s.nc, "delay.dlq")
	e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_NATS_URL", bridgeURL(s.nats.URL())))
	core := sendTo(t, c.js, "forbidden.core", "d4-core", 600, uniform(time.Second))
	js := sendTo(t, c.js, "forbidden.js.x", "d4-js", 200, uniform(time.Second))
	seqs := c.send("d4", 1000, uniform(time.Second))
	r := c.await(seqs, 30*time.Second)
	requireSafe(t, r)
	gotCore, _ := dlq.await(core, len(core), 15*time.Second)
	gotJS, reasons := dlq.await(js, len(js), 15*time.Second)
	t.Logf("D4: allowed target %s; forbidden core %d/%d, JetStream %d/%d dead-lettered %v", r, gotCore, len(core), gotJS, len(js), reasons)
	if gotCore != len(core) || gotJS != len(js) || reasons["forbidden"] != len(core)+len(js) {
		t.Fatalf("want every forbidden message dead-lettered once with reason forbidden: core %d/%d, js %d/%d, %v",
			gotCore, len(core), gotJS, len(js), reasons)
	}
	if n := streamMsgs(t, s.js, "FORB"); n != 0 {
		t.Fatalf("stream FORB holds %d messages", n)
	}
}

// natsProxy puts an in-process toxiproxy between the bridge and the stack's NATS server
// and returns it with the env that points the bridge at it.
func natsProxy(t *testing.T, s *stack) (*testproxy.Proxy, map[string]string) {
	t.Helper()
	p := testproxy.Start(t, strings.TrimPrefix(s.nats.URL(), "nats://"))
	return p, s.envWith("BRIDGE_NATS_URL", "nats://"+p.Addr())
}

// cuts cuts p n times while messages are released, each cut lasting down, every gap.
func cuts(p *testproxy.Proxy, t *testing.T, n int, down, gap time.Duration) {
	for range n {
		time.Sleep(gap)
		p.Cut()
		time.Sleep(down)
		p.Restore(t)
	}
}

// D1: the bridge's NATS connection is cut again and again while it publishes due
// messages (and parks new ones). A publish whose PubAck is lost is retried with the same
// Nats-Msg-Id, so the OUT stream keeps one copy: lost 0, early 0, stream extra 0.
func TestD1DisconnectDuringPublish(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	p, env := natsProxy(t, s)
	e2etest.StartReady(t, bridgeBin, env)
	seqs := c.send("d1", 3000, uniform(3*time.Second))
	cuts(p, t, 4, 300*time.Millisecond, 400*time.Millisecond)
	r := c.await(seqs, 60*time.Second)
	t.Logf("D1: 4 cuts of 300 ms while releasing: %s", r)
	requireSafe(t, r)
	if r.streamExtra != 0 {
		t.Fatalf("the OUT stream kept %d extra copies: a retried publish was not deduplicated", r.streamExtra)
	}
}

// C5: the NATS server restarts (same port and store) while messages are parked and
// released. Publishes fail fast while the connection is down (no reconnect buffer) and
// are retried after the reconnect: lost 0, early 0.
func TestC5NATSServerRestart(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	b := e2etest.StartReady(t, bridgeBin, s.envWith())
	seqs := c.send("c5-0", 2000, uniform(2*time.Second))
	time.Sleep(500 * time.Millisecond) // releasing has begun
	before, beforeJS := s.nc.Stats().Reconnects, c.js.Conn().Stats().Reconnects
	s.nats.Restart(t)
	waitConnected(t, s.nc, before)
	waitConnected(t, c.js.Conn(), beforeJS)
	seqs = append(seqs, c.send("c5-1", 1000, uniform(time.Second))...)
	r := c.await(seqs, 60*time.Second)
	t.Logf("C5: NATS server restarted while releasing: %s", r)
	if r.lost > 0 { // where they are: parked per shard, and the bridge's view
		t.Logf("store after the wait: %s", parked(t, b))
		code, body := e2etest.HTTPGet("http://" + b.HTTPAddr + "/metrics")
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "delaybridge_") && !strings.HasPrefix(line, "delaybridge_redis_duration") &&
				!strings.Contains(line, "lateness_seconds_bucket") {
				t.Logf("metrics %d: %s", code, line)
			}
		}
	}
	requireSafe(t, r)
}

// C5 (proxy): the connection is cut, not the server: the same as seen from the bridge,
// while the test's own connections stay up.
func TestC5NATSDisconnectProxy(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	p, env := natsProxy(t, s)
	e2etest.StartReady(t, bridgeBin, env)
	seqs := c.send("c5p", 3000, uniform(2*time.Second))
	cuts(p, t, 1, 1500*time.Millisecond, 500*time.Millisecond)
	r := c.await(seqs, 60*time.Second)
	t.Logf("C5 (proxy): connection down 1.5 s while releasing: %s", r)
	requireSafe(t, r)
}
