package admin

import (
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// TestResumePass: a resume gives the put-back messages of the targets it resumes their
// due time back, leaves those of a target still paused by another glob, of other targets,
// and in delivery alone; a second resume (as after a kill halfway) finds nothing more;
// resumes at once move each message once.
func TestResumePass(t *testing.T) {
	f := setup(t)
	f.a.pauseSettle = time.Millisecond
	ctx := t.Context()
	past := f.now(t) - 1000
	f.parkFor(t, "nats:a.c", past, names("ac", 30)...)
	f.parkFor(t, "nats:a.b", past, names("ab", 5)...)
	f.parkFor(t, "nats:b", past, names("b", 5)...)
	for _, g := range []string{"a.*", "a.b"} {
		if _, err := f.a.Pause(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	var back []delaystore.RetryRequest
	inDelivery := ""
	for sh := range f.s.Shards() {
		c, err := f.s.Claim(ctx, sh, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			if inDelivery == "" && m.Envelope.Target == "nats:a.c" {
				inDelivery = m.ID // stays claimed
				continue
			}
			back = append(back, delaystore.RetryRequest{Receipt: m.Receipt, Backoff: delaystore.PauseHold, PutBack: true})
		}
	}
	if a, err := f.s.Retry(ctx, back); err != nil || a.N != 39 {
		t.Fatalf("put back %+v, %v", a, err)
	}
	var wg sync.WaitGroup
	moved := make([]int, 3)
	for i := range moved {
		wg.Go(func() {
			r, err := f.a.Resume(ctx, "a.*")
			if err != nil {
				t.Error(err)
			}
			moved[i] = r.Moved
		})
	}
	wg.Wait()
	if total := moved[0] + moved[1] + moved[2]; total != 29 {
		t.Fatalf("resumes at once moved %v, want 29 in all", moved)
	}
	if r, err := f.a.Resume(ctx, "a.*"); err != nil || r.Changed || r.Moved != 0 {
		t.Fatalf("resume again = %+v, %v; want nothing left", r, err)
	}
	now := f.now(t)
	for sh := range f.s.Shards() {
		page := f.s.Scan(ctx, []delaystore.ScanRequest{{Shard: sh, From: 0, To: 1 << 50, Count: 1000}})[0]
		for _, e := range page.Entries {
			waiting := e.Scheduled > now
			if want := e.Target != "nats:a.c" || e.ID == inDelivery; waiting != want {
				t.Fatalf("%s of %s scheduled %d (now %d): want waiting %v", e.ID, e.Target, e.Scheduled, now, want)
			}
		}
	}
}
