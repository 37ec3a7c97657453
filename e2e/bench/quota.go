package main

import (
	"fmt"
	"strings"
	"time"
)

// Quota cost rows: the Redis CPU of a park with a BRIDGE_TARGET_QUOTA pattern
// that matches the messages' target against the same without a quota, each on a fresh
// system, alternating within one run.

// quotaEnv is the quota of the "with" rows: it matches bench.out.w and never refuses.
const quotaEnv = "bench.out.*=1000000000"

// runQuotaRow parks n messages due in an hour (parks only: the Redis CPU of the ingest)
// on one replica, with or without the quota.
func runQuotaRow(bin string, n int, withQuota bool) (park result) {
	tag := "no quota"
	env := map[string]string{}
	if withQuota {
		tag, env["BRIDGE_TARGET_QUOTA"] = "quota bench.out.*", quotaEnv
	}
	currentVariant = "delaybridge x1 " + tag
	parkLabel := fmt.Sprintf("park %dk (due in 1h), %s", n/1000, tag)
	park = blankResult("delaybridge", parkLabel)
	park.replicas, park.aof = 1, "everysec"
	s, err := startDelaybridge(bin, dbOpts{fsync: "everysec", replicas: 1, capacity: n + 1000, env: env})
	if err != nil {
		park.err = "setup: " + err.Error()
		return park
	}
	defer s.close()
	waitMembers(s, 1)
	park = newResult(s, parkLabel)
	park.n, park.replicas, park.aof = n, 1, "everysec"
	c0 := snap(s)
	at := time.Now().Add(time.Hour)
	if err := s.send(n, func(int) sched { return sched{at: at, abs: true} }, 0); err != nil {
		park.err = err.Error()
		return park
	}
	tIng, err := s.waitIngested(n, 5*time.Minute)
	if err != nil {
		park.err = err.Error()
		return park
	}
	c1 := snap(s)
	park.ingest = float64(n) / tIng.Sub(c0.t).Seconds()
	park.cpu(c0, c1, n)
	return park
}

// renderQuota is the quota section of the report, with the ratios with / without.
func renderQuota(rows []row) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nQuota cost (BRIDGE_TARGET_QUOTA=%s matching every message's target, against no quota; one replica, same machine, runs alternating):\n\n", quotaEnv)
	fmt.Fprintf(&b, "| workload | runs | Redis CPU us per msg | cmds / scripts per msg | ingest msgs/s | notes |\n|---|---|---|---|---|---|\n")
	cpu := map[string]float64{}
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %s | %s / %s | %s | %s |\n", r.workload, r.runs, fnum(r.redisCPUk*1000, 2),
			fnum(r.cmdsMsg, 2), fnum(r.scriptsMsg, 3), fnum(r.ingest, 0), strings.Join(rowNotes(r), "; "))
		cpu[r.workload] = r.redisCPUk
	}
	for _, r := range rows {
		base, ok := strings.CutSuffix(r.workload, ", quota bench.out.*")
		if without := cpu[base+", no quota"]; ok && without > 0 {
			fmt.Fprintf(&b, "\n%s: Redis CPU with / without quota %s.", base, fnum(r.redisCPUk/without, 3))
		}
	}
	b.WriteString("\n")
	return b.String()
}
