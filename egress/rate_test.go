package egress

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/headers"
)

func TestParseRateRules(t *testing.T) {
	rules, err := ParseRateRules(" orders.*=200/s, kafka:billing.*=1000/s ,,")
	if err != nil || len(rules) != 2 || rules[0] != (RateRule{"orders.*", 200}) || rules[1] != (RateRule{"kafka:billing.*", 1000}) {
		t.Fatalf("rules = %+v, %v", rules, err)
	}
	if rules, err := ParseRateRules(""); err != nil || rules != nil {
		t.Fatalf("empty = %+v, %v", rules, err)
	}
	for _, bad := range []string{"orders.*", "=5/s", "a=0/s", "a=5", "a=5/m", "a=-1/s", "a=1.5/s", "[=5/s", "a=1000001/s"} {
		if _, err := ParseRateRules(bad); err == nil {
			t.Errorf("ParseRateRules(%q) accepted", bad)
		}
	}
	ps := (Config{MaxAttempts: 1, BackoffMin: time.Second, BackoffMax: time.Second, OwnershipTTL: time.Second, TargetInflight: 1, TargetRate: "a=5"}).Validate()
	if len(ps) != 1 || !strings.HasSuffix(ps[0].Var, "TARGET_RATE") {
		t.Fatalf("Validate = %v, want one TARGET_RATE problem", ps)
	}
}

func TestRateRuleMatching(t *testing.T) {
	r := &rates{rules: []RateRule{{"kafka:orders.*", 1}, {"orders.*", 2}, {"*", 3}}}
	for target, want := range map[string]int{"kafka:orders.eu": 1, "nats:orders.eu": 2, "nats:billing": 3} {
		if rl, ok := r.rule(target); !ok || rl.PerSecond != want {
			t.Errorf("rule(%q) = %+v, %v; want %d/s", target, rl, ok, want)
		}
	}
	if _, ok := (&rates{rules: []RateRule{{"orders.*", 2}}}).rule("nats:billing"); ok {
		t.Error("an unmatched target is limited")
	}
}

// fakeSlots hands out slots like rate.lua, on a clock it is given.
type fakeSlots struct {
	mu    sync.Mutex
	now   int64 // us
	tat   map[string]int64
	calls int
}

func (f *fakeSlots) Reserve(_ context.Context, target string, n int, interval, horizon time.Duration) (delaystore.Slots, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	iv := interval.Microseconds()
	tat := max(f.tat[target], f.now)
	k := min(int64(n), max((f.now+horizon.Microseconds()-tat)/iv, 0))
	f.tat[target] = tat + k*iv
	return delaystore.Slots{Now: f.now, First: tat, Interval: iv, Count: int(k)}, nil
}

// TestRatesAdmit: in due order, the first slot is published at once and the others wait
// for theirs, one interval apart; a message back at its slot is published without a
// second slot; an expired one does not wait; an unlimited target is not asked about.
func TestRatesAdmit(t *testing.T) {
	f := &fakeSlots{now: 1_000_000_000, tat: map[string]int64{}}
	r := &rates{rules: []RateRule{{"slow", 10}}, store: f, held: map[heldKey]heldSlot{}}
	nowMs := f.now / 1000
	var claimed []delaystore.Claimed
	for i, due := range []int64{nowMs - 1, nowMs - 3, nowMs - 2} {
		claimed = append(claimed, delaystore.Claimed{Receipt: delaystore.Receipt{ID: strconv.Itoa(i), Version: 1}, Due: due})
	}
	expired := delaystore.Claimed{Receipt: delaystore.Receipt{ID: "old", Version: 1}, Due: nowMs - 5000,
		Envelope: delaystore.Envelope{Expires: time.Second}}
	ready, wait, err := r.admit(context.Background(), "nats:slow", append(claimed, expired), nowMs)
	if err != nil || len(ready) != 2 || ready[0].ID != "old" || ready[1].ID != "1" || len(wait) != 2 {
		t.Fatalf("admit = %v, %v, %v; want old (expired) and 1 (earliest due) ready, 2 waiting", ids(ready), wait, err)
	}
	if wait[0].ID != "2" || wait[0].Backoff != 100*time.Millisecond || wait[1].ID != "0" || wait[1].Backoff != 200*time.Millisecond || !wait[0].PutBack {
		t.Fatalf("waiting %+v; want 2 in 100ms, then 0 in 200ms, put back", wait)
	}
	f.now += 100_000
	calls := f.calls
	ready, wait, err = r.admit(context.Background(), "nats:slow", claimed[2:3], f.now/1000)
	if err != nil || len(ready) != 1 || len(wait) != 0 || f.calls != calls {
		t.Fatalf("back at its slot: %v, %v, %v, %d calls; want ready without asking", ids(ready), wait, err, f.calls-calls)
	}
	if ready, wait, _ := r.admit(context.Background(), "nats:fast", claimed, nowMs); len(ready) != 3 || wait != nil || f.calls != calls {
		t.Fatalf("unlimited target: %v, %v", ids(ready), wait)
	}
}

func ids(cs []delaystore.Claimed) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

// TestRateLimitedTarget: 40 messages due at once to a target limited to 20/s and 40 to an
// unlimited one: the limited ones all arrive, none before (i-1)/20 s after they were
// parked minus the tolerance, the unlimited ones all arrive before the limited ones are
// through, and the put-backs are counted.
func TestRateLimitedTarget(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	slow, fast := collect(t, gc, "slow.a"), collect(t, gc, "fast")
	runEgress(t, Config{TargetRate: "slow.*=20/s"}, st, map[string]message.Publisher{"nats": gc})
	parked := time.Now()
	var reqs []delaystore.ParkRequest
	for i := range 40 {
		for _, target := range []string{"nats:slow.a", "nats:fast"} {
			reqs = append(reqs, delaystore.ParkRequest{ID: target + strconv.Itoa(i), Replace: true,
				Envelope: delaystore.Envelope{Target: target, Source: "http", Payload: []byte("x")}})
		}
	}
	if _, err := st.Park(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	var fastDone time.Time
	for range 40 {
		fastDone = waitFor(t, fast, 5*time.Second).at
	}
	var last time.Time
	seen := map[string]bool{}
	for range 40 {
		g := waitFor(t, slow, 10*time.Second)
		id, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderID)
		seen[id] = true
		last = g.at
	}
	if len(seen) != 40 {
		t.Fatalf("%d distinct limited messages", len(seen))
	}
	if min := 39*time.Second/20 - rateTolerance; last.Sub(parked) < min {
		t.Fatalf("40 messages at 20/s took %s from the park, want at least %s", last.Sub(parked), min)
	}
	if !fastDone.Before(last) {
		t.Fatalf("unlimited target done %s after the park, the limited one %s", fastDone.Sub(parked), last.Sub(parked))
	}
	t.Logf("limited: 40 in %s (20/s: 1.95 s); unlimited: 40 in %s", last.Sub(parked).Round(time.Millisecond), fastDone.Sub(parked).Round(time.Millisecond))
	waitEmpty(t, st)
}
