package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// The fleet workloads: many bridge replicas on one Redis, idle replicas, and a
// Redis Cluster. They run on delaybridge only, and observe the bridge only through Redis
// (INFO), NATS (arrivals) and /proc (CPU), so that they measure any bridge binary.

// fleetParams sizes the fleet, idle and cluster workloads.
type fleetParams struct {
	rates    []float64     // fleet: paced rates, msgs/s
	replicas []int         // fleet: bridge replicas per row
	dur      time.Duration // fleet and cluster: sending time per row
	runs     int           // fleet and cluster: runs per row (medians)

	idleReplicas []int
	idleShards   []int
	idleWarmup   time.Duration
	idleFor      time.Duration

	clusterMasters int
	clusterShards  int
	clusterRate    float64

	firing firingParams
	quotaN int // quota: messages per row
}

// fleetMembersKey is the membership set of the fleet design (docs/design.md, "Fleet:
// shard ownership"): `{P:fleet}:members`. A binary without ownership has none.
const fleetMembersKey = "{" + benchPrefix + ":fleet}:members"

// waitMembers waits, before a row sends, until the fleet is formed: when the bridge keeps
// the membership set, until it holds want members, then 1.2 s more (a heartbeat and the
// handover pause, so every shard has its owner). It returns the members seen, or -1 when
// no membership set appeared within 2 s (a binary without ownership: nothing to wait for).
func waitMembers(s *dbSystem, want int) int {
	start := time.Now()
	count := func() (n int64, exists bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, node := range s.redisNodes() { // on a cluster, the master that has the key answers
			c, err := node.rdb.ZCard(ctx, fleetMembersKey).Result()
			if err == nil && c > 0 {
				return c, true
			}
		}
		return 0, false
	}
	for {
		n, exists := count()
		switch {
		case exists && n >= int64(want):
			time.Sleep(1200 * time.Millisecond)
			return int(n)
		case !exists && time.Since(start) > 2*time.Second:
			return -1
		case time.Since(start) > 15*time.Second:
			fmt.Fprintf(os.Stderr, "fleet: %d of %d members after 15 s; sending anyway\n", n, want)
			return int(n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// printBridgeTails prints the end of every bridge's output (after a failed row).
func printBridgeTails(s *dbSystem) {
	for i, b := range s.bridges {
		if out := strings.TrimSpace(b.out.String()); out != "" {
			fmt.Fprintf(os.Stderr, "bridge %d output (tail):\n%s\n", i, tail(out, 2000))
		}
	}
}

// runFleet: replicas bridges on one redis-server (AOF everysec), paced rate msgs/s for d,
// delays uniform in 0..1 s (the steady workload at another rate and replica count).
func runFleet(bin string, rate float64, replicas int, d time.Duration) result {
	n := int(rate * d.Seconds())
	label := fmt.Sprintf("fleet %.0f/s %s", rate, d)
	currentVariant = fmt.Sprintf("delaybridge x%d fleet", replicas)
	// GOMAXPROCS=1 per replica: a fleet's sidecars each have a small CPU limit (Go sets
	// GOMAXPROCS from it); 16 bridges with 2 threads each on this 2-core box would measure
	// the kernel's run queue, not the bridge.
	s, err := startDelaybridge(bin, dbOpts{fsync: "everysec", replicas: replicas, capacity: n + 1000, gomaxprocs: 1})
	if err != nil {
		res := blankResult("delaybridge", label)
		res.replicas, res.aof, res.rate, res.err = replicas, "everysec", rate, "setup: "+err.Error()
		return res
	}
	defer s.close()
	members := waitMembers(s, replicas)
	profileBridges(s, currentVariant, label)
	res := runSteady(s, rate, d, 0)
	res.workload, res.replicas, res.aof, res.rate, res.members = label, replicas, "everysec", rate, members
	if res.err != "" {
		printBridgeTails(s)
	}
	return res
}

// runCluster: one bridge on a Redis Cluster of masters (AOF everysec each), BRIDGE_SHARDS
// shards, paced rate msgs/s for d, delays 0..1 s. The result has the per-master figures.
func runCluster(bin string, masters, shards int, rate float64, d time.Duration) (result, []int) {
	n := int(rate * d.Seconds())
	label := fmt.Sprintf("cluster %d masters, %d shards, %.0f/s %s", masters, shards, rate, d)
	currentVariant = "delaybridge cluster"
	s, err := startDelaybridge(bin, dbOpts{fsync: "everysec", replicas: 1, capacity: n + 1000, shards: shards, clusterMasters: masters})
	if err != nil {
		res := blankResult("delaybridge", label)
		res.replicas, res.aof, res.rate, res.err = 1, "everysec", rate, "setup: "+err.Error()
		return res, nil
	}
	defer s.close()
	perMaster := shardsPerMaster(s.masters, shards)
	members := waitMembers(s, 1)
	res := runSteady(s, rate, d, 0)
	res.workload, res.replicas, res.aof, res.rate, res.members = label, 1, "everysec", rate, members
	if res.err != "" {
		printBridgeTails(s)
	}
	return res, perMaster
}

// shardsPerMaster counts the shard hash tags {bench:<i>} per master (masters in slot
// order, slots split evenly as startCluster does), with CLUSTER KEYSLOT.
func shardsPerMaster(masters []*redisProc, shards int) []int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := make([]int, len(masters))
	pipe := masters[0].rdb.Pipeline()
	for i := range shards {
		pipe.ClusterKeySlot(ctx, fmt.Sprintf("{%s:%d}", benchPrefix, i))
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return nil
	}
	for _, c := range cmds {
		slot, _ := c.(interface{ Val() int64 })
		if slot == nil {
			return nil
		}
		out[int(slot.Val())*len(masters)/16384]++
	}
	return out
}

// idleResult is one idle row: replicas bridges with BRIDGE_SHARDS shards, no traffic.
type idleResult struct {
	replicas, shards int
	secs             float64
	// per replica per second: Redis commands (commandstats), scripts, socket reads
	cmds, scripts, reads float64
	redisCPU             float64 // Redis CPU, ms per second (all replicas)
	bridgeCPU            float64 // bridge CPU, ms per second per replica
	perCmd               map[string]float64
	members              int
	err                  string
}

// runIdle: replicas bridges with shards shards on a fresh redis-server (the store records
// its shard count) and no traffic; after warmup, the Redis commands over d.
func runIdle(bin string, replicas, shards int, warmup, d time.Duration) idleResult {
	res := idleResult{replicas: replicas, shards: shards, members: -1}
	currentVariant = "delaybridge idle"
	s, err := startDelaybridge(bin, dbOpts{fsync: "everysec", replicas: replicas, capacity: 1000, shards: shards})
	if err != nil {
		res.err = "setup: " + err.Error()
		return res
	}
	defer s.close()
	res.members = waitMembers(s, replicas)
	time.Sleep(warmup)
	c0 := snap(s)
	time.Sleep(d)
	c1 := snap(s)
	res.secs = c1.t.Sub(c0.t).Seconds()
	per := res.secs * float64(replicas)
	calls, reads, cmds := c1.redis.sub(c0.redis)
	res.cmds, res.reads, res.scripts = float64(calls)/per, float64(reads)/per, float64(scriptCalls(cmds))/per
	res.redisCPU = (c1.redis.cpu - c0.redis.cpu) / res.secs * 1000
	res.bridgeCPU = (c1.worker - c0.worker) / per * 1000
	res.perCmd = map[string]float64{}
	for k, v := range cmds {
		res.perCmd[k] = float64(v) / per
	}
	if n := s.r.n.Load(); n > 0 {
		res.err = fmt.Sprintf("%d messages arrived with no traffic", n)
	}
	return res
}

// renderFleet is the fleet section: the rows, then per rate the most replicas against 1
// replica, with the targets.
func renderFleet(rows []row) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nFleet: R bridge replicas on one redis-server (AOF everysec), paced JetStream traffic, delays uniform 0..1 s:\n\n")
	fmt.Fprintf(&b, "| rate msgs/s | replicas | runs | fleet members | Redis cmds/msg | scripts/msg | reads/msg | Redis CPU us/msg | bridge CPU us/msg (all replicas) | Redis / bridges / harness CPU (cores) | lateness p50 ms | p99 ms | max ms | notes |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s | %s | %s | %s |\n",
			fnum(r.rate, 0), r.replicas, r.runs, membersLabel(r.members), fnum(r.cmdsMsg, 1), fnum(r.scriptsMsg, 2), fnum(r.readsMsg, 2),
			fnum(r.redisCPUk*1000, 1), fnum(r.workerCPUk*1000, 1), fnum(r.redisUtil, 2), fnum(r.workerUtil, 2), fnum(r.harnessUtil, 2),
			fnum(r.p50, 2), fnum(r.p99, 2), fnum(r.max, 2), strings.Join(rowNotes(r), "; "))
	}
	b.WriteString(renderFleetTargets(rows))
	return b.String()
}

// renderFleetTargets is the table of the fleet's targets: per rate, the row with the most
// replicas against the 1-replica row of the same run: Redis commands per message (absolute)
// and lateness p99 against a bound made of one replica's p99.
func renderFleetTargets(rows []row) string {
	var rates []float64
	for _, r := range rows {
		if !slices.Contains(rates, r.rate) {
			rates = append(rates, r.rate)
		}
	}
	var b strings.Builder
	for _, rate := range rates {
		one, most := fleetPair(rows, rate)
		if one == nil || most == nil {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\nFleet, most replicas against 1 replica at the same rate (same run); targets at the most replicas: "+
				"Redis commands per delivered message <= %g, lateness p99 <= %gx one replica's p99 + %g ms:\n\n", targetFleetCmds, targetFleetP99x, targetFleetP99Ms)
			fmt.Fprintf(&b, "| rate msgs/s | replicas | Redis cmds/msg at R | at 1 | <= %g at R | lateness p99 ms at R | at 1 | bound ms (%gx at 1 + %g) | p99 at R <= bound |\n"+
				"|---|---|---|---|---|---|---|---|---|\n", targetFleetCmds, targetFleetP99x, targetFleetP99Ms)
		}
		bound := fleetP99Bound(one.p99)
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", fnum(rate, 0), most.replicas,
			fnum(most.cmdsMsg, 1), fnum(one.cmdsMsg, 1), verdict(most.cmdsMsg, targetFleetCmds),
			fnum(most.p99, 2), fnum(one.p99, 2), fnum(bound, 2), verdict(most.p99-bound, 0))
	}
	return b.String()
}

