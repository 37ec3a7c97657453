package delaystore

import (
	"fmt"
	"testing"
	"time"
)

// TestClaimNextHead: a claim reports the shard's least score left after it (its own
// leases included), whether it read that from the first entries (fewer due than claim.lua's
// PEEK) or again after the claim (more), and claims the due entries in score order up to
// the limit.
func TestClaimNextHead(t *testing.T) {
	for _, tc := range []struct {
		name        string
		due, limit  int
		future      time.Duration // one more entry due then (0: none)
		wantClaimed int
		next        string // "token", "future", "due" (a due entry left), "none"
	}{
		{"nothing parked", 0, 10, 0, 0, "none"},
		{"only a future entry", 0, 10, 5 * time.Second, 0, "future"},
		{"few due, nothing left", 3, 10, 0, 3, "token"},
		{"few due, future before the lease", 3, 10, 5 * time.Second, 3, "future"},
		{"few due, future after the lease", 3, 10, time.Hour, 3, "token"},
		{"limit reached among the first", 6, 4, time.Hour, 4, "due"},
		{"limit equals the due", 5, 5, 0, 5, "token"},
		{"more due than the first entries", 20, 100, 5 * time.Second, 20, "future"},
		{"more due than the first, limited", 20, 12, 0, 12, "due"},
		{"exactly the first entries, all due", 8, 100, 0, 8, "token"},
		{"exactly the first entries, then future", 8, 100, 5 * time.Second, 8, "future"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, func(c *Config) { c.Shards = 1 })
			now := f.now(t)
			var reqs []ParkRequest
			for i := range tc.due { // due in the past, in order
				reqs = append(reqs, ParkRequest{ID: fmt.Sprintf("d%02d", i), Absolute: true, At: now - 1000 + int64(i), Envelope: sampleEnvelope(0)})
			}
			var futureAt int64
			if tc.future > 0 {
				futureAt = f.now(t) + tc.future.Milliseconds()
				reqs = append(reqs, ParkRequest{ID: "future", Absolute: true, At: futureAt, Envelope: sampleEnvelope(0)})
			}
			if len(reqs) > 0 {
				f.park(t, reqs...)
			}
			c, err := f.s.Claim(t.Context(), 0, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Messages) != tc.wantClaimed {
				t.Fatalf("claimed %d, want %d", len(c.Messages), tc.wantClaimed)
			}
			for i, m := range c.Messages {
				if want := fmt.Sprintf("d%02d", i); m.ID != want {
					t.Fatalf("claimed %s at %d, want %s (score order)", m.ID, i, want)
				}
			}
			want := int64(-1)
			switch tc.next {
			case "token":
				want = c.Messages[0].Token
			case "future":
				want = futureAt
			case "due":
				want = now - 1000 + int64(tc.wantClaimed)
			}
			if c.Next != want {
				t.Fatalf("next %d, want %s %d", c.Next, tc.next, want)
			}
		})
	}
}
