package admin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

func shiftSpec(target string) OpSpec {
	return OpSpec{Kind: delaystore.BulkShift, Shift: time.Hour, MaxDelay: 24 * time.Hour, Target: target}
}

// dueOf returns the due time of every id.
func (f *fixture) dueOf(t *testing.T, ids []string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, id := range ids {
		m, err := f.s.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		out[id] = m.Due
	}
	return out
}

// TestOpResumedExactlyOnce: a shift of 3,000 messages is cut off after two chunks (its
// runner gone without a word, as a killed replica: its lease runs out), messages parked
// after it began are left alone, another replica resumes it: every message is shifted
// exactly once, and the totals count each once.
func TestOpResumedExactlyOnce(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	ids := names("m", 3000)
	f.parkFor(t, "nats:shift.a", now+60_000, ids...)
	before := f.dueOf(t, ids)
	a, b := f.replica(t, 300*time.Millisecond), f.replica(t, 300*time.Millisecond)
	sel := Selector{Match: targetIs("nats:shift.")}

	op, err := a.StartOp(t.Context(), AuditEntry{Op: "reschedule", Actor: "alice"}, shiftSpec("shift.*"))
	if err != nil {
		t.Fatal(err)
	}
	late := names("late", 50)
	f.parkFor(t, "nats:shift.a", now+60_000, late...)
	// Two chunks, as the killed replica did them: then it is gone (no End, no release).
	var res OpResult
	p, err := op.readProgress(t.Context(), []int{0})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if p[0], err = op.step(t.Context(), op.selector(sel), 0, p[0], &res); err != nil {
			t.Fatal(err)
		}
	}
	if res.Changed == 0 {
		t.Fatal("the first chunks changed nothing")
	}
	if _, err := b.ResumeOp(t.Context(), op.ID()); !errors.As(err, new(*ErrOpBusy)) {
		t.Fatalf("resume under the live lease: %v, want busy", err)
	}
	if e := auditEntryOf(t, b, op.ID()); e.State != AuditRunning || e.Actor != "alice" || !e.Resumable {
		t.Fatalf("entry under the lease: %+v", e)
	}
	deadline := time.Now().Add(5 * time.Second)
	for auditEntryOf(t, b, op.ID()).State != AuditInterrupted {
		if time.Now().After(deadline) {
			t.Fatal("the entry never showed interrupted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resumed, err := b.ResumeOp(t.Context(), op.ID())
	if err != nil {
		t.Fatal(err)
	}
	rest, err := resumed.Run(t.Context(), sel, time.Minute)
	if err != nil || !rest.Done {
		t.Fatalf("resumed run: %+v %v", rest, err)
	}
	if got := res.Changed + rest.Changed; got != 3000 || res.Matched+rest.Matched != 3000 {
		t.Fatalf("changed %d+%d, matched %d+%d; want 3000 in all", res.Changed, rest.Changed, res.Matched, rest.Matched)
	}
	after := f.dueOf(t, ids)
	for _, id := range ids {
		if after[id] != before[id]+3_600_000 {
			t.Fatalf("%s moved by %d ms, want exactly 1h", id, after[id]-before[id])
		}
	}
	for id, due := range f.dueOf(t, late) {
		if due != now+60_000 {
			t.Fatalf("%s, parked after the operation began, was moved to %d", id, due)
		}
	}
	e := auditEntryOf(t, b, op.ID())
	if e.State != AuditDone || e.Matched != 3000 || e.Changed != 3000 {
		t.Fatalf("entry at the end: %+v, want done 3000/3000", e)
	}
	// The progress is gone; a resume of the finished operation changes nothing.
	for i := range 4 {
		if n := f.rdb.HLen(t.Context(), f.key(i, "b")).Val(); n != 0 {
			t.Fatalf("shard %d keeps %d progress entries after the end", i, n)
		}
	}
	var done *ErrOpDone
	if _, err := a.ResumeOp(t.Context(), op.ID()); !errors.As(err, &done) || done.Changed != 3000 {
		t.Fatalf("resume of a finished operation: %v", err)
	}
}

// TestOpKilledShowsCountsSoFar: a shift (and a dry run) cut off after a few chunks in two
// shards, its runner gone without a word (a killed replica: no renewal, no End), lists
// the counts of those chunks, while its lease runs and once interrupted: exactly what was
// changed, never 0, so nobody runs it again to move them twice.
func TestOpKilledShowsCountsSoFar(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	ids := names("m", 4000)
	f.parkFor(t, "nats:shift.a", now+60_000, ids...)
	before := f.dueOf(t, ids)
	a := f.replica(t, 5*time.Second)
	sel := Selector{Match: targetIs("nats:shift.")}
	ops := map[bool]*Op{}
	done := map[bool]OpResult{}
	for _, dry := range []bool{false, true} {
		spec := shiftSpec("shift.*")
		spec.DryRun = dry
		op, err := a.StartOp(t.Context(), AuditEntry{Op: "reschedule", Actor: "alice", DryRun: dry}, spec)
		if err != nil {
			t.Fatal(err)
		}
		// Three chunks in shard 0 and one in shard 1, as the killed replica did them.
		var res OpResult
		p, err := op.readProgress(t.Context(), []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		for i, chunks := range []int{3, 1} {
			for range chunks {
				if p[i], err = op.step(t.Context(), op.selector(sel), i, p[i], &res); err != nil {
					t.Fatal(err)
				}
			}
		}
		ops[dry], done[dry] = op, res
	}
	for _, state := range []string{AuditRunning, AuditInterrupted} {
		for dry, op := range ops {
			res := done[dry]
			deadline := time.Now().Add(10 * time.Second)
			e := auditEntryOf(t, a, op.ID())
			for e.State != state {
				if time.Now().After(deadline) {
					t.Fatalf("dry run %v: the entry never showed %s: %+v", dry, state, e)
				}
				time.Sleep(20 * time.Millisecond)
				e = auditEntryOf(t, a, op.ID())
			}
			if e.Matched != res.Matched || e.Changed != res.Changed {
				t.Fatalf("dry run %v, %s: listed matched %d, changed %d; the chunks matched %d, changed %d",
					dry, state, e.Matched, e.Changed, res.Matched, res.Changed)
			}
		}
	}
	shifted := int64(0)
	after := f.dueOf(t, ids)
	for _, id := range ids {
		if after[id] == before[id]+3_600_000 {
			shifted++
		}
	}
	shift, dry := done[false], done[true]
	if shift.Matched < 2*bulkChunk || shift.Changed != shift.Matched || shifted != shift.Changed ||
		dry.Matched < 2*bulkChunk || dry.Changed != 0 {
		t.Fatalf("the chunks: shift %+v, dry run %+v; %d shifted", shift, dry, shifted)
	}
}

// TestOpStaleRunnerChangesNothingTwice: a runner whose lease ran out (a paused process)
// goes on after another took the operation over: its next chunk is refused (the progress
// it continues is not the stored one), and no message moves twice.
func TestOpStaleRunnerChangesNothingTwice(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	ids := names("s", 2500)
	f.parkFor(t, "nats:stale", now+60_000, ids...)
	before := f.dueOf(t, ids)
	a, b := f.replica(t, 200*time.Millisecond), f.replica(t, 200*time.Millisecond)
	op, err := a.StartOp(t.Context(), AuditEntry{Op: "reschedule"}, shiftSpec("stale"))
	if err != nil {
		t.Fatal(err)
	}
	var res OpResult
	p, err := op.readProgress(t.Context(), []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if p[0], err = op.step(t.Context(), op.selector(Selector{}), 0, p[0], &res); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // the runner is paused beyond its lease
	taken, err := b.ResumeOp(t.Context(), op.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := taken.Run(t.Context(), Selector{}, 0); err != nil { // one more chunk in shard 0
		t.Fatal(err)
	}
	// The paused runner wakes up and goes on from what it knew.
	if _, err := op.step(t.Context(), op.selector(Selector{}), 0, p[0], &res); !errors.Is(err, ErrOpLost) {
		t.Fatalf("stale step: %v, want ErrOpLost", err)
	}
	if err := op.rec.set(t.Context(), AuditRunning, false, 0, 0); !errors.Is(err, ErrOpLost) {
		t.Fatalf("stale renewal: %v, want ErrOpLost", err)
	}
	if r, err := taken.Run(t.Context(), Selector{}, time.Minute); err != nil || !r.Done {
		t.Fatalf("%+v %v", r, err)
	}
	after := f.dueOf(t, ids)
	for _, id := range ids {
		if after[id] != before[id]+3_600_000 {
			t.Fatalf("%s moved by %d ms, want exactly 1h", id, after[id]-before[id])
		}
	}
}

// TestOpConcurrentResumes: of many concurrent resumes of one cut-off operation exactly
// one takes it; the others are told it runs elsewhere.
func TestOpConcurrentResumes(t *testing.T) {
	f := setup(t)
	f.parkFor(t, "nats:conc", f.now(t)+60_000, names("c", 1200)...)
	a := f.replica(t, 10*time.Second)
	op, err := a.StartOp(t.Context(), AuditEntry{Op: "reschedule"}, shiftSpec("conc"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Run(t.Context(), Selector{}, 0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, busy := 0, 0
	for range 8 {
		wg.Go(func() {
			_, err := f.replica(t, 10*time.Second).ResumeOp(context.Background(), op.ID())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.As(err, new(*ErrOpBusy)):
				busy++
			default:
				t.Errorf("resume: %v", err)
			}
		})
	}
	wg.Wait()
	if won != 1 || busy != 7 {
		t.Fatalf("%d resumes took it, %d were told busy; want 1 and 7", won, busy)
	}
}

// TestOpIDsAreNoKeys: an op id from a request is checked before Redis is asked; a
// well-formed unknown one is unknown; an audit entry that is no bulk operation is not
// resumable.
func TestOpIDsAreNoKeys(t *testing.T) {
	f := setup(t)
	for _, id := range []string{"", "x", "{" + f.prefix + ":0}:z", "../../etc", "0123456789ABCDEF0123456789abcdef",
		"0123456789abcdef0123456789abcdef0", "0123456789abcdef0123456789abcde\n", "*"} {
		if _, err := f.a.ResumeOp(t.Context(), id); !errors.Is(err, ErrBadOpID) {
			t.Errorf("op id %q: %v, want ErrBadOpID", id, err)
		}
	}
	if _, err := f.a.ResumeOp(t.Context(), newOpID()); !errors.Is(err, ErrOpUnknown) {
		t.Errorf("unknown op id: %v", err)
	}
	rec, err := f.a.AuditBegin(t.Context(), AuditEntry{Op: "cancel", ID: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.End(t.Context(), 1, 1, errors.New("cut off")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.a.ResumeOp(t.Context(), rec.OpID()); !errors.Is(err, ErrNotResumable) {
		t.Errorf("resume of a single cancel: %v", err)
	}
	if e := auditEntryOf(t, f.a, rec.OpID()); e.State != AuditInterrupted {
		t.Errorf("after a refused resume: %+v, want interrupted still", e)
	}
}

// TestOpByIDResumes: an operation on one id saves its progress too: resumed, it does not
// shift the message again.
func TestOpByIDResumes(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	f.parkFor(t, "nats:one", now+60_000, "only")
	a := f.replica(t, 100*time.Millisecond)
	spec := shiftSpec("")
	spec.ID = "only"
	op, err := a.StartOp(t.Context(), AuditEntry{Op: "reschedule", ID: "only"}, spec)
	if err != nil {
		t.Fatal(err)
	}
	var res OpResult
	p, _ := op.readProgress(t.Context(), []int{f.s.ShardOf("only")})
	if _, err := op.step(t.Context(), op.selector(Selector{}), f.s.ShardOf("only"), p[0], &res); err != nil || res.Changed != 1 {
		t.Fatalf("step: %+v %v", res, err)
	}
	time.Sleep(150 * time.Millisecond) // the lease runs out: the runner is gone
	again, err := a.ResumeOp(t.Context(), op.ID())
	if err != nil {
		t.Fatal(err)
	}
	if r, err := again.Run(t.Context(), Selector{}, time.Minute); err != nil || !r.Done || r.Changed != 0 {
		t.Fatalf("resumed: %+v %v", r, err)
	}
	if m, _ := f.s.Get(t.Context(), "only"); m.Due != now+60_000+3_600_000 {
		t.Fatalf("due +%d, want shifted once", m.Due-now)
	}
}

// auditEntryOf finds op id in the audit log.
func auditEntryOf(t *testing.T, s *Admin, id string) AuditEntry {
	t.Helper()
	after := ""
	for {
		p, err := s.AuditList(t.Context(), after, MaxAuditPage)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Entries {
			if e.OpID == id {
				return e
			}
		}
		if p.Next == "" {
			t.Fatalf("no audit entry %s", id)
		}
		after = p.Next
	}
}

// TestAuditListPagesAndBounds: pages newest first without gaps or repeats; the most kept
// drops the oldest; a cut-off change shows interrupted.
func TestAuditListPagesAndBounds(t *testing.T) {
	f := setup(t)
	s := f.replica(t, time.Minute)
	s.audit.MaxEntries = 250
	var begun []string
	for i := range 300 {
		rec, err := s.AuditBegin(t.Context(), AuditEntry{Op: "cancel", ID: fmt.Sprintf("m%d", i), Actor: "bob", Remote: "127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.End(t.Context(), 1, 1, nil); err != nil {
			t.Fatal(err)
		}
		begun = append(begun, rec.OpID())
		// one entry per Redis millisecond: entries of one millisecond are ordered by their
		// random op ids, so "the oldest" of them is not the first begun (the test failed
		// about one run in ten under -race)
		time.Sleep(time.Millisecond)
	}
	var got []AuditEntry
	after := ""
	for {
		p, err := s.AuditList(t.Context(), after, 7)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Entries...)
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if len(got) != 250 {
		t.Fatalf("%d entries listed, want the 250 kept", len(got))
	}
	kept := map[string]bool{}
	for _, id := range begun[50:] {
		kept[id] = true
	}
	for i, e := range got {
		if !kept[e.OpID] || e.State != AuditDone || e.Actor != "bob" || e.Matched != 1 || e.Remote != "127.0.0.1:1" {
			t.Fatalf("entry %d: %+v, want one of the 250 newest, done, listed once", i, e)
		}
		delete(kept, e.OpID)
		if i > 0 && e.At > got[i-1].At {
			t.Fatalf("entry %d is newer than the one before", i)
		}
	}
	if _, err := s.AuditList(t.Context(), "nope", 10); !errors.Is(err, ErrBadOpID) {
		t.Fatalf("a malformed position: %v", err)
	}
}

// TestAuditHold: a record held past its lease is listed running, not interrupted; once
// the holding stops, the lease runs out (interrupted) and End still settles it done.
func TestAuditHold(t *testing.T) {
	f := setup(t)
	s := f.replica(t, 600*time.Millisecond)
	rec, err := s.AuditBegin(t.Context(), AuditEntry{Op: "redrive", Actor: "alice", Remote: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	stop := rec.Hold(t.Context())
	time.Sleep(1800 * time.Millisecond) // three leases
	if e := auditEntryOf(t, s, rec.OpID()); e.State != AuditRunning {
		t.Errorf("held for three leases: %+v, want running", e)
	}
	stop()
	time.Sleep(800 * time.Millisecond)
	if e := auditEntryOf(t, s, rec.OpID()); e.State != AuditInterrupted {
		t.Errorf("a lease after the holding stopped: %+v, want interrupted", e)
	}
	if err := rec.End(t.Context(), 4, 3, nil); err != nil {
		t.Fatal(err)
	}
	if e := auditEntryOf(t, s, rec.OpID()); e.State != AuditDone || e.Matched != 4 || e.Changed != 3 {
		t.Errorf("ended: %+v, want done 4/3", e)
	}
}