// fleetPair is, at rate, the 1-replica row and the row with the most replicas (more
// than 1); nil when either is missing.
func fleetPair(rows []row, rate float64) (one, most *row) {
	for i := range rows {
		r := &rows[i]
		if r.rate != rate {
			continue
		}
		if r.replicas == 1 {
			one = r
		}
		if r.replicas > 1 && (most == nil || r.replicas > most.replicas) {
			most = r
		}
	}
	return one, most
}

func membersLabel(m int) string {
	if m < 0 {
		return "- (no membership key)"
	}
	return fmt.Sprint(m)
}

// rowNotes are the missing/early/error notes of a row.
func rowNotes(r row) []string {
	var notes []string
	if r.missing != 0 {
		notes = append(notes, fmt.Sprintf("MISSING %d", r.missing))
	}
	if r.early != 0 {
		notes = append(notes, fmt.Sprintf("EARLY %d", r.early))
	}
	for _, e := range r.errs {
		notes = append(notes, "error: "+strings.ReplaceAll(e, "|", "/"))
	}
	return notes
}

// steadyAOFs are the AOF policies the steady tables compare, in order.
var steadyAOFs = []string{"everysec", "always"}

// renderSteady is the steady comparison: the 1-replica delaybridge rows side by side with
// asynq and the minimal store, then, per AOF policy, delaybridge against the minimal store
// of the same run and policy, with the targets.
func renderSteady(rows []row) string {
	return renderSteadySide(rows) + renderSteadyTargets(rows)
}

