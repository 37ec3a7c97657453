package admin

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
)

// The dev mode runs on miniredis: a bulk operation, its audit entry and a resume work
// there too (audit.lua, auditlist.lua, bulk.lua's progress, bulkforget.lua).
func TestMiniredisOps(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	f := &fixture{rdb: rdb, prefix: "dev"}
	st, s := f.open(t, delaystore.Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute})
	ctx := t.Context()
	var reqs []delaystore.ParkRequest
	for _, id := range names("d", 1200) {
		reqs = append(reqs, delaystore.ParkRequest{ID: id, Delay: time.Hour, Envelope: sampleEnvelope(1)})
	}
	if _, err := st.Park(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	op, err := s.StartOp(ctx, AuditEntry{Op: "reschedule", Actor: "dev"}, OpSpec{Kind: delaystore.BulkShift, Shift: time.Minute, MaxDelay: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := op.Run(ctx, Selector{}, 0); err != nil || r.Done {
		t.Fatalf("first chunk: %+v %v", r, err)
	}
	again, err := s.ResumeOp(ctx, op.ID())
	if err != nil {
		t.Fatal(err)
	}
	if r, err := again.Run(ctx, Selector{}, time.Minute); err != nil || !r.Done {
		t.Fatalf("resumed: %+v %v", r, err)
	}
	p, err := s.AuditList(ctx, "", 10)
	if err != nil || len(p.Entries) != 1 || p.Entries[0].State != AuditDone || p.Entries[0].Changed != 1200 || p.Entries[0].Actor != "dev" {
		t.Fatalf("audit on miniredis: %+v %v", p, err)
	}
}

// TestMiniredisAuditWithoutInit: `bridge redrive` writes its audit entry through a store
// and an Admin that were never initialised, whose scripts were never loaded: on a server
// that cannot compile the scripts' flags line (miniredis, as Redis 6) they run unflagged.
func TestMiniredisAuditWithoutInit(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	a := New(s)
	rec, err := a.AuditBegin(t.Context(), AuditEntry{Op: "redrive", Actor: "alice", Remote: "cli"})
	if err != nil {
		t.Fatalf("audit begin without Init: %v", err)
	}
	if err := rec.End(t.Context(), 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	if e := auditEntryOf(t, a, rec.OpID()); e.State != AuditDone || e.Matched != 2 || e.Changed != 1 {
		t.Fatalf("entry %+v, want done 2/1", e)
	}
}
