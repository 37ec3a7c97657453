package delaystore

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// The dev mode runs on miniredis: a bulk operation, its audit entry and a resume work
// there too (audit.lua, auditlist.lua, bulk.lua's progress, bulkforget.lua).
func TestMiniredisOps(t *testing.T) {
	s := miniredisStore(t, miniredis.RunT(t), Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute})
	ctx := t.Context()
	var reqs []ParkRequest
	for _, id := range names("d", 1200) {
		reqs = append(reqs, ParkRequest{ID: id, Delay: time.Hour, Envelope: sampleEnvelope(1)})
	}
	if _, err := s.Park(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	op, err := s.StartOp(ctx, AuditEntry{Op: "reschedule", Actor: "dev"}, OpSpec{Kind: BulkShift, Shift: time.Minute, MaxDelay: 24 * time.Hour})
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
