//go:build fault

package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// firing is one recurring firing seen on a core subscription: id, x-delay-due, arrival
// (unix ms).
type firing struct {
	id      string
	due, at int64
}

// firings collects every publish on subject (a core subscription: duplicates included).
type firings struct {
	mu  sync.Mutex
	all []firing
}

func watchFirings(t *testing.T, s *stack, subject string) *firings {
	t.Helper()
	f := &firings{}
	sub, err := s.nc.Subscribe(subject, func(m *nats.Msg) {
		due, _ := strconv.ParseInt(m.Header.Get("x-delay-due"), 10, 64)
		f.mu.Lock()
		f.all = append(f.all, firing{id: m.Header.Get("x-delay-id"), due: due, at: time.Now().UnixMilli()})
		f.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return f
}

// of is the firings of id seen at or after from (unix ms).
func (f *firings) of(id string, from int64) []firing {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []firing
	for _, g := range f.all {
		if g.id == id && g.at >= from {
			out = append(out, g)
		}
	}
	return out
}

// count is how many firings were seen.
func (f *firings) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.all)
}

// sendRecurring parks a recurring message through delay.in (JetStream) with the given
// headers besides x-delay-id id and x-target target.
func sendRecurring(t *testing.T, s *stack, id, target string, kv ...string) {
	t.Helper()
	m := nats.NewMsg("delay.in")
	m.Header.Set("x-delay-id", id)
	m.Header.Set("x-target", target)
	for i := 0; i+1 < len(kv); i += 2 {
		m.Header.Set(kv[i], kv[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publish %s: %v", id, err)
	}
}

// waitUntil polls cond every 20 ms until it holds or within has passed.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestS1RecurringOutageMisfire (docs/faults.md S1): three every-1s messages, one per
// x-delay-misfire policy, fire; the bridge is killed (kill -9) for 10 intervals and
// started again. once: exactly one catch-up firing (as the latest missed occurrence),
// then one per second; skip: no firing for an occurrence before the restart; all: every
// missed occurrence fires once, in order (none lost). Never early, through all three.
func TestS1RecurringOutageMisfire(t *testing.T) {
	s := newStack(t)
	f := watchFirings(t, s, "out.s1.>")
	b := e2etest.StartReady(t, bridgeBin, s.env)
	for _, m := range []string{"once", "skip", "all"} {
		sendRecurring(t, s, "s1-"+m, "out.s1."+m, "x-delay-every", "1s", "x-delay-misfire", m)
	}
	waitUntil(t, 10*time.Second, "two firings each", func() bool {
		return len(f.of("s1-once", 0)) >= 2 && len(f.of("s1-skip", 0)) >= 2 && len(f.of("s1-all", 0)) >= 2
	})
	b.Kill(t)
	killed := time.Now().UnixMilli()
	time.Sleep(10 * time.Second)
	restarted := time.Now().UnixMilli()
	e2etest.StartReady(t, bridgeBin, s.env)
	time.Sleep(4 * time.Second)

	for _, g := range f.of("", 0) {
		t.Errorf("firing without x-delay-id: %+v", g)
	}
	for _, id := range []string{"s1-once", "s1-skip", "s1-all"} {
		for _, g := range f.of(id, 0) {
			if g.at < g.due {
				t.Errorf("%s early: due %d, arrived %d", id, g.due, g.at)
			}
		}
	}
	before := f.of("s1-all", 0)
	lastBefore := int64(0)
	for _, g := range before {
		if g.at < killed {
			lastBefore = max(lastBefore, g.due)
		}
	}

	// once: one firing for the outage, then one per second.
	once := f.of("s1-once", restarted)
	if len(once) < 3 {
		t.Fatalf("once: %d firings after the restart", len(once))
	}
	catchUp := 0
	for k, g := range once {
		if g.due < restarted {
			catchUp++
		}
		if k > 0 && g.due != once[0].due+int64(k)*1000 {
			t.Errorf("once: firing %d after the restart due %d, want %d (one per second)", k, g.due, once[0].due+int64(k)*1000)
		}
	}
	if catchUp > 1 || once[0].due < restarted-1000 {
		t.Errorf("once: %d firings for occurrences before the restart, the first due %d (restart %d); want exactly one, the latest", catchUp, once[0].due, restarted)
	}
	// skip: nothing for the outage.
	skip := f.of("s1-skip", restarted)
	if len(skip) < 2 {
		t.Fatalf("skip: %d firings after the restart", len(skip))
	}
	for _, g := range skip {
		if g.due < restarted {
			t.Errorf("skip: a firing for an occurrence of the outage: due %d, restart %d", g.due, restarted)
		}
	}
	// all: every occurrence from the last firing before the kill on, each once (the one in
	// flight at the kill may come again: same Nats-Msg-Id).
	dues := map[int64]int{}
	for _, g := range f.of("s1-all", restarted) {
		dues[g.due]++
	}
	var sorted []int64
	for d, n := range dues {
		sorted = append(sorted, d)
		if n > 1 {
			t.Errorf("all: due %d fired %d times after the restart", d, n)
		}
	}
	slices.Sort(sorted)
	missed := 0
	for k, d := range sorted {
		if want := sorted[0] + int64(k)*1000; d != want {
			t.Fatalf("all: firings after the restart %v: a gap at %d", sorted, want)
		}
		if d < restarted {
			missed++
		}
	}
	if len(sorted) == 0 || sorted[0] > lastBefore+1000 || missed < 9 {
		t.Fatalf("all: after the restart from %v (last before the kill %d), %d for the outage; want every missed occurrence", sorted, lastBefore, missed)
	}
	t.Logf("down %d ms: once %d catch-up firing (due %d), skip first due %d (restart %d), all %d catch-up firings from %d",
		restarted-killed, catchUp, once[0].due, skip[0].due, restarted, missed, sorted[0])
}

// claimAhead is the bridge's default BRIDGE_CLAIM_AHEAD: how long before its due time a
// message may already be in delivery.
const claimAhead = 32 * time.Millisecond

// bulkCancel runs POST /v1/bulk/cancel with body through every next_cursor and sums
// matched and changed.
func bulkCancel(t *testing.T, api string, body map[string]any) (matched, changed int) {
	t.Helper()
	for {
		raw, _ := json.Marshal(body)
		resp, err := http.Post("http://"+api+"/v1/bulk/cancel", "application/json", bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Matched, Changed int
			NextCursor       *string `json:"next_cursor"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("bulk cancel: %d, %v", resp.StatusCode, err)
		}
		matched, changed = matched+out.Matched, changed+out.Changed
		if out.NextCursor == nil {
			return matched, changed
		}
		body["cursor"] = *out.NextCursor
	}
}

// TestS2BulkCancelFiringRecurring (docs/faults.md S2): POST /v1/bulk/cancel on the target
// of 1,000 every-1s messages while they fire: every one is changed (those in delivery
// too), and after the answer no occurrence fires that was not claimed before it (at most
// one firing per message, due before the answer or within BRIDGE_CLAIM_AHEAD after it);
// nothing stays parked.
func TestS2BulkCancelFiringRecurring(t *testing.T) {
	s := newStack(t)
	f := watchFirings(t, s, "out.s2")
	b := e2etest.StartReady(t, bridgeBin, s.env)
	const n = 1000
	start := time.Now().Add(2 * time.Second).UnixMilli()
	for i := range n {
		sendRecurring(t, s, "s2-"+strconv.Itoa(i), "out.s2", "x-delay-every", "1s", "x-deliver-at", strconv.FormatInt(start+int64(i), 10))
	}
	waitUntil(t, 30*time.Second, "two rounds of firings", func() bool { return f.count() >= 2*n })
	matched, changed := bulkCancel(t, b.APIAddr, map[string]any{"target": "out.s2"})
	answered := time.Now().UnixMilli()
	if matched != n || changed != n {
		t.Errorf("bulk cancel: matched %d, changed %d; want %d, %d", matched, changed, n, n)
	}
	time.Sleep(2500 * time.Millisecond)
	after := map[string]int{}
	f.mu.Lock()
	for _, g := range f.all {
		if g.at < answered {
			continue
		}
		// claimAhead: a firing due that soon after the answer may have been claimed ahead
		// before it; its withdrawal is best effort (docs/design.md "Claim ahead")
		if after[g.id]++; after[g.id] > 1 || g.due > answered+claimAhead.Milliseconds() {
			t.Errorf("%s fired after the bulk cancel answered (due %d, arrived %d, answered %d)", g.id, g.due, g.at, answered)
		}
	}
	f.mu.Unlock()
	var stats struct{ Parked int64 }
	if err := json.Unmarshal([]byte(parked(t, b)), &stats); err != nil || stats.Parked != 0 {
		t.Errorf("parked after the cancel: %+v, %v", stats, err)
	}
	t.Logf("matched %d, changed %d; %d firings in flight at the cancel published after it", matched, changed, len(after))
}