// steadyRow is the steady row of system with AOF label aof, or nil; for delaybridge the
// 1-replica row with the NATS source and no WAIT (a wait variant's AOF label is not the
// bare policy; the Kafka source's system is delaybridge/kafka).
func steadyRow(rows []row, system, aof string) *row {
	for i := range rows {
		r := &rows[i]
		if r.system == system && r.aof == aof && strings.HasPrefix(r.workload, "steady") &&
			(system != "delaybridge" || r.replicas == 1) {
			return r
		}
	}
	return nil
}

// renderSteadySide is the side-by-side table: per AOF policy, delaybridge (1 replica),
// asynq and the minimal store.
func renderSteadySide(rows []row) string {
	var b strings.Builder
	for _, aof := range steadyAOFs {
		for _, sys := range []string{"delaybridge", "asynq", "minimal"} {
			r := steadyRow(rows, sys, aof)
			if r == nil {
				continue
			}
			if b.Len() == 0 {
				fmt.Fprintf(&b, "\nSteady (delaybridge: 1 replica, NATS source, no WAIT) side by side with asynq and the minimal store, per AOF policy:\n\n")
				fmt.Fprintf(&b, "| system | AOF | workload | Redis CPU us/msg | Redis cmds/msg | scripts/msg | reads/msg | lateness p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|---|---|---|\n")
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.system, r.aof, r.workload, fnum(r.redisCPUk*1000, 1),
				fnum(r.cmdsMsg, 1), fnum(r.scriptsMsg, 2), fnum(r.readsMsg, 2), fnum(r.p50, 2), fnum(r.p99, 2), fnum(r.max, 2))
		}
	}
	return b.String()
}

