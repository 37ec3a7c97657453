package admin

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// TargetCount is one target's parked messages (Targets).
type TargetCount struct {
	Target string // "broker:name"
	Parked int64
	// NextDue is the earliest scheduled time of the target's messages (unix ms); 0 when
	// it is unknown: Targets read maxRead entries before it could be sure of it.
	NextDue int64
	// Window is the spread window (x-delay-window) of the message due at NextDue, the one
	// Targets read to find it: not a summary of the target's messages; 0 when it has none
	// or NextDue is unknown.
	Window time.Duration
	// Quota is the BRIDGE_TARGET_QUOTA pattern the target counts against (the first of
	// the store's rules that matches it), "" for none.
	Quota string
}

// Targets returns every target with parked messages, most parked first (then by name):
// the counts that park, ack, cancel and bulk keep per shard, summed
// (delaystore.Store.ParkedByTarget: a shard whose counts are not complete, or every
// shard with recount, is counted from its entries first, ~3 us per entry), each target's
// next due time with that message's spread window, and the quota pattern it counts
// against. Next dues are found by reading each shard in scheduled order, all shards'
// chunks in one pipeline a round, until the shard showed the first message of every
// target its counts hold, or is through: the first seen in a shard is that shard's
// earliest, and a target's next due is the earliest over the shards that hold it. The
// reading is bounded by work, not time: after maxRead entries (at least one round) it
// stops, and a target that a shard still holding it had not shown yet keeps NextDue 0
// (unknown), never a later one. It changes nothing else and blocks until done, ctx is
// done, or a Redis call fails.
func (a *Admin) Targets(ctx context.Context, recount bool, maxRead int) ([]TargetCount, error) {
	perShard, err := a.store.ParkedByTarget(ctx, recount)
	if err != nil {
		return nil, err
	}
	counts := map[string]int64{}
	held := make([]map[string]bool, len(perShard))
	for i, shard := range perShard {
		held[i] = make(map[string]bool, len(shard))
		for t, n := range shard {
			counts[t] += n
			held[i][t] = true
		}
	}
	out := make([]TargetCount, 0, len(counts))
	for t, n := range counts {
		out = append(out, TargetCount{Target: t, Parked: n, Quota: a.store.QuotaOf(t)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Parked != out[j].Parked {
			return out[i].Parked > out[j].Parked
		}
		return out[i].Target < out[j].Target
	})
	if err := a.nextDues(ctx, out, held, maxRead); err != nil {
		return nil, err
	}
	return out, nil
}

// HeldByOrder returns how many parked messages wait for their ordering key's predecessor
// (held: docs/design.md "Ordering keys"), over every shard: one ZCOUNT of the held score
// per shard (delaystore.Store.Observe), O(log n), the figure delaybridge_held_messages
// gives for the owned shards. It is a total, not per target: the per-target counts are
// kept by the scripts that park and delete, and a held count per target would have to be
// kept by them too (on the delivery path) or read from every held message's envelope.
// It changes nothing and blocks until Redis answered or ctx is done.
func (a *Admin) HeldByOrder(ctx context.Context) (int64, error) {
	obs, err := a.store.Observe(ctx, a.allShards(), nil)
	if err != nil {
		return 0, fmt.Errorf("held by order: %w", err)
	}
	var n int64
	for _, g := range obs.Shards {
		n += g.Held
	}
	return n, nil
}

// nextDues fills in the NextDue of targets from held (the targets each shard's counts
// hold): each shard is read in scheduled order, listChunk entries a round, all shards of a
// round in one pipeline, until it showed every target it holds or is through, or maxRead
// entries were read (Targets).
func (a *Admin) nextDues(ctx context.Context, targets []TargetCount, held []map[string]bool, maxRead int) error {
	index := make(map[string]int, len(targets))
	for i, t := range targets {
		index[t.Target] = i
	}
	pos := make([]delaystore.Position, len(held))
	done := make([]bool, len(held))
	for read := 0; ; {
		var reqs []delaystore.ScanRequest
		for sh := range held {
			if !done[sh] && len(held[sh]) > 0 {
				reqs = append(reqs, delaystore.ScanRequest{Shard: sh, From: 0, To: math.MaxInt64, After: pos[sh], Count: listChunk})
			}
		}
		if len(reqs) == 0 || (read > 0 && read >= maxRead) {
			break // unknown: what a shard still holds unseen
		}
		read += len(reqs) * listChunk
		for i, p := range a.store.Scan(ctx, reqs) {
			sh := reqs[i].Shard
			if p.Err != nil {
				return fmt.Errorf("targets: next due: shard %d: %w", sh, p.Err)
			}
			if p.Again {
				continue // read again next round
			}
			pos[sh], done[sh] = p.Next, p.Through
			for _, e := range p.Entries {
				if t, ok := index[e.Target]; ok && e.Err == nil && held[sh][e.Target] {
					delete(held[sh], e.Target)
					if targets[t].NextDue == 0 || e.Scheduled < targets[t].NextDue {
						targets[t].NextDue, targets[t].Window = e.Scheduled, e.Window
					}
				}
			}
		}
	}
	for _, h := range held {
		for t := range h { // counted here, not seen: this shard may hold an earlier one
			if i, ok := index[t]; ok {
				targets[i].NextDue, targets[i].Window = 0, 0
			}
		}
	}
	return nil
}
