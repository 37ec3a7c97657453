package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Firing control rows (delaybridge only): the release rate of a target limited
// by BRIDGE_TARGET_RATE (a burst due at once, 1 and 4 replicas), and the Redis cost of a
// recurring message per firing next to a one-shot message at the same rate.

// firingParams size the firing rows.
type firingParams struct {
	rateN     int   // messages of the limited burst
	rateLimit int   // its BRIDGE_TARGET_RATE, msgs/s
	replicas  []int // replicas of the rate rows
	recurring int   // recurring messages (every 1s): firings per second
	recurFor  time.Duration
	windowN   int // messages of the window rows' burst
}

// runRateRow: n messages due at once to bench.out.w limited to limit/s; the release rate
// is the burst's (arrivals / time from due to the last one).
func runRateRow(bin string, n, limit, replicas int) result {
	label := fmt.Sprintf("rate %d/s, %dk due at once", limit, n/1000)
	currentVariant = fmt.Sprintf("delaybridge x%d rate", replicas)
	s, err := startDelaybridge(bin, dbOpts{fsync: "everysec", replicas: replicas, capacity: n + 1000,
		env: map[string]string{"BRIDGE_TARGET_RATE": fmt.Sprintf("bench.out.*=%d/s", limit)}})
	if err != nil {
		res := blankResult("delaybridge", label)
		res.replicas, res.aof, res.rate, res.err = replicas, "everysec", float64(limit), "setup: "+err.Error()
		return res
	}
	defer s.close()
	waitMembers(s, replicas)
	res := runBurst(s, n, 0, label)
	res.replicas, res.aof, res.rate = replicas, "everysec", float64(limit)
	if res.err != "" {
		printBridgeTails(s)
	}
	return res
}

// runRecurringRow: k recurring messages (every 1s, first firings spread over a second),
// then d of firings measured (Redis CPU, commands, scripts per firing; lateness); before
// that, on the same system, k one-shot messages per second for d (runSteady) as the
// reference. It returns both.
func runRecurringRow(bin string, k int, d time.Duration) (recurring, oneShot result) {
	currentVariant = "delaybridge x1 recurring"
	label := fmt.Sprintf("recurring: %d messages every 1s, %s", k, d)
	n := int(float64(k)*d.Seconds()) + k
	s, err := startDelaybridge(bin, dbOpts{fsync: "everysec", replicas: 1, capacity: 2*n + 1000})
	if err != nil {
		r := blankResult("delaybridge", label)
		r.err = "setup: " + err.Error()
		return r, r
	}
	defer s.close()
	waitMembers(s, 1)
	oneShot = runSteady(s, float64(k), d, 0)
	oneShot.workload = fmt.Sprintf("one-shot: %d msgs/s, %s", k, d)
	recurring = newResult(s, label)
	recurring.replicas, recurring.aof = 1, "everysec"
	r := s.rec()
	if err := s.send(k, func(i int) sched {
		return sched{delay: time.Duration(i) * time.Second / time.Duration(k), every: "1s"}
	}, 0); err != nil {
		recurring.err = err.Error()
		return recurring, oneShot
	}
	time.Sleep(2 * time.Second) // parked, firing
	r.reset()
	c0 := snap(s)
	time.Sleep(d)
	c1 := snap(s)
	firings := int(r.n.Load())
	recurring.n, recurring.release = firings, float64(firings)/c1.t.Sub(c0.t).Seconds()
	if firings == 0 {
		recurring.err = "no firings"
		return recurring, oneShot
	}
	recurring.cpu(c0, c1, firings)
	recurring.lateness(r)
	for _, x := range []*result{&recurring, &oneShot} {
		x.replicas, x.aof = 1, "everysec"
	}
	return recurring, oneShot
}

// renderFiring is the firing-control section of the report.
func renderFiring(rate []row, recur []row) string {
	if len(rate) == 0 && len(recur) == 0 {
		return ""
	}
	var b strings.Builder
	if len(rate) > 0 {
		fmt.Fprintf(&b, "\nPer-target rate (BRIDGE_TARGET_RATE; a burst due at once to the limited target; release rate = arrivals / (last arrival - due)):\n\n")
		fmt.Fprintf(&b, "| replicas | limit msgs/s | messages | runs | release msgs/s | vs limit | last released s after due | lateness p50 / p99 ms | Redis cmds / scripts per msg | notes |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range rate {
			fmt.Fprintf(&b, "| %d | %s | %d | %d | %s | %s%% | %s | %s / %s | %s / %s | %s |\n", r.replicas, fnum(r.rate, 0), r.n, r.runs,
				fnum(r.release, 1), fnum(100*(r.release/r.rate-1), 1), fnum(r.releasedIn, 2), fnum(r.p50, 0), fnum(r.p99, 0),
				fnum(r.cmdsMsg, 1), fnum(r.scriptsMsg, 2), strings.Join(rowNotes(r), "; "))
		}
	}
	if len(recur) > 0 {
		fmt.Fprintf(&b, "\nRecurring messages (x-delay-every: 1s) against one-shot messages at the same rate, one replica, same Redis:\n\n")
		fmt.Fprintf(&b, "| workload | runs | firings or msgs/s | Redis CPU us per firing or msg | cmds / scripts / reads per firing or msg | lateness p50 / p99 ms | notes |\n|---|---|---|---|---|---|---|\n")
		for _, r := range recur {
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s / %s / %s | %s / %s | %s |\n", r.workload, r.runs, fnum(r.release, 0),
				fnum(r.redisCPUk*1000, 1), fnum(r.cmdsMsg, 1), fnum(r.scriptsMsg, 2), fnum(r.readsMsg, 2),
				fnum(r.p50, 1), fnum(r.p99, 1), strings.Join(rowNotes(r), "; "))
		}
		var rec, one *row
		for i := range recur {
			switch {
			case strings.HasPrefix(recur[i].workload, "recurring"):
				rec = &recur[i]
			case strings.HasPrefix(recur[i].workload, "one-shot"):
				one = &recur[i]
			}
		}
		if rec != nil && one != nil && !math.IsNaN(rec.redisCPUk) && one.redisCPUk > 0 {
			fmt.Fprintf(&b, "\nRedis CPU per firing / per one-shot message: %s; commands: %s.\n", fnum(rec.redisCPUk/one.redisCPUk, 2), fnum(rec.cmdsMsg/one.cmdsMsg, 2))
		}
	}
	return b.String()
}
