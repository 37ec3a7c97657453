package egress

import (
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"
)

func members(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("pod-%d-%08x", i, i*2654435761)
	}
	return ids
}

// Rendezvous: every shard has one owner among the members; a join moves shards only to
// the joiner, a leave only the leaver's shards; the load is spread.
func TestRendezvousMovesOnlyWhatItMust(t *testing.T) {
	const shards = 1024
	ids := members(8)
	before := newRendezvous(ids)
	counts := map[string]int{}
	for s := range shards {
		counts[before.owner(s)]++
	}
	for _, id := range ids {
		if c := counts[id]; c < shards/8/2 || c > shards/8*2 {
			t.Errorf("member %s owns %d of %d shards with 8 members", id, c, shards)
		}
	}
	joiner := "pod-new-1234abcd"
	after := newRendezvous(append(append([]string(nil), ids...), joiner))
	moved := 0
	for s := range shards {
		a, b := before.owner(s), after.owner(s)
		if a != b {
			moved++
			if b != joiner {
				t.Fatalf("shard %d moved from %s to %s on a join of %s", s, a, b, joiner)
			}
		}
	}
	if moved == 0 || moved > shards/9*2 {
		t.Fatalf("a join moved %d of %d shards, want about %d", moved, shards, shards/9)
	}
	leaver := ids[3]
	rest := newRendezvous(without(ids, leaver))
	for s := range shards {
		a, b := before.owner(s), rest.owner(s)
		if a != b && a != leaver {
			t.Fatalf("shard %d moved from %s to %s on a leave of %s", s, a, b, leaver)
		}
		if b == leaver {
			t.Fatalf("shard %d still owned by the leaver", s)
		}
	}
	if newRendezvous(nil).owner(0) != "" {
		t.Fatal("an owner without members")
	}
}

// assign: shards a join brings from a live owner start after the handover pause; shards
// of a member that left start at once; lost shards are dropped.
func TestAssignHandover(t *testing.T) {
	ids := members(3)
	me := ids[0]
	o := newOwnership(me, 64, 3*time.Second, nil, slog.New(slog.DiscardHandler), false)
	// First list: as a join (old = list without me).
	o.assign(without(ids, me), ids, true)
	all := newRendezvous(ids)
	for s := range 64 {
		start, mine := o.owned[s]
		if (all.owner(s) == me) != mine {
			t.Fatalf("shard %d: owned %v, rendezvous says %s", s, mine, all.owner(s))
		}
		if mine && time.Until(start) < handoverPause/2 {
			t.Fatalf("shard %d taken from a live member without the handover pause", s)
		}
	}
	// ids[1] leaves: its shards that come to me start at once.
	left := without(ids, ids[1])
	prev := maps.Clone(o.owned)
	o.assign(ids, left, false)
	now := newRendezvous(left)
	gained := 0
	for s := range 64 {
		start, mine := o.owned[s]
		if (now.owner(s) == me) != mine {
			t.Fatalf("after the leave, shard %d: owned %v, rendezvous says %s", s, mine, now.owner(s))
		}
		if _, had := prev[s]; mine && !had {
			gained++
			if time.Until(start) > 0 {
				t.Fatalf("shard %d of a member that left waits %s", s, time.Until(start))
			}
		}
	}
	if gained == 0 {
		t.Fatal("no shard of the member that left came to me: test set-up too small")
	}
	// A newcomer that wins some of my shards: I drop them at once.
	joined := append(append([]string(nil), left...), "pod-z-ffffffff")
	o.assign(left, joined, false)
	for s := range o.owned {
		if newRendezvous(joined).owner(s) != me {
			t.Fatalf("shard %d kept after a join moved it away", s)
		}
	}
}
