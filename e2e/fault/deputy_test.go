//go:build fault

package fault

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testnats"
)

// TestG7ConfusedDeputy: the bridge's NATS user may call the JetStream API (no
// permissions in this server), and the allow list is the broadest ("*"). Targets in the
// reserved namespaces must still be dead-lettered, never published: stream X and its
// message stay intact, and the IN consumer keeps working. A control shows that the same
// API subject, published directly, does delete a stream here.
func TestG7ConfusedDeputy(t *testing.T) {
	s := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testnats.CreateStream(t, s.nc, "X", "x.>")
	testnats.CreateStream(t, s.nc, "Y", "y.>")
	if _, err := s.js.Publish(ctx, "x.keep", []byte("keep")); err != nil {
		t.Fatal(err)
	}
	// Control: the rights are real.
	if _, err := s.nc.Request("$JS.API.STREAM.DELETE.Y", nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.Stream(ctx, "Y"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("control: stream Y not deleted by a direct API call: %v", err)
	}

	b := e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_TARGET_ALLOW", "*"))
	dead := newTally()
	natsSub(t, s.nc, "delay.dlq", dead.addNATS)
	targets := []string{
		"$JS.API.STREAM.DELETE.X", "nats:$JS.API.STREAM.DELETE.X", "$JS.API.STREAM.PURGE.X",
		"$JS.API.CONSUMER.DELETE.IN.delaybridge", "$JS.API.STREAM.UPDATE.X", "$KV.X.k", "$SYS.REQ.SERVER.PING",
		"_INBOX.abc", "_INBOX", "$JS.ACK.IN.delaybridge.1.1.1.1.0", "$JS.API.>", "$G",
	}
	names := make([]string, len(targets))
	for i, target := range targets {
		names[i] = "deputy-" + target
		m := nats.NewMsg("delay.in")
		m.Header.Set("case", names[i])
		m.Header.Set("x-target", target)
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish %s: %v", target, err)
		}
	}
	if missing := dead.waitAll(names, 15*time.Second); len(missing) > 0 {
		t.Errorf("not dead-lettered: %q", missing)
	}
	wrong := 0
	for _, n := range names {
		_, h := dead.get(n)
		if e := h["x-delay-error"]; len(e) == 0 || !strings.HasPrefix(e[0], "invalid_target:") {
			wrong++
			t.Errorf("%s: x-delay-error %q, want invalid_target", n, e)
		}
	}
	str, err := s.js.Stream(ctx, "X")
	if err != nil {
		t.Fatalf("stream X: %v", err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream X holds %d messages, want 1", info.State.Msgs)
	}
	// The consumer still works: a valid message after the hostile ones is delivered.
	c := newChecker(t, s)
	r := c.await(c.send("g7", 10, func(int) time.Duration { return 0 }), 15*time.Second)
	requireSafe(t, r)
	if p := statsParked(t, b); p != 0 {
		t.Errorf("%d messages still parked", p)
	}
	t.Logf("G7: %d reserved targets, %d dead-lettered with invalid_target, %d wrong; stream X intact with %d message; control deleted stream Y directly",
		len(targets), len(targets)-wrong, wrong, info.State.Msgs)
}
