//go:build fault

package fault

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// newStackOpts is newStack with options for the embedded nats-server.
func newStackOpts(t *testing.T, natsOpts ...func(*server.Options)) *stack {
	t.Helper()
	s := newNATSStack(t, natsOpts...)
	s.redis = testredis.Start(t)
	s.env["BRIDGE_REDIS_URL"] = s.redis.URL()
	return s
}

// withBridgeUser makes the server require users: "bridge" (password "bridge") may
// publish anywhere but to deny, and unauthenticated clients (the test's own) are the
// unrestricted user "test". It returns the bridge's URL maker.
func withBridgeUser(deny ...string) func(*server.Options) {
	return func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "bridge", Password: "bridge", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: deny},
			}},
			{Username: "test", Password: "test"},
		}
		o.NoAuthUser = "test"
	}
}

// bridgeURL is url with the bridge user's credentials.
func bridgeURL(url string) string {
	return strings.Replace(url, "nats://", "nats://bridge:bridge@", 1)
}

// sendTo publishes n messages with x-target target and x-delay delay(i) to delay.in
// through JetStream and waits for every PubAck. Each carries header seq "<prefix>-<i>".
func sendTo(t *testing.T, js jetstream.JetStream, target, prefix string, n int, delay func(int) time.Duration) []string {
	t.Helper()
	seqs := make([]string, n)
	for i := range n {
		seqs[i] = fmt.Sprintf("%s-%d", prefix, i)
		m := nats.NewMsg("delay.in")
		m.Header.Set("x-delay", strconv.FormatInt(delay(i).Milliseconds(), 10))
		m.Header.Set("x-target", target)
		m.Header.Set("seq", seqs[i])
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatalf("publish %s: %v", seqs[i], err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("PubAcks for delay.in did not arrive")
	}
	return seqs
}

// deadLetters counts the messages on a dead-letter subject by seq and by the reason
// (the x-delay-error text up to the first ':').
type deadLetters struct {
	mu       sync.Mutex
	bySeq    map[string]int
	byReason map[string]int
}

func watchDeadLetters(t *testing.T, nc *nats.Conn, subject string) *deadLetters {
	t.Helper()
	d := &deadLetters{bySeq: map[string]int{}, byReason: map[string]int{}}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		reason, _, _ := strings.Cut(m.Header.Get("x-delay-error"), ":")
		d.mu.Lock()
		d.bySeq[m.Header.Get("seq")]++
		d.byReason[reason]++
		d.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return d
}

// await waits up to timeout until want of seqs were dead-lettered, then 500 ms more for
// copies, and returns how many of seqs arrived and the counts by reason.
func (d *deadLetters) await(seqs []string, want int, timeout time.Duration) (got int, byReason map[string]int) {
	deadline := time.Now().Add(timeout)
	for {
		d.mu.Lock()
		got = 0
		for _, s := range seqs {
			if d.bySeq[s] > 0 {
				got++
			}
		}
		d.mu.Unlock()
		if got >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	d.mu.Lock()
	defer d.mu.Unlock()
	byReason = map[string]int{}
	for k, v := range d.byReason {
		byReason[k] = v
	}
	return got, byReason
}

// streamMsgs is the number of messages stream holds.
func streamMsgs(t *testing.T, js jetstream.JetStream, stream string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	str, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Msgs)
}

// createStream creates a stream from cfg with the stack's connection.
func createStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
}

// waitConnected waits until nc has reconnected (more reconnects than reconnectsBefore)
// and is connected.
func waitConnected(t *testing.T, nc *nats.Conn, reconnectsBefore uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	// Right after the server went away the client may not have noticed yet and still say
	// CONNECTED: a publish then hits the dead socket. Wait for the reconnect itself.
	for nc.Status() != nats.CONNECTED || nc.Stats().Reconnects <= reconnectsBefore {
		if time.Now().After(deadline) {
			t.Fatalf("connection not back: %s", nc.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
