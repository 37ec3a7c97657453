package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Bounded debounce (x-delay-max-wait, docs/contract.md section 11): a message replaced
// every 100 ms with x-delay 2s and x-delay-max-wait 3s is delivered about every 3 s while
// the updates go on, each time the latest version, and once more about 2 s after the last
// update; never early, never two versions at once. Windows are loose (a shared, slow
// machine); what is exact is that no version arrives before its x-delay-due and that a
// version is due no later than the bound of its stretch.
const (
	debounceDelay   = 2 * time.Second
	debounceMaxWait = 3 * time.Second
	debounceEvery   = 100 * time.Millisecond
	// debounceSlack is how much later than its bound a stretch may be delivered: the
	// park's latency after the send, the claim and the publish, on a loaded machine.
	debounceSlack = 1500 * time.Millisecond
	// debounceAhead is how long before its due time a version may be claimed, so that a
	// replacement sent after the claim is its own firing (claim ahead, a round trip).
	debounceAhead = 300 * time.Millisecond
)

// debounced is one delivered version: its number, x-delay-due and arrival.
type debounced struct {
	version int
	due     time.Time
	at      time.Time
}

// TestDebounceNATS: core NATS requests to the ingress subject, every 100 ms for 10 s, to a
// core NATS target.
func TestDebounceNATS(t *testing.T) {
	s := newStack(t)
	s.env["BRIDGE_LOG_LEVEL"] = "info"
	startBridge(t, s.env)
	target := s.name("digest.out")
	out := subscribe(t, s.nc, target)

	var sent []time.Time // sent[i]: when version i was sent
	tick := time.NewTicker(debounceEvery)
	defer tick.Stop()
	for start := time.Now(); time.Since(start) < 10*time.Second; <-tick.C {
		hdr := nats.Header{}
		hdr.Set("x-delay-id", "digest-1")
		hdr.Set("x-delay", debounceDelay.String())
		hdr.Set("x-delay-max-wait", debounceMaxWait.String())
		hdr.Set("x-target", target)
		sent = append(sent, time.Now())
		reply := request(t, s.nc, s.name("delay.in"), hdr, strconv.Itoa(len(sent)-1))
		if reply["error"] != nil {
			t.Fatalf("version %d refused: %v", len(sent)-1, reply)
		}
	}
	got := collectDebounced(t, len(sent), func(within time.Duration) (debounced, bool) {
		select {
		case a := <-out:
			v, _ := strconv.Atoi(string(a.msg.Data))
			due, _ := strconv.ParseInt(a.msg.Header.Get("x-delay-due"), 10, 64)
			return debounced{version: v, due: time.UnixMilli(due), at: a.at}, true
		case <-time.After(within):
			return debounced{}, false
		}
	})
	checkDebounced(t, sent, got, 3)
}

// collectDebounced receives deliveries (next) until the last of n versions arrived, then
// for a max wait more, to see that nothing follows it.
func collectDebounced(t *testing.T, n int, next func(time.Duration) (debounced, bool)) []debounced {
	t.Helper()
	var got []debounced
	for len(got) == 0 || got[len(got)-1].version != n-1 {
		d, ok := next(debounceDelay + debounceMaxWait + 2*debounceSlack)
		if !ok {
			t.Fatalf("the last version (%d) did not arrive; got %+v", n-1, got)
		}
		got = append(got, d)
	}
	if d, ok := next(debounceMaxWait); ok {
		t.Fatalf("delivered after the last version: %+v (before: %+v)", d, got)
	}
	return got
}

