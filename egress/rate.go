package egress

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/glob"
)

// MaxTargetRate is the highest rate BRIDGE_TARGET_RATE accepts per pattern.
const MaxTargetRate = 1_000_000

// Rate limiting (docs/design.md, "Per-target rate"): slots are handed out up to
// rateHorizon ahead; a slot within rateTolerance of now is published at once; when Redis
// cannot be asked, the messages wait rateRetry and ask again.
const (
	rateHorizon   = 30 * time.Second
	rateTolerance = 10 * time.Millisecond
	rateRetry     = time.Second
)

// RateRule is one pattern of BRIDGE_TARGET_RATE: targets that match Pattern (and no
// earlier rule) are published at no more than PerSecond messages per second over the
// fleet. A pattern with ":" is matched against "broker:name", others against the name
// (the BRIDGE_TARGET_ALLOW globs: "*" matches any run of characters, dots included).
type RateRule struct {
	Pattern   string
	PerSecond int
}

// ParseRateRules reads BRIDGE_TARGET_RATE: comma-separated "<glob>=<n>/s", for example
// "orders.*=200/s,kafka:billing.*=1000/s". Blank entries are ignored; "" is no rule.
func ParseRateRules(s string) ([]RateRule, error) {
	items, err := glob.ParseRules(s, "<n>/s", func(rate string) error {
		n, err := strconv.Atoi(strings.TrimSuffix(rate, "/s"))
		if !strings.HasSuffix(rate, "/s") || err != nil || n < 1 || n > MaxTargetRate {
			return fmt.Errorf("want a rate of 1/s to %d/s, as <n>/s", MaxTargetRate)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var rules []RateRule
	for _, it := range items {
		n, _ := strconv.Atoi(strings.TrimSuffix(it.Value, "/s")) // checked above
		rules = append(rules, RateRule{Pattern: it.Pattern, PerSecond: n})
	}
	return rules, nil
}

// Reserver hands out the publish slots of rate-limited targets over the fleet
// (delaystore.Store.Reserve).
type Reserver interface {
	Reserve(ctx context.Context, target string, n int, interval, horizon time.Duration) (delaystore.Slots, error)
}

// rates applies BRIDGE_TARGET_RATE. It remembers the slots it gave to the messages it put
// back (only the owner of a shard claims them again), so that they do not take a second
// one. Safe for concurrent use.
type rates struct {
	rules []RateRule
	store Reserver

	mu        sync.Mutex
	held      map[heldKey]heldSlot
	lastSweep int64 // Redis us of the last sweep of held
}

type heldKey struct{ target, id string }

type heldSlot struct{ version, slot int64 }

// rule is the first rule matching target ("broker:name"), if any.
func (r *rates) rule(target string) (RateRule, bool) {
	for _, rl := range r.rules {
		if glob.MatchTarget(rl.Pattern, target) {
			return rl, true
		}
	}
	return RateRule{}, false
}

// admit splits claimed, one target's messages, into those to publish now and put-backs
// of those that wait for their slot; messages of a target without a rule, and expired
// ones (at nowMs, the Redis clock: they are dead-lettered, not published), are all ready.
// The ready ones come in due order. It blocks on one Redis call when a message needs a
// slot; when that fails, those messages are put back for rateRetry (err says why).
func (r *rates) admit(ctx context.Context, target string, claimed []delaystore.Claimed, nowMs int64) (
	ready []delaystore.Claimed, wait []delaystore.RetryRequest, err error) {
	rl, ok := r.rule(target)
	if !ok {
		return claimed, nil, nil
	}
	sorted := slices.Clone(claimed)
	slices.SortStableFunc(sorted, func(a, b delaystore.Claimed) int { return cmp.Compare(a.Due, b.Due) })
	var need []delaystore.Claimed
	nowUs := nowMs * 1000
	for _, c := range sorted {
		switch slot, held := r.slotOf(target, c); {
		case expiredAt(c, nowMs) != nil:
			r.forget(target, c)
			ready = append(ready, c)
		case held && slot <= nowUs+rateTolerance.Microseconds():
			r.forget(target, c)
			ready = append(ready, c)
		case held: // claimed before its slot (another replica's put-back, a clock step)
			wait = append(wait, putBack(c, slot-nowUs))
		default:
			need = append(need, c)
		}
	}
	if len(need) == 0 {
		return ready, wait, nil
	}
	interval := time.Second / time.Duration(rl.PerSecond)
	slots, err := r.store.Reserve(ctx, target, len(need), interval, rateHorizon)
	if err != nil {
		for _, c := range need {
			wait = append(wait, putBack(c, rateRetry.Microseconds()))
		}
		return ready, wait, fmt.Errorf("rate of %s: %w", target, err)
	}
	r.assign(target, need, slots, &ready, &wait)
	return ready, wait, nil
}

// assign gives need their slots: ready when within rateTolerance of now, else put back
// to the slot (remembered); those beyond the horizon are put back to its end, to ask again.
func (r *rates) assign(target string, need []delaystore.Claimed, slots delaystore.Slots,
	ready *[]delaystore.Claimed, wait *[]delaystore.RetryRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep(slots.Now)
	for i, c := range need {
		switch slot := slots.At(i); {
		case i >= slots.Count:
			*wait = append(*wait, putBack(c, slots.At(slots.Count)-slots.Now))
		case slot <= slots.Now+rateTolerance.Microseconds():
			*ready = append(*ready, c)
		default:
			r.held[heldKey{target, c.ID}] = heldSlot{version: c.Version, slot: slot}
			*wait = append(*wait, putBack(c, slot-slots.Now))
		}
	}
}

// slotOf returns the slot remembered for c (this version of it), if any.
func (r *rates) slotOf(target string, c delaystore.Claimed) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.held[heldKey{target, c.ID}]
	return h.slot, ok && h.version == c.Version
}

// forget drops the slot remembered for c's id.
func (r *rates) forget(target string, c delaystore.Claimed) {
	r.mu.Lock()
	delete(r.held, heldKey{target, c.ID})
	r.mu.Unlock()
}

// sweep drops, at most once per horizon, remembered slots more than a horizon old: their
// messages were cancelled, replaced, or claimed by another replica.
func (r *rates) sweep(nowUs int64) {
	if nowUs-r.lastSweep < rateHorizon.Microseconds() {
		return
	}
	r.lastSweep = nowUs
	for k, h := range r.held {
		if h.slot < nowUs-rateHorizon.Microseconds() {
			delete(r.held, k)
		}
	}
}

// putBack is the put-back of c for waitUs microseconds (rounded up to the millisecond).
func putBack(c delaystore.Claimed, waitUs int64) delaystore.RetryRequest {
	d := time.Duration(max(waitUs, 0)) * time.Microsecond
	return delaystore.RetryRequest{Receipt: c.Receipt, Backoff: d, PutBack: true}
}
