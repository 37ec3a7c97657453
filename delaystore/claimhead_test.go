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

// TestClaimAhead (issue 26 item 2): a claim with Ahead also leases the entries due within
// Ahead after its Redis time, nothing later, each with its score as Eligible (its due time;
// a retry's next attempt, which is later than its due time); without Ahead only what is
// due, eligible at the claim's time. Both ways the shard reads its first entries (fewer
// than claim.lua's PEEK within the span) and reads the span again (more), with a due
// entry before it.
func TestClaimAhead(t *testing.T) {
	for _, n := range []int{3, 40} { // entries within the span: fewer and more than PEEK
		t.Run(fmt.Sprintf("within=%d", n), func(t *testing.T) {
			f := setup(t, func(c *Config) { c.Shards = 1; c.Lease = time.Hour }) // the due entry's lease outlasts the test
			now := f.now(t)
			reqs := []ParkRequest{{ID: "due", Absolute: true, At: now - 10, Envelope: sampleEnvelope(0)}}
			for i := range n {
				reqs = append(reqs, ParkRequest{ID: fmt.Sprintf("soon%02d", i), Absolute: true, At: now + 1000 + int64(i), Envelope: sampleEnvelope(0)})
			}
			reqs = append(reqs, ParkRequest{ID: "later", Absolute: true, At: now + 60_000, Envelope: sampleEnvelope(0)})
			f.park(t, reqs...)

			x := f.s.Exchange(t.Context(), nil, nil, []ClaimRequest{{Shard: 0, Max: 100}})
			if x.ClaimErrs[0] != nil || len(x.Claims[0].Messages) != 1 || x.Claims[0].Messages[0].ID != "due" {
				t.Fatalf("claim without Ahead: %+v %v, want only the due entry", x.Claims[0].Messages, x.ClaimErrs[0])
			}
			if m := x.Claims[0].Messages[0]; m.Eligible != x.Claims[0].Now || m.Due != now-10 {
				t.Fatalf("due entry: Eligible %d, Due %d, want the claim's time %d and %d", m.Eligible, m.Due, x.Claims[0].Now, now-10)
			}
			f.park(t, ParkRequest{ID: "due2", Absolute: true, At: now - 5, Envelope: sampleEnvelope(0)})
			x = f.s.Exchange(t.Context(), nil, nil, []ClaimRequest{{Shard: 0, Max: 100, Ahead: time.Minute - time.Second}})
			c := x.Claims[0]
			if x.ClaimErrs[0] != nil || len(c.Messages) != n+1 {
				t.Fatalf("claim with Ahead: %d messages, err %v; want the due one and the %d within the span", len(c.Messages), x.ClaimErrs[0], n)
			}
			if m := c.Messages[0]; m.ID != "due2" || m.Eligible != c.Now {
				t.Fatalf("claim with Ahead, first: %s eligible %d, want due2 eligible at the claim's time %d", m.ID, m.Eligible, c.Now)
			}
			c.Messages = c.Messages[1:]
			for i, m := range c.Messages {
				if want := fmt.Sprintf("soon%02d", i); m.ID != want || m.Eligible != m.Due || m.Due != now+1000+int64(i) {
					t.Fatalf("claimed %d: %s Eligible %d Due %d, want %s at %d", i, m.ID, m.Eligible, m.Due, want, now+1000+int64(i))
				}
				if m.Eligible > c.Now+(time.Minute-time.Second).Milliseconds() {
					t.Fatalf("%s eligible at %d, after the span's end %d", m.ID, m.Eligible, c.Now+59_000)
				}
			}

			// a retry's next attempt: claimed ahead with that time as Eligible
			first := c.Messages[0]
			if _, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: first.Receipt, Backoff: 5 * time.Second}}); err != nil {
				t.Fatal(err)
			}
			x = f.s.Exchange(t.Context(), nil, nil, []ClaimRequest{{Shard: 0, Max: 100, Ahead: 30 * time.Second}})
			if got := x.Claims[0].Messages; len(got) != 1 || got[0].ID != first.ID || got[0].Eligible < x.Claims[0].Now+4000 || got[0].Due != first.Due {
				t.Fatalf("retried entry claimed ahead: %+v (now %d), want %s eligible ~5 s on, due %d", got, x.Claims[0].Now, first.ID, first.Due)
			}
		})
	}
}
