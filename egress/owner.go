package egress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"hash/fnv"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/backoff"
)

// handoverPause is how long a replica waits before it claims a shard that a join moved to
// it from a live owner: time for that owner to hear of the change (P:wake:fleet) and stop.
// One that missed the notification stops at its next heartbeat; the overlap is safe (the
// claim lease is the fence). See docs/design.md, "Fleet: shard ownership".
const handoverPause = 100 * time.Millisecond

// leaveTimeout bounds the Leave call at shutdown.
const leaveTimeout = 2 * time.Second

// Fleet is the membership part of the delay store (delaystore.Store implements it).
type Fleet interface {
	Heartbeat(ctx context.Context, id string, ttl time.Duration, known int64, token string) (delaystore.Members, error)
	Leave(ctx context.Context, id string) error
}

// NewMemberID returns a replica id for the membership set: the host name (the pod name
// in Kubernetes, so an operator can tell replicas apart) and 8 random hex digits.
func NewMemberID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "bridge"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// ownership keeps this replica in the fleet's membership and decides which shards it
// claims: rendezvous hashing over the live members, with the handover rules of
// docs/design.md. run heartbeats; the scheduler reads snapshot. Safe for concurrent use.
type ownership struct {
	id     string
	shards int
	ttl    time.Duration
	store  Fleet
	log    *slog.Logger
	notify func() // called after the owned set or the validity changed
	poke   chan struct{}
	// all makes every shard owned at once, always (Config.ClaimAll: fault tests).
	all bool

	mu         sync.Mutex
	known      int64    // membership version of members; -1: none yet (or lapsed)
	token      string   // the token of the last answered heartbeat (proof for the next one)
	members    []string // live members, sorted, as last read
	owned      map[int]time.Time
	validUntil time.Time   // local monotonic: the membership may have expired in Redis after it
	gen        uint64      // counts changes of owned or validity
	joined     atomic.Bool // a heartbeat was confirmed once (or all)
}

func newOwnership(id string, shards int, ttl time.Duration, store Fleet, log *slog.Logger, all bool) *ownership {
	o := &ownership{id: id, shards: shards, ttl: ttl, store: store, log: log, all: all,
		poke: make(chan struct{}, 1), known: -1, owned: map[int]time.Time{}, notify: func() {}}
	if all {
		for s := range shards {
			o.owned[s] = time.Time{}
		}
		o.joined.Store(true)
	}
	return o
}

// ownedView is what the scheduler needs of ownership at one moment.
type ownedView struct {
	gen   uint64
	owned map[int]time.Time // shard -> local time from which it may be claimed
	until time.Time         // claims only before this (local monotonic clock)
}

// snapshot returns the current view (a copy).
func (o *ownership) snapshot() ownedView {
	o.mu.Lock()
	defer o.mu.Unlock()
	return ownedView{gen: o.gen, owned: maps.Clone(o.owned), until: o.until()}
}

// peek returns the generation and validity without copying the owned set (the scheduler
// calls it every round; it takes a snapshot only when the generation moved).
func (o *ownership) peek() (uint64, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.gen, o.until()
}

// until is the end of the membership's validity. Caller holds mu.
func (o *ownership) until() time.Time {
	if o.all {
		return time.Now().Add(time.Hour)
	}
	return o.validUntil
}

// wake asks for a heartbeat now (the fleet channel said the membership moved). Never
// blocks.
func (o *ownership) wake() {
	select {
	case o.poke <- struct{}{}:
	default:
	}
}

// run heartbeats every ttl/3 (and when woken) until ctx ends; then it leaves the fleet, so
// that the heirs of its shards start at once, and returns. A failed heartbeat is retried
// with backoff (beat).
func (o *ownership) run(ctx context.Context) {
	if o.all {
		<-ctx.Done()
		return
	}
	every := o.ttl / 3
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			o.leave(ctx)
			return
		case <-t.C:
		case <-o.poke:
			t.Stop()
		}
		confirmed, err := o.beat(ctx, every)
		if err != nil {
			continue // ctx ended
		}
		wait := every
		if !confirmed {
			wait = 0 // a first heartbeat, or one after a lost answer: confirm at once
		}
		t.Reset(wait)
	}
}

// beat heartbeats until one is answered, retrying with backoff (a wake-up tries again at
// once); a failure is logged at Warn once per run, the recovery at Info. It returns an
// error only when ctx ended.
func (o *ownership) beat(ctx context.Context, every time.Duration) (confirmed bool, err error) {
	err = backoff.Retry(ctx, backoff.Policy{Min: min(100*time.Millisecond, every), Max: every, Log: o.log,
		Failed: "fleet heartbeat failed; retrying", Recovered: "fleet heartbeat recovered", Args: []any{"member", o.id},
		Sleep: o.pause},
		func(ctx context.Context) (err error) {
			confirmed, err = o.heartbeat(ctx, every)
			return err
		}, nil)
	return confirmed, err
}