// checkDebounced checks the deliveries got of the versions sent (sent[i]: when version i
// was sent): at least minBounded of them while the updates went on; each no earlier than
// its x-delay-due; versions in order, none twice; each the latest version at its due time;
// the first about a max wait after the first send, each next about a max wait after the
// one before (never two versions pending at once); the last one the last version, about
// x-delay after it was sent.
func checkDebounced(t *testing.T, sent []time.Time, got []debounced, minBounded int) {
	t.Helper()
	var lines []string
	for _, d := range got {
		lines = append(lines, "version "+strconv.Itoa(d.version)+" due +"+d.due.Sub(sent[0]).Round(time.Millisecond).String()+
			" arrived +"+d.at.Sub(sent[0]).Round(time.Millisecond).String())
	}
	t.Logf("%d versions over %s; delivered:\n%s", len(sent), sent[len(sent)-1].Sub(sent[0]).Round(time.Millisecond), strings.Join(lines, "\n"))
	last := len(sent) - 1
	if len(got) < minBounded+1 {
		t.Fatalf("%d deliveries, want at least %d while the updates went on and one after", len(got), minBounded)
	}
	for k, d := range got {
		if d.at.Before(d.due) {
			t.Errorf("version %d arrived %s before its x-delay-due", d.version, d.due.Sub(d.at))
		}
		if k > 0 && d.version <= got[k-1].version {
			t.Errorf("version %d delivered after version %d", d.version, got[k-1].version)
		}
		if d.version < last && sent[d.version+1].Before(d.due.Add(-debounceAhead)) {
			t.Errorf("version %d delivered at %s, but version %d was sent %s before that",
				d.version, d.due.Sub(sent[0]), d.version+1, d.due.Sub(sent[d.version+1]))
		}
		from := sent[0] // the stretch's first send: the first, or after the delivery before
		if k > 0 {
			from = got[k-1].due.Add(-debounceAhead)
		}
		if k < len(got)-1 || d.version < last {
			if gap := d.due.Sub(from); gap < debounceMaxWait-debounceAhead || gap > debounceMaxWait+debounceSlack {
				t.Errorf("delivery %d (version %d) due %s after its stretch began, want about %s", k, d.version, gap, debounceMaxWait)
			}
		}
	}
	final := got[len(got)-1]
	if final.version != last {
		t.Fatalf("the last delivery is version %d, want the last version %d", final.version, last)
	}
	if after := final.due.Sub(sent[last]); after > debounceDelay+debounceSlack {
		t.Errorf("the last version was due %s after it was sent, want at most about %s", after, debounceDelay)
	}
}

// TestDebounceKafka: records on the Kafka ingress topic (one key, so one partition and
// one order), every 100 ms for 7 s, to a Kafka target: two bounded deliveries, then the
// last version.
func TestDebounceKafka(t *testing.T) {
	s, cl := kafkaStack(t, false)
	s.env["BRIDGE_LOG_LEVEL"] = "info"
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	target := s.name("digest.out")
	s.createTopic(t, brokers, target, 1)
	startBridge(t, s.env)
	out := consume(t, brokers, target)

	var sent []time.Time
	tick := time.NewTicker(debounceEvery)
	defer tick.Stop()
	for start := time.Now(); time.Since(start) < 7*time.Second; <-tick.C {
		sent = append(sent, time.Now())
		produce(t, cl, s.name("delay.in"), []byte("digest-1"), strconv.Itoa(len(sent)-1), "x-delay-id", "digest-1",
			"x-delay", debounceDelay.String(), "X-Delay-Max-Wait", "PT3S", "x-target", "kafka:"+target)
	}
	got := collectDebounced(t, len(sent), func(within time.Duration) (debounced, bool) {
		select {
		case r := <-out:
			v, _ := strconv.Atoi(string(r.rec.Value))
			due, _ := strconv.ParseInt(mustHeader(t, r.rec, "x-delay-due"), 10, 64)
			if _, n := header(r.rec, "X-Delay-Max-Wait"); n != 0 {
				t.Errorf("x-delay-max-wait forwarded")
			}
			return debounced{version: v, due: time.UnixMilli(due), at: r.at}, true
		case <-time.After(within):
			return debounced{}, false
		}
	})
	checkDebounced(t, sent, got, 2)
}
