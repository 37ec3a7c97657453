package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	// A subscriber may see a message before the bridge counts its confirmation: poll.
	expectSoon(t, b, "delaybridge_messages_out_total", n/2, "result", "expired")
	expectSoon(t, b, "delaybridge_messages_out_total", n/2, "result", "published")
}

// expectSoon is expect on b's /metrics, scraped until the value is reached (10 s at most).
func expectSoon(t *testing.T, b *bridge, name string, want float64, labels ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mfs := scrape(t, b)
		if got, n := metric(mfs, name, labels...); n > 0 && got == want || time.Now().After(deadline) {
			expect(t, mfs, name, want, labels...)
			return
		}
	}
}

// TestRecurringAcrossAKill (issue 16): a message with x-delay-every: 1s and
// x-delay-misfire: all (the takeover outlasts an interval: with the default, once, the
// occurrences it misses fire as one), three replicas, the one that fires it killed with
// SIGKILL in the middle, cancelled after 30 s: 30 firings (+-1), one per occurrence
// (x-delay-due = the first + k s, none missing), none early, and the target stream
// (duplicate window 2 min) holds each once.
func TestRecurringAcrossAKill(t *testing.T) {
	s := newStack(t)
	target := s.name("tick.e2e")
	out := s.createStream(t, "TICK", s.name("tick.>"))
	s.env["BRIDGE_LEASE"] = "1s"
	s.env["BRIDGE_OWNERSHIP_TTL"] = "1s"
	var bridges []*bridge
	for range 3 {
		env := map[string]string{}
		for k, v := range s.env {
			env[k] = v
		}
		bridges = append(bridges, startBridge(t, env))
	}
	arrivals := subscribe(t, s.nc, target)
	hdr := nats.Header{}
	hdr.Set("x-delay-every", "1s")
	hdr.Set("x-delay-misfire", "all")
	hdr.Set("x-target", target)
	hdr.Set("x-delay-id", "tick-e2e")
	sent := time.Now()
	reply := request(t, s.nc, s.name("delay.in"), hdr, "tick")
	first, ok := reply["due"].(float64)
	if !ok {
		t.Fatalf("reply %v", reply)
	}
	time.Sleep(time.Until(sent.Add(12 * time.Second)))
	owner := firingReplica(t, bridges, "tick-e2e")
	if err := owner.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the replica that fired it, %s after the first firing", time.Since(time.UnixMilli(int64(first))).Round(time.Millisecond))
	time.Sleep(time.Until(time.UnixMilli(int64(first)).Add(29500 * time.Millisecond)))
	cancelHdr := nats.Header{}
	cancelHdr.Set("x-delay-id", "tick-e2e")
	if r := request(t, s.nc, s.name("delay.cancel"), cancelHdr, ""); r["cancelled"] != true {
		t.Fatalf("cancel reply %v", r)
	}
	dues := map[int64]int{}
	var late time.Duration
	for settle := time.After(3 * time.Second); ; {
		select {
		case a := <-arrivals:
			due, err := strconv.ParseInt(a.msg.Header.Get("x-delay-due"), 10, 64)
			if err != nil {
				t.Fatalf("x-delay-due: %v", err)
			}
			if a.at.UnixMilli() < due {
				t.Fatalf("firing due %d arrived %d ms early", due, due-a.at.UnixMilli())
			}
			if (due-int64(first))%1000 != 0 {
				t.Fatalf("firing due %d is not the first (%d) + k s", due, int64(first))
			}
			dues[due]++
			late = max(late, a.at.Sub(time.UnixMilli(due)))
			continue
		case <-settle:
		}
		break
	}
	for k := range int64(len(dues)) {
		if dues[int64(first)+1000*k] == 0 {
			t.Fatalf("firing %d (due %d) lost; fired: %v", k, int64(first)+1000*k, dues)
		}
	}
	if n := len(dues); n < 29 || n > 31 {
		t.Fatalf("%d firings in 30 s, want 30 +- 1", n)
	}
	held := streamMsgs(t, s, out)
	t.Logf("%d firings, %d publishes seen by a core subscriber, target stream holds %d; latest firing %s late (the takeover)",
		len(dues), sumValues(dues), held, late.Round(time.Millisecond))
	if held != uint64(len(dues)) {
		t.Fatalf("target stream holds %d messages for %d firings", held, len(dues))
	}
}