// pause follows a failed heartbeat (logged): it drops the shards if the membership may
// have lapsed, then waits d, cut short by a wake-up (which asks for a heartbeat now). It
// reports false when ctx ended.
func (o *ownership) pause(ctx context.Context, d time.Duration) bool {
	o.checkLapse()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-o.poke:
	}
	return true
}

// heartbeat renews the membership and applies a new member list; it reports whether the
// heartbeat was confirmed (it showed the token of the previous answer: only then is the
// membership live until the send time + TTL).
func (o *ownership) heartbeat(ctx context.Context, timeout time.Duration) (bool, error) {
	o.mu.Lock()
	known, token := o.known, o.token
	if o.validUntil.Before(time.Now()) {
		known = -1 // lapsed (or first): our entry may have expired; read the list anew
	}
	o.mu.Unlock()
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sent := time.Now()
	m, err := o.store.Heartbeat(hctx, o.id, o.ttl, known, token)
	if err != nil {
		return false, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.token = m.Token
	if !m.Confirmed {
		return false, nil // renews nothing; the next heartbeat (at once) confirms
	}
	lapsed := known < 0
	o.validUntil = sent.Add(o.ttl) // Redis set the expiry from a TIME after sent
	o.joined.Store(true)
	if m.Changed || lapsed {
		old := o.members
		if lapsed {
			old = without(m.IDs, o.id)
		}
		o.assign(old, m.IDs, lapsed)
		o.known, o.members = m.Version, m.IDs
	}
	o.gen++
	o.notify()
	return true, nil
}

// checkLapse drops every shard once the membership may have expired in Redis (no
// heartbeat answered for the TTL): other replicas may own them now. The scheduler has
// already stopped claiming them at that moment (it checks the validity before every
// claim); this makes it unsubscribe and report 0 owned shards.
func (o *ownership) checkLapse() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.owned) == 0 || time.Now().Before(o.validUntil) {
		return
	}
	o.log.Warn("fleet membership lapsed (no heartbeat answered in time); stopped claiming", "member", o.id,
		"ttl", o.ttl, "shards", len(o.owned))
	o.owned = map[int]time.Time{}
	o.gen++
	o.notify()
}

// assign recomputes the owned shards for the member list now, given the list before; it
// logs what moved. Caller holds mu.
func (o *ownership) assign(old, now []string, lapsed bool) {
	if lapsed {
		o.owned = map[int]time.Time{}
	}
	oldW, nowW := newRendezvous(old), newRendezvous(now)
	at := time.Now()
	gained, lost := 0, 0
	for s := range o.shards {
		if nowW.owner(s) != o.id {
			if _, ok := o.owned[s]; ok {
				delete(o.owned, s)
				lost++
			}
			continue
		}
		if _, ok := o.owned[s]; ok {
			continue
		}
		start := at
		if prev := oldW.owner(s); prev != "" && prev != o.id && slices.Contains(now, prev) {
			start = at.Add(handoverPause)
		}
		o.owned[s] = start
		gained++
	}
	if gained > 0 || lost > 0 || lapsed {
		o.log.Info("fleet membership changed", "member", o.id, "members", len(now), "owned", len(o.owned),
			"gained", gained, "lost", lost)
	}
}

// leave removes this replica from the membership (bounded by leaveTimeout) and drops
// every shard.
func (o *ownership) leave(ctx context.Context) {
	o.mu.Lock()
	o.owned = map[int]time.Time{}
	o.validUntil = time.Time{}
	o.gen++
	o.notify()
	o.mu.Unlock()
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	if err := o.store.Leave(lctx, o.id); err != nil {
		o.log.Warn("leave the fleet; the shards move when the membership expires", "member", o.id, "err", err)
		return
	}
	o.log.Info("left the fleet", "member", o.id)
}

func without(ids []string, id string) []string {
	out := make([]string, 0, len(ids))
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

// rendezvous assigns shards to members by highest random weight: shard s belongs to the
// member with the largest mix64(fnv64a(id) ^ s-mix), ties to the smaller id. Every replica
// computes the same owner from the same list; a join or leave moves only the shards the
// member wins or held. Never change the weight function: replicas of two versions would
// disagree (safe, but both would claim).
type rendezvous struct {
	ids    []string
	hashes []uint64
}

func newRendezvous(ids []string) rendezvous {
	r := rendezvous{ids: ids, hashes: make([]uint64, len(ids))}
	for i, id := range ids {
		h := fnv.New64a()
		_, _ = h.Write([]byte(id))
		r.hashes[i] = h.Sum64()
	}
	return r
}

// owner returns the member that owns shard s, "" when there are no members.
func (r rendezvous) owner(s int) string {
	best, bestW := "", uint64(0)
	sm := uint64(s+1) * 0x9E3779B97F4A7C15
	for i, h := range r.hashes {
		w := mix64(h ^ sm)
		if best == "" || w > bestW || (w == bestW && r.ids[i] < best) {
			best, bestW = r.ids[i], w
		}
	}
	return best
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
