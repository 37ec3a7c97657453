package admin

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/glob"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// BenchmarkListLargeStore times the operator's reads on a large store (1,000,000
// parked over 100 targets, 16 shards, 100 B payloads, due over the next day): the first
// page (100) of one target's messages, the first page of a one-minute due range, a
// recount of every shard (what a store written by an older version costs once), and
// Targets (counts and next due of all 100). Each is reported in ms (median of 5), with
// Redis CPU per call. Run: LIST_BENCH_N=1000000 go test -run '^$' -bench
// BenchmarkListLargeStore -benchtime 1x -timeout 30m ./admin/ (default N: 200,000).
func BenchmarkListLargeStore(b *testing.B) {
	n := envInt("LIST_BENCH_N", 200_000)
	f := newFixture(b, testredis.Start(b).URL(), func(c *delaystore.Config) { c.Shards = 16 })
	start := time.Now().UnixMilli() + 3_600_000
	payload := make([]byte, 100)
	reqs := make([]delaystore.ParkRequest, 0, 1000)
	for i := 0; i < n; i++ {
		env := delaystore.Envelope{Target: fmt.Sprintf("nats:orders.t%02d", i%100), Source: "nats:delay.in", SourceID: fmt.Sprintf("js:IN:%d", i), Payload: payload}
		reqs = append(reqs, delaystore.ParkRequest{ID: fmt.Sprintf("01J%023d", i), Absolute: true, At: start + int64(i)*86_400_000/int64(n), Envelope: env})
		if len(reqs) == cap(reqs) || i == n-1 {
			if _, err := f.s.Park(b.Context(), reqs); err != nil {
				b.Fatal(err)
			}
			reqs = reqs[:0]
		}
	}
	b.ResetTimer()
	measure := func(name string, run func() error) {
		var times []float64
		cpu0 := redisCPU(b, f)
		for range 5 {
			t0 := time.Now()
			if err := run(); err != nil {
				b.Fatal(err)
			}
			times = append(times, float64(time.Since(t0).Microseconds())/1000)
		}
		cpu := (redisCPU(b, f) - cpu0) / 5 * 1000
		b.ReportMetric(median(times), name+"-ms")
		b.ReportMetric(cpu, name+"-redis-ms")
	}
	match := func(t string) bool { return glob.MatchTarget("orders.t42", t) }
	measure("target-page", func() error {
		page, _, err := f.a.List(b.Context(), ListQuery{Limit: 100, Match: match, Literals: glob.Literals("orders.t42")}, 10*time.Second)
		if err == nil && len(page) != 100 {
			err = fmt.Errorf("page of %d", len(page))
		}
		return err
	})
	measure("range-page", func() error {
		_, _, err := f.a.List(b.Context(), ListQuery{Limit: 100, From: start + 43_200_000, To: start + 43_260_000}, 10*time.Second)
		return err
	})
	measure("recount", func() error { // what a store of an older version costs once
		_, err := f.a.Targets(b.Context(), true, 0)
		return err
	})
	measure("targets", func() error {
		ts, err := f.a.Targets(b.Context(), false, 100_000)
		if err == nil && (len(ts) != 100 || ts[0].Parked != int64(n/100) || ts[99].NextDue == 0) {
			err = fmt.Errorf("targets %d, first %+v, last %+v", len(ts), ts[0], ts[len(ts)-1])
		}
		return err
	})
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// envInt is the integer in the environment variable name, or def when unset.
func envInt(name string, def int) int {
	var v int
	if _, err := fmt.Sscan(os.Getenv(name), &v); err != nil || v <= 0 {
		return def
	}
	return v
}