// renderSteadyTargets is, per AOF policy with both rows, delaybridge against the minimal
// store of the same run: Redis CPU per message as a ratio, lateness p99 as a difference.
func renderSteadyTargets(rows []row) string {
	var b strings.Builder
	for _, aof := range steadyAOFs {
		db, m := steadyRow(rows, "delaybridge", aof), steadyRow(rows, "minimal", aof)
		if db == nil || m == nil {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\nSteady, delaybridge (1 replica, NATS source, no WAIT) against the minimal store of the same run and AOF policy; "+
				"targets: Redis CPU per message <= %gx the minimal store's, lateness p99 <= the minimal store's p99 + %g ms:\n\n", targetSteadyCPU, targetSteadyP99Ms)
			fmt.Fprintf(&b, "| AOF | workload | Redis CPU us/msg delaybridge / minimal | ratio | <= %gx | lateness p99 ms delaybridge | minimal | difference ms | <= minimal + %g ms |\n"+
				"|---|---|---|---|---|---|---|---|---|\n", targetSteadyCPU, targetSteadyP99Ms)
		}
		cpuRatio, diff := db.redisCPUk/m.redisCPUk, db.p99-m.p99
		fmt.Fprintf(&b, "| %s | %s | %s / %s | %s | %s | %s | %s | %s | %s |\n", aof, db.workload,
			fnum(db.redisCPUk*1000, 1), fnum(m.redisCPUk*1000, 1), fnum(cpuRatio, 2), verdict(cpuRatio, targetSteadyCPU),
			fnum(db.p99, 2), fnum(m.p99, 2), signed(diff, 2), verdict(diff, targetSteadyP99Ms))
	}
	return b.String()
}

// renderKeyed is the keyed steady row against the plain steady row of the same run and
// variant (delaybridge, 1 replica, NATS source): Redis CPU per message as a ratio, with
// its target. Its lateness includes the time a message waited for its key's predecessor
// (about rate / keys messages per key per second, delays 0..1 s).
func renderKeyed(rows []row) string {
	var b strings.Builder
	for i := range rows {
		k := &rows[i]
		if k.system != "delaybridge" || !strings.HasPrefix(k.workload, "keyed") {
			continue
		}
		plain := steadyRow(rows, "delaybridge", k.aof)
		if plain == nil {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\nOrdering keys: the keyed steady row (every message with one of %d keys) against the plain steady row of the same run "+
				"(1 replica, NATS source); target: Redis CPU per message <= %gx the plain row's. Lateness includes the wait for a key's predecessor:\n\n", benchKeys, targetKeyedCPU)
			fmt.Fprintf(&b, "| AOF | Redis CPU us/msg keyed / plain | ratio | <= %gx | Redis cmds/msg keyed / plain | lateness p50 ms keyed / plain | p99 ms keyed / plain |\n"+
				"|---|---|---|---|---|---|---|\n", targetKeyedCPU)
		}
		ratio := k.redisCPUk / plain.redisCPUk
		fmt.Fprintf(&b, "| %s | %s / %s | %s | %s | %s / %s | %s / %s | %s / %s |\n", k.aof,
			fnum(k.redisCPUk*1000, 1), fnum(plain.redisCPUk*1000, 1), fnum(ratio, 2), verdict(ratio, targetKeyedCPU),
			fnum(k.cmdsMsg, 1), fnum(plain.cmdsMsg, 1), fnum(k.p50, 2), fnum(plain.p50, 2), fnum(k.p99, 2), fnum(plain.p99, 2))
	}
	return b.String()
}

// signed is fnum with a sign on positive figures too (a difference).
func signed(f float64, prec int) string {
	if f > 0 {
		return "+" + fnum(f, prec)
	}
	return fnum(f, prec)
}