// firingReplica is the replica whose log shows the most publishes of id.
func firingReplica(t *testing.T, bridges []*bridge, id string) *bridge {
	t.Helper()
	var best *bridge
	most := 0
	for _, b := range bridges {
		if n := strings.Count(b.Out.String(), `"msg":"published","component":"egress","id":"`+id+`"`); n > most {
			best, most = b, n
		}
	}
	if best == nil {
		t.Fatalf("no replica logged a publish of %s", id)
	}
	return best
}

func sumValues(m map[int64]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// streamMsgs is the message count of stream name.
func streamMsgs(t *testing.T, s *stack, name string) uint64 {
	t.Helper()
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestTargetRate (issue 16): 5,000 messages due at once to a target limited to 500/s and
// 5,000 to an unlimited one, with 1 and with 4 replicas: every message arrives once, none
// early; the limited target is never faster than its rate (its last message comes no
// sooner than 4,999/500 s after the due time, whatever the replicas); the unlimited one
// is through long before. The measured release rates are logged; `make bench` reports
// them for 10,000 messages.
func TestTargetRate(t *testing.T) {
	for _, replicas := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) { rateRun(t, replicas) })
	}
}

func rateRun(t *testing.T, replicas int) {
	const n, rate = 5000, 500
	s := newStack(t)
	s.createStream(t, "IN", s.name("delay.in"), s.name("delay.cancel"))
	s.env["BRIDGE_NATS_STREAM"] = s.streamName("IN")
	s.env["BRIDGE_LOG_LEVEL"] = "info"
	limitedTarget, freeTarget := s.name("limited.out"), s.name("free.out")
	s.env["BRIDGE_TARGET_RATE"] = s.name("limited") + ".*=" + strconv.Itoa(rate) + "/s"
	for range replicas {
		env := map[string]string{}
		for k, v := range s.env {
			env[k] = v
		}
		startBridge(t, env)
	}
	limited, free := subscribe(t, s.nc, limitedTarget), subscribe(t, s.nc, freeTarget)
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(6 * time.Second)
	for i := range n {
		for _, target := range []string{limitedTarget, freeTarget} {
			m := nats.NewMsg(s.name("delay.in"))
			m.Header.Set("x-deliver-at", strconv.FormatInt(due.UnixMilli(), 10))
			m.Header.Set("x-target", target)
			m.Header.Set("seq", strconv.Itoa(i))
			if _, err := js.PublishMsgAsync(m); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		if i%500 == 499 { // stay well under the client's limit of outstanding publishes
			waitPublished(t, js)
		}
	}
	waitPublished(t, js)
	if time.Now().After(due) {
		t.Logf("publishing took past the due time: the rate is measured from the first arrival")
	}
	freeFirst, freeLast := drain(t, free, n, due)
	first, last := drain(t, limited, n, due)
	if min := time.Duration(n-1) * time.Second / rate; last.Sub(due) < min-rateTolerance {
		t.Fatalf("limited target: %d messages %s after their due time, faster than %d/s (at least %s)", n, last.Sub(due), rate, min)
	}
	if !freeLast.Before(last) {
		t.Fatalf("unlimited target through %s after due, the limited one %s", freeLast.Sub(due), last.Sub(due))
	}
	t.Logf("%d replicas: limited target released at %.1f/s (limit %d/s: %.1f%%), unlimited at %.0f/s",
		replicas, float64(n-1)/last.Sub(first).Seconds(), rate, 100*float64(n-1)/last.Sub(first).Seconds()/rate,
		float64(n-1)/freeLast.Sub(freeFirst).Seconds())
}

// rateTolerance is egress's: a message goes out up to 10 ms before its slot.
const rateTolerance = 10 * time.Millisecond

// drain receives n distinct messages (header seq) from ch, none before due, and returns
// the first and last arrival times.
func drain(t *testing.T, ch chan arrival, n int, due time.Time) (first, last time.Time) {
	t.Helper()
	seen := map[string]bool{}
	for len(seen) < n {
		a := receive(t, ch, 30*time.Second)
		if a.at.Before(due) {
			t.Fatalf("seq %s arrived %s early", a.msg.Header.Get("seq"), due.Sub(a.at))
		}
		if first.IsZero() {
			first = a.at
		}
		seen[a.msg.Header.Get("seq")] = true
		last = a.at
	}
	return first, last
}

// waitPublished waits for the acknowledgements of js's outstanding async publishes.
func waitPublished(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publish acks did not arrive")
	}
}
