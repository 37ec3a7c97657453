package api

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// BenchmarkAuditList100k times listing the whole audit log through the API (GET /v1/audit,
// pages of 1000, following next_cursor) when it holds N entries (default 100,000: a
// month of heavy operator use), and, as the baseline in the same run on the same Redis,
// listing N parked messages through GET /v1/messages (pages of 1000). Each is the median
// of 5 full listings, in ms, with the ratio audit/messages. Run:
// go test -run '^$' -bench BenchmarkAuditList100k -benchtime 1x ./httpapi/api/
// (AUDIT_BENCH_N=<n> changes N).
func BenchmarkAuditList100k(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("AUDIT_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	srv := testredis.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { rdb.Close() })
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: "bench", Shards: 16, Lease: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Init(b.Context()); err != nil {
		b.Fatal(err)
	}
	adm := admin.New(st, admin.WithAudit(admin.AuditConfig{Retention: 720 * time.Hour, MaxEntries: n}))
	if err := adm.Init(b.Context()); err != nil {
		b.Fatal(err)
	}
	// N audit entries of a realistic size (a bulk change by selector), 16 writers.
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				rec, err := adm.AuditBegin(context.Background(), admin.AuditEntry{Op: "reschedule", Selector: []byte(`{"target":"billing.*","due_from":1795600000000}`),
					Shift: "+1h", Actor: fmt.Sprintf("operator-%d", i%7), Remote: "10.1.2.3:54321"})
				if err == nil {
					err = rec.End(context.Background(), 5000, 4990, nil)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	// N parked messages, the baseline's listing.
	due := time.Now().Add(time.Hour).UnixMilli()
	reqs := make([]delaystore.ParkRequest, 0, 1000)
	for i := range n {
		reqs = append(reqs, delaystore.ParkRequest{ID: fmt.Sprintf("01J%023d", i), Absolute: true, At: due + int64(i),
			Envelope: delaystore.Envelope{Target: "nats:billing.invoice", Source: "nats:delay.in", Payload: make([]byte, 100)}})
		if len(reqs) == cap(reqs) || i == n-1 {
			if _, err := st.Park(b.Context(), reqs); err != nil {
				b.Fatal(err)
			}
			reqs = reqs[:0]
		}
	}
	wg.Wait()
	c := newAPIOn(b, "", st)
	listAudit := func() int {
		got, cur := 0, ""
		for {
			p, err := c.Audit(context.Background(), 1000, cur)
			if err != nil {
				b.Fatal(err)
			}
			got += len(p.Entries)
			if p.NextCursor == nil {
				return got
			}
			cur = *p.NextCursor
		}
	}
	listMessages := func() int {
		got, q := 0, url.Values{"limit": {"1000"}}
		for {
			p, err := c.List(context.Background(), q)
			if err != nil {
				b.Fatal(err)
			}
			got += len(p.Messages)
			if p.NextCursor == nil {
				return got
			}
			q.Set("cursor", *p.NextCursor)
		}
	}
	b.ResetTimer()
	measure := func(list func() int) float64 {
		var ms []float64
		for range 5 {
			t0 := time.Now()
			if got := list(); got != n {
				b.Fatalf("listed %d, want %d", got, n)
			}
			ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
		}
		slices.Sort(ms)
		return ms[len(ms)/2]
	}
	for b.Loop() {
		audit := measure(listAudit)
		msgs := measure(listMessages)
		b.ReportMetric(audit, "audit-ms")
		b.ReportMetric(msgs, "messages-ms")
		b.ReportMetric(audit/msgs, "audit/messages")
	}
}