// renderIdle is the idle section: per-replica Redis work with no traffic, with the
// target, and the top commands of every row side by side.
func renderIdle(rs []idleResult) string {
	if len(rs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nIdle: R bridge replicas, no traffic, fresh redis-server per row; per replica per second over %.0f s after the warm-up; "+
		"target: Redis commands per second per replica <= %g:\n\n", rs[0].secs, targetIdleCmds)
	fmt.Fprintf(&b, "| replicas | BRIDGE_SHARDS | fleet members | Redis cmds/s per replica | <= %g | scripts/s per replica | reads/s per replica | Redis CPU ms/s (all) | bridge CPU ms/s per replica | notes |\n"+
		"|---|---|---|---|---|---|---|---|---|---|\n", targetIdleCmds)
	for _, r := range rs {
		note := ""
		if r.err != "" {
			note = "error: " + strings.ReplaceAll(r.err, "|", "/")
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.replicas, r.shards, membersLabel(r.members),
			fnum(r.cmds, 1), verdict(r.cmds, targetIdleCmds), fnum(r.scripts, 2), fnum(r.reads, 1), fnum(r.redisCPU, 1), fnum(r.bridgeCPU, 1), note)
	}
	b.WriteString(renderIdleTop(rs))
	return b.String()
}

// renderIdleTop is the idle detail table: the union of every row's top 8 commands, calls
// per second per replica, one column per row.
func renderIdleTop(rs []idleResult) string {
	top := map[string]float64{}
	for _, r := range rs {
		var ks []string
		for k := range r.perCmd {
			ks = append(ks, k)
		}
		slices.SortFunc(ks, func(x, y string) int { return cmpDesc(r.perCmd[x], r.perCmd[y], x, y) })
		for _, k := range ks[:min(8, len(ks))] {
			top[k] = max(top[k], r.perCmd[k])
		}
	}
	var cmds []string
	for k := range top {
		cmds = append(cmds, k)
	}
	if len(cmds) == 0 {
		return ""
	}
	slices.SortFunc(cmds, func(x, y string) int { return cmpDesc(top[x], top[y], x, y) })
	var b strings.Builder
	fmt.Fprintf(&b, "\nIdle, top commands (INFO commandstats; commands called by scripts counted under their own name too), calls per second per replica:\n\n| command |")
	for _, r := range rs {
		fmt.Fprintf(&b, " x%d, %d shards |", r.replicas, r.shards)
	}
	fmt.Fprintf(&b, "\n|---|%s\n", strings.Repeat("---|", len(rs)))
	for _, k := range cmds {
		fmt.Fprintf(&b, "| %s |", strings.ReplaceAll(k, "|", " "))
		for _, r := range rs {
			fmt.Fprintf(&b, " %s |", fnum(r.perCmd[k], 2))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func cmpDesc(a, b float64, ka, kb string) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	default:
		return strings.Compare(ka, kb)
	}
}

// renderCluster is the cluster section: per-master Redis CPU and commands per message,
// and max/min per-master CPU against its target.
func renderCluster(rows []row, perMaster []int) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nRedis Cluster (masters spawned, AOF everysec each, no replicas), 1 bridge with BRIDGE_REDIS_CLUSTER_ADDRS, paced traffic, delays 0..1 s; target: per-master Redis CPU within %gx:\n\n", targetClusterSpread)
	fmt.Fprintf(&b, "| workload | runs | shards per master | Redis CPU us/msg per master | max/min | <= %gx | Redis cmds/msg per master | Redis CPU us/msg (all) | Redis cmds/msg (all) | bridge CPU us/msg | lateness p50 ms | p99 ms | max ms | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", targetClusterSpread)
	for _, r := range rows {
		ratio := math.NaN()
		if len(r.nodeCPUus) > 0 {
			ratio = slices.Max(r.nodeCPUus) / slices.Min(r.nodeCPUus)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.workload, r.runs,
			joinInts(perMaster), joinNums(r.nodeCPUus, 1), fnum(ratio, 2), verdict(ratio, targetClusterSpread), joinNums(r.nodeCmdsMsg, 1),
			fnum(r.redisCPUk*1000, 1), fnum(r.cmdsMsg, 1), fnum(r.workerCPUk*1000, 1), fnum(r.p50, 2), fnum(r.p99, 2), fnum(r.max, 2),
			strings.Join(rowNotes(r), "; "))
	}
	return b.String()
}

func joinNums(xs []float64, prec int) string {
	if len(xs) == 0 {
		return "-"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fnum(x, prec)
	}
	return strings.Join(s, " / ")
}

func joinInts(xs []int) string {
	if len(xs) == 0 {
		return "-"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " / ")
}
