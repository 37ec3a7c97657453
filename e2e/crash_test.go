package e2e

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestReplicaKilledLosesNothing: two replicas share one Redis and one durable JetStream
// consumer; one is killed with SIGKILL while messages flow in and out. Its unacked source
// messages are redelivered (AckWait): kept under the same derived id while still parked,
// absorbed by their tombstone once delivered; its claimed messages come back after the
// lease, and the survivor delivers everything: lost = 0, early = 0, and the OUT stream holds
// exactly one copy of each message (repeated publishes of one entry carry the same
// Nats-Msg-Id and are dropped by JetStream; nothing is parked twice).
func TestReplicaKilledLosesNothing(t *testing.T) {
	s := newStack(t)
	s.createStream(t, "IN", s.name("delay.in"), s.name("delay.cancel"))
	s.createStream(t, "OUT", "out.>")
	s.env["BRIDGE_NATS_STREAM"] = s.streamName("IN")
	s.env["BRIDGE_NATS_ACK_WAIT"] = "2s"
	s.env["BRIDGE_LEASE"] = "1s"
	s.env["BRIDGE_LOG_LEVEL"] = "info"
	envB := map[string]string{}
	for k, v := range s.env {
		envB[k] = v
	}
	a := startBridge(t, s.env)
	startBridge(t, envB)
	out := subscribe(t, s.nc, "out.crash")

	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	// Half the messages are due at one instant T; replica A is killed just after T, in
	// the middle of releasing them, while the other half is still arriving.
	const n = 4000
	due := time.Now().Add(1500 * time.Millisecond)
	publish := func(i int) {
		m := nats.NewMsg(s.name("delay.in"))
		if i%2 == 0 {
			m.Header.Set("x-deliver-at", strconv.FormatInt(due.UnixMilli(), 10))
		} else {
			m.Header.Set("x-delay", strconv.Itoa(rand.IntN(1500)))
		}
		m.Header.Set("x-target", "out.crash")
		m.Header.Set("seq", strconv.Itoa(i))
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	for i := range n / 2 {
		publish(i)
	}
	time.Sleep(time.Until(due.Add(5 * time.Millisecond)))
	if err := a.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := n / 2; i < n; i++ {
		publish(i)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publish acks did not arrive")
	}

	seen := map[string]bool{}
	copies := 0
	check := func(ar arrival) {
		due, err := strconv.ParseInt(ar.msg.Header.Get("x-delay-due"), 10, 64)
		if err != nil {
			t.Fatalf("x-delay-due: %v", err)
		}
		if ar.at.UnixMilli() < due {
			t.Fatalf("seq %s arrived %dms early", ar.msg.Header.Get("seq"), due-ar.at.UnixMilli())
		}
		seen[ar.msg.Header.Get("seq")] = true
		copies++
	}
	for len(seen) < n {
		check(receive(t, out, 30*time.Second))
	}
	// Late copies (a claim of the dead replica re-published after its lease) still count.
	for settle := time.After(1500 * time.Millisecond); ; {
		select {
		case ar := <-out:
			check(ar)
			continue
		case <-settle:
		}
		break
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	str, err := js.Stream(ctx, s.streamName("OUT"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A message parked by A but not yet acked to JetStream when A died is redelivered
	// after AckWait; if it was delivered meanwhile, its tombstone absorbs it (without
	// tombstones it was parked and delivered again with a new Nats-Msg-Id).
	t.Logf("%d messages, 1 replica killed: lost 0, early 0, %d publishes seen by a core subscriber; OUT stream holds %d (%d extra copies)",
		n, copies, info.State.Msgs, int(info.State.Msgs)-n)
	if info.State.Msgs != n {
		t.Fatalf("OUT stream holds %d messages, want exactly %d", info.State.Msgs, n)
	}
}

// TestRedisKilledAndRestarted: Redis (appendfsync always) is killed with SIGKILL while
// messages are parked and more arrive. Messages parked before the kill survive; messages
// published during the outage are not acked (JetStream keeps them) and are delivered once
// Redis is back. lost = 0, early = 0.
func TestRedisKilledAndRestarted(t *testing.T) {
	s := newLocalStack(t) // kills and restarts its redis-server: always a local one
	s.createStream(t, "IN", s.name("delay.in"), s.name("delay.cancel"))
	s.env["BRIDGE_NATS_STREAM"] = s.streamName("IN")
	s.env["BRIDGE_LOG_LEVEL"] = "info"
	startBridge(t, s.env)
	out := subscribe(t, s.nc, "out.redis")
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	publish := func(seq int, delay string) {
		m := nats.NewMsg(s.name("delay.in"))
		m.Header.Set("x-delay", delay)
		m.Header.Set("x-target", "out.redis")
		m.Header.Set("seq", strconv.Itoa(seq))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish %d: %v", seq, err)
		}
	}
	const before, during = 100, 100
	for i := range before {
		publish(i, "2s")
	}
	cons, err := js.Consumer(ctx, s.streamName("IN"), s.consumer())
	if err != nil {
		t.Fatal(err)
	}
	waitAcked := func(n uint64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			info, err := cons.Info(ctx)
			if err == nil && info.AckFloor.Stream >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("ingress acked up to %d, want %d", info.AckFloor.Stream, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitAcked(before) // all of them are in Redis now

	s.redis.Kill()
	for i := before; i < before+during; i++ {
		publish(i, "100ms")
	}
	time.Sleep(500 * time.Millisecond)
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream > before {
		t.Fatalf("messages acked while Redis was down: ack floor %d > %d", info.AckFloor.Stream, before)
	}
	s.redis.Restart(t)

	seen := map[string]bool{}
	for len(seen) < before+during {
		ar := receive(t, out, 30*time.Second)
		due, _ := strconv.ParseInt(ar.msg.Header.Get("x-delay-due"), 10, 64)
		if ar.at.UnixMilli() < due {
			t.Fatalf("seq %s arrived %dms early", ar.msg.Header.Get("seq"), due-ar.at.UnixMilli())
		}
		seen[ar.msg.Header.Get("seq")] = true
	}
}
