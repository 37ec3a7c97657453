package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestExpiryAcrossAStop (issue 16): the bridge is stopped before the messages are due and
// restarted after the expiry of half of them has passed: exactly those are dead-lettered
// with reason expired (their due time and lateness in x-delay-error), the rest are
// delivered, and the metrics count them.
func TestExpiryAcrossAStop(t *testing.T) {
	s := newStack(t)
	b := startBridge(t, s.env)
	target := s.name("expiry.test")
	out := subscribe(t, s.nc, target)
	dlq := subscribe(t, s.nc, s.name("delay.dlq"))
	const n = 20
	sent := time.Now()
	for i := range n {
		hdr := nats.Header{}
		hdr.Set("x-delay", "3s")
		hdr.Set("x-target", target)
		hdr.Set("x-delay-id", "exp-"+strconv.Itoa(i))
		hdr.Set("x-delay-expires", map[bool]string{true: "1s", false: "1h"}[i%2 == 0])
		request(t, s.nc, s.name("delay.in"), hdr, fmt.Sprint(i))
	}
	if err, _ := b.Stop(t, 30*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, b.Out.String())
	}
	if time.Since(sent) > 2500*time.Millisecond {
		t.Fatalf("the bridge took %s to stop: the messages may have been due before it did", time.Since(sent))
	}
	time.Sleep(time.Until(sent.Add(4500 * time.Millisecond))) // past due + 1s for the even ones
	b = startBridge(t, s.env)
	delivered, expired := map[string]bool{}, map[string]bool{}
	for len(delivered)+len(expired) < n {
		select {
		case a := <-out:
			id := a.msg.Header.Get("x-delay-id")
			if a.msg.Header.Get("x-delay-expires") != "" {
				t.Fatalf("%s delivered with x-delay-expires", id)
			}
			delivered[id] = true
		case a := <-dlq:
			id := a.msg.Header.Get("x-delay-id")
			e := a.msg.Header.Get("x-delay-error")
			if !strings.HasPrefix(e, "expired: due ") || !strings.Contains(e, "late, expires 1s") {
				t.Fatalf("dead letter of %s: x-delay-error %q", id, e)
			}
			expired[id] = true
		case <-time.After(15 * time.Second):
			t.Fatalf("after restart: %d delivered, %d expired, want %d in all", len(delivered), len(expired), n)
		}
	}
	for i := range n {
		id := "exp-" + strconv.Itoa(i)
		if i%2 == 0 && !expired[id] || i%2 == 1 && !delivered[id] {
			t.Fatalf("%s: delivered %v, expired %v", id, delivered[id], expired[id])
		}
	}
	mfs := scrape(t, b)
	expect(t, mfs, "delaybridge_messages_out_total", n/2, "result", "expired")
	expect(t, mfs, "delaybridge_messages_out_total", n/2, "result", "published")
}
