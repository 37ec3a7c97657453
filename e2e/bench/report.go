package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// row is the median over the runs of one (variant, workload).
type row struct {
	result
	runs int
	errs []string
}

func median(xs []float64) float64 {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func key(r result) string {
	return fmt.Sprintf("%s|%d|%s|%s", r.system, r.replicas, r.aof, r.workload)
}

func medians(all []result) []row {
	var order []string
	groups := map[string][]result{}
	for _, r := range all {
		k := key(r)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var rows []row
	for _, k := range order {
		g := groups[k]
		m := medianResult(g)
		m.missing, m.early = 0, 0 // summed over the runs below
		rw := row{result: m, runs: len(g)}
		for _, r := range g {
			rw.missing += r.missing
			rw.early += r.early
			if r.err != "" {
				rw.errs = append(rw.errs, r.err)
			}
		}
		rows = append(rows, rw)
	}
	// release with a backlog relative to the burst on an empty store of the same variant.
	for i := range rows {
		if !strings.Contains(rows[i].workload, "parked") {
			continue
		}
		if b := emptyBurst(rows, rows[i]); b != nil {
			rows[i].releaseVsEmpty = rows[i].release / b.release
		}
	}
	return rows
}

// emptyBurst is the burst row (on an empty store) of the same system, replicas and AOF as
// r, or nil.
func emptyBurst(rows []row, r row) *row {
	for i := range rows {
		b := &rows[i]
		if b.system == r.system && b.replicas == r.replicas && b.aof == r.aof && strings.HasPrefix(b.workload, "burst") {
			return b
		}
	}
	return nil
}

// medianResult is the first result of g with every measured figure replaced by its median
// over g.
func medianResult(g []result) result {
	m := g[0]
	f := func(get func(result) float64) float64 {
		xs := make([]float64, len(g))
		for i, r := range g {
			xs[i] = get(r)
		}
		return median(xs)
	}
	m.ingest = f(func(r result) float64 { return r.ingest })
	m.release = f(func(r result) float64 { return r.release })
	m.p50 = f(func(r result) float64 { return r.p50 })
	m.p99 = f(func(r result) float64 { return r.p99 })
	m.p999 = f(func(r result) float64 { return r.p999 })
	m.max = f(func(r result) float64 { return r.max })
	m.bytesBeyond = f(func(r result) float64 { return r.bytesBeyond })
	m.bytesTomb = f(func(r result) float64 { return r.bytesTomb })
	m.tombs = f(func(r result) float64 { return r.tombs })
	m.redisCPUk = f(func(r result) float64 { return r.redisCPUk })
	m.workerCPUk = f(func(r result) float64 { return r.workerCPUk })
	m.redisUtil = f(func(r result) float64 { return r.redisUtil })
	m.workerUtil = f(func(r result) float64 { return r.workerUtil })
	m.harnessUtil = f(func(r result) float64 { return r.harnessUtil })
	m.releasedIn = f(func(r result) float64 { return r.releasedIn })
	m.forks = f(func(r result) float64 { return r.forks })
	m.relForks = f(func(r result) float64 { return r.relForks })
	m.rewriteWait = f(func(r result) float64 { return r.rewriteWait })
	m.ingRedis = f(func(r result) float64 { return r.ingRedis })
	m.ingWorker = f(func(r result) float64 { return r.ingWorker })
	m.ingHarness = f(func(r result) float64 { return r.ingHarness })
	m.relRedis = f(func(r result) float64 { return r.relRedis })
	m.relWorker = f(func(r result) float64 { return r.relWorker })
	m.relHarness = f(func(r result) float64 { return r.relHarness })
	m.cmdsMsg = f(func(r result) float64 { return r.cmdsMsg })
	m.scriptsMsg = f(func(r result) float64 { return r.scriptsMsg })
	m.readsMsg = f(func(r result) float64 { return r.readsMsg })
	m.ceiling = f(func(r result) float64 { return r.ceiling })
	m.vsCeiling = f(func(r result) float64 { return r.vsCeiling })
	m.relCPUus = f(func(r result) float64 { return r.relCPUus })
	m.parkCPUus = f(func(r result) float64 { return r.parkCPUus })
	m.ceilingCPUus = f(func(r result) float64 { return r.ceilingCPUus })
	m.relVsCeilingCPU = f(func(r result) float64 { return r.relVsCeilingCPU })
	m.peakRSS = f(func(r result) float64 { return r.peakRSS })
	m.nodeCPUus = perIndexMedian(g, func(r result) []float64 { return r.nodeCPUus })
	m.nodeCmdsMsg = perIndexMedian(g, func(r result) []float64 { return r.nodeCmdsMsg })
	m.spread = perIndexMedian(g, func(r result) []float64 { return r.spread })
	return m
}

// perIndexMedian is the median of get(r)[i] over the runs that have index i.
func perIndexMedian(g []result, get func(result) []float64) []float64 {
	var out []float64
	for i := 0; ; i++ {
		var xs []float64
		for _, r := range g {
			if v := get(r); i < len(v) {
				xs = append(xs, v[i])
			}
		}
		if len(xs) == 0 {
			return out
		}
		out = append(out, median(xs))
	}
}

// extraSections are the sections after the main table: fleet, idle, cluster.
type extraSections struct {
	fleet, cluster []row
	idle           []idleResult
	perMaster      []int // cluster: shards per master
	rate           []row // firing control: BRIDGE_TARGET_RATE rows
	recurring      []row // firing control: recurring and one-shot rows
	window         []row // firing control: a burst with and without a spread window
	quota          []row // BRIDGE_TARGET_QUOTA's cost: with and without a pattern
}

func renderReport(rows []row, runs int, p params, took time.Duration, x extraSections) string {
	var b strings.Builder
	if len(rows) == 0 {
		b.WriteString("(no uniform, steady, burst or parked rows)\n")
	}
	fmt.Fprintf(&b, "| system | replicas | AOF | workload | runs | ingest msgs/s | release msgs/s | lateness p50 ms | p99 ms | p99.9 ms | max ms | Redis B/msg beyond 100 B payload | Redis CPU s/1k msgs | bridge CPU s/1k msgs | Redis cmds / scripts / reads per msg | Redis / bridge / harness CPU (cores) | notes |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		rep := fmt.Sprint(r.replicas)
		if r.system == "asynq" {
			rep = fmt.Sprintf("%d workers", asynqConcurrency)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s / %s / %s | %s |\n",
			r.system, rep, r.aof, r.workload, r.runs, fnum(r.ingest, 0), fnum(r.release, 0),
			fnum(r.p50, 2), fnum(r.p99, 2), fnum(r.p999, 2), fnum(r.max, 2), fnum(r.bytesBeyond, 0),
			fnum(r.redisCPUk, 4), fnum(r.workerCPUk, 4), fnum(r.cmdsMsg, 1), fnum(r.scriptsMsg, 2), fnum(r.readsMsg, 2),
			fnum(r.redisUtil, 2), fnum(r.workerUtil, 2), fnum(r.harnessUtil, 2),
			strings.Join(mainNotes(r), "; "))
	}
	b.WriteString(renderAsynqRatios(rows, p))
	b.WriteString(renderCeiling(rows))
	b.WriteString(renderBacklog(rows))
	b.WriteString(renderSteady(rows))
	b.WriteString(renderKeyed(rows))
	b.WriteString(renderFleet(x.fleet))
	b.WriteString(renderIdle(x.idle))
	b.WriteString(renderCluster(x.cluster, x.perMaster))
	b.WriteString(renderFiring(x.rate, x.recurring))
	b.WriteString(renderWindow(x.window))
	b.WriteString(renderQuota(x.quota))
	fmt.Fprintf(&b, "\nMedians of up to %d runs per row (steady, parked, fleet and cluster: at most 2; idle: 1); whole run took %s.\n", runs, took.Round(time.Second))
	return b.String()
}

// mainNotes are the notes column of the main table.
func mainNotes(r row) []string {
	var notes []string
	if !math.IsNaN(r.releasedIn) {
		notes = append(notes, fmt.Sprintf("last released %.2f s after due", r.releasedIn))
	}
	if !math.IsNaN(r.ingRedis) {
		h := func(x float64) string {
			if r.system == "asynq" || r.system == "minimal" {
				return "-"
			}
			return fnum(x, 2)
		}
		notes = append(notes, fmt.Sprintf("cores while parking %s / %s / %s, while releasing %s / %s / %s",
			fnum(r.ingRedis, 2), fnum(r.ingWorker, 2), h(r.ingHarness), fnum(r.relRedis, 2), fnum(r.relWorker, 2), h(r.relHarness)))
	}
	if !math.IsNaN(r.forks) && r.forks > 0 {
		notes = append(notes, fmt.Sprintf("AOF rewrites %s (%s while releasing)", fnum(r.forks, 0), fnum(r.relForks, 0)))
	}
	if !math.IsNaN(r.rewriteWait) {
		notes = append(notes, fmt.Sprintf("burst sent after an AOF rewrite of the backlog (%.1f s)", r.rewriteWait))
	}
	if !math.IsNaN(r.bytesTomb) {
		notes = append(notes, fmt.Sprintf("tombstones %s, Redis %s B each", fnum(r.tombs, 0), fnum(r.bytesTomb, 0)))
	}
	if !math.IsNaN(r.releaseVsEmpty) {
		notes = append(notes, fmt.Sprintf("release vs empty store %.2f", r.releaseVsEmpty))
	}
	if r.system == "asynq" {
		notes = append(notes, "bridge CPU = asynq client+server in harness")
	}
	if r.system == "minimal" {
		notes = append(notes, "minimal store (1 zset + 1 hash); bridge CPU = its worker in harness")
	}
	return append(notes, rowNotes(r)...)
}

// renderAsynqRatios is the table of ratios delaybridge (1 replica, everysec) / asynq, per
// workload.
func renderAsynqRatios(rows []row, p params) string {
	find := func(sys, wprefix string) *row {
		for i := range rows {
			if rows[i].system == sys && rows[i].aof == "everysec" && (sys == "asynq" || rows[i].replicas == 1) &&
				strings.HasPrefix(rows[i].workload, wprefix) {
				return &rows[i]
			}
		}
		return nil
	}
	var ratios strings.Builder
	for _, w := range []string{"uniform", "steady", "burst", ""} {
		prefix := w
		if w == "" {
			prefix = fmt.Sprintf("%dk parked", p.parkedN/1000)
		}
		d, a := find("delaybridge", prefix), find("asynq", prefix)
		if d == nil || a == nil {
			continue
		}
		fmt.Fprintf(&ratios, "| %s | %s | %s | %s | %s | %s | %s |\n", d.workload,
			fnum(d.ingest/a.ingest, 2), fnum(d.release/a.release, 2), fnum(d.p99/a.p99, 3),
			fnum(d.max/a.max, 3), fnum((d.bytesBeyond+payloadSize)/(a.bytesBeyond+payloadSize), 2), fnum(d.redisCPUk/a.redisCPUk, 2))
	}
	if ratios.Len() == 0 {
		return ""
	}
	return "\nRatios delaybridge (1 replica, AOF everysec) / asynq (higher is better for rates, lower for the rest):\n\n" +
		"| workload | ingest | release | lateness p99 | lateness max | Redis bytes per message | Redis CPU per message |\n|---|---|---|---|---|---|---|\n" +
		ratios.String()
}

func machine() string {
	sh := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(out))
	}
	model := "?"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := sh("free", "-h")
	for _, l := range strings.Split(mem, "\n") {
		if strings.HasPrefix(l, "Mem:") {
			mem = strings.Join(strings.Fields(l)[1:2], "")
		}
	}
	return fmt.Sprintf("- date: %s\n- CPU: %s cores (`nproc`), %s\n- memory: %s total (`free -h`)\n- %s\n- %s, nats-server v2.15.2 (embedded), asynq v0.26.0\n- git: %s",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), sh("nproc"), model, mem,
		sh("redis-server", "--version"), runtime.Version(), sh("git", "describe", "--always", "--dirty")) + envLine() + tailsLine()
}

// envLine names -bridge-env's variables, if any, so a report says what it measured.
func envLine() string {
	if len(extraEnv) == 0 {
		return ""
	}
	kv := make([]string, 0, len(extraEnv))
	for k, v := range extraEnv {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return "\n- bridge environment added (`-bridge-env`): `" + strings.Join(kv, " ") + "`"
}

func markdownDoc(table string) string {
	return `# Benchmarks

Generated by ` + "`make bench`" + ` (` + "`go run ./e2e/bench -out docs/benchmarks.md`" + `); do not edit by hand: re-run it.
This run: ` + "`go run ./e2e/bench " + strings.Join(os.Args[1:], " ") + "`" + `.

## Machine

` + machine() + `

## Set-up

` + setupText() + tablesText() + `
## Targets

` + targetsText() + `
## Results

` + table
}

// setupText is the report's description of the servers, messages and measures.
func setupText() string {
	return `- Every row runs on fresh servers: a spawned ` + "`redis-server --save \"\" --appendonly yes --appendfsync <AOF>`" + `,
  an embedded nats-server with JetStream (file storage), streams ` + "`IN`" + ` (` + "`delay.in`" + `, read by the
  bridge's durable consumer) and ` + "`OUT`" + ` (` + "`bench.out.>`" + `, the target: every release is a JetStream
  publish confirmed by a PubAck), and the bridge binary (` + "`go build`" + `, no race detector,
  ` + "`BRIDGE_LOG_LEVEL=warn`" + `). Everything on loopback, on the same cores as the harness.
- Messages: 100 B payload, published with JetStream async publish (4096 in flight) to ` + "`delay.in`" + ` with
  ` + "`x-delay: <ms>`" + ` or ` + "`x-deliver-at: <unix ms>`" + ` and ` + "`x-target: bench.out.w`" + `.
- ingest msgs/s: messages / time from the first publish until the bridge's consumer ack floor covers
  them all (source acked = parked in Redis). asynq: tasks / time until the last ` + "`Enqueue`" + ` returned
  (64 enqueuing goroutines).
- release msgs/s: uniform and steady: arrivals / (last arrival - first arrival) (bounded by the offered
  rate); burst and parked: messages / (last arrival - due time).
- lateness: arrival at a core subscriber on ` + "`bench.out.>`" + ` (asynq: handler start) minus the due time
  (` + "`x-delay-due`" + ` for delaybridge; asynq: the time given to ` + "`ProcessIn`/`ProcessAt`" + `, carried in the payload).
- Redis B/msg beyond payload: (INFO used_memory once all are parked - before) / messages - 100. Measured
  where all messages are parked before any is due (burst, parked).
- tombstones (delaybridge burst rows, notes): once every message of the burst was delivered and acked
  (no entry parked; Redis has deleted the emptied sorted sets and hashes), (INFO used_memory - before the
  burst) / tombstones left (sum of ` + "`SCARD {bench:s}:tn` + `SCARD {bench:s}:to`" + `). Source ids are ` + "`js:IN:<seq>`" + ` (9-12 bytes;
  Kafka ` + "`kafka:delay.in:<partition>:<offset>`" + `, 18-21 bytes).
- CPU per 1000 messages: INFO used_cpu_sys+used_cpu_user (+ the _children pair: AOF rewrites) delta (Redis), /proc/<pid>/stat utime+stime
  (all bridge processes) over the whole workload, divided by messages handled (parked workload: parked +
  burst). "Redis / bridge / harness CPU (cores)": the same deltas divided by wall time; the harness
  process holds the embedded NATS server, the publisher and the subscriber. Burst and parked rows also
  give these per phase in the notes: while parking (first publish until all acked) and while releasing
  (due time until the last arrival); for asynq the bridge figure is its client+server, harness "-".
- Redis cmds / scripts / reads per msg: over the same window as the CPU, divided by the same message count:
  the sum of ` + "`calls`" + ` over every ` + "`cmdstat_*`" + ` line of INFO commandstats (commands that Lua scripts call are
  counted too, so one EVALSHA doing ZADD and HSET is 3), the EVAL/EVALSHA/FCALL calls among them, and
  ` + "`total_reads_processed`" + ` (socket reads: about one per round trip, a pipeline arriving at once is one). The
  harness's own INFO calls are subtracted. (` + "`total_commands_processed`" + ` counts the same as commandstats,
  script-called commands included, so it is not shown.) asynq: the same counters on its redis-server.
- workloads: uniform = N messages with delays uniform in 0..1 s, sent as fast as possible; steady = 5k
  msgs/s paced, delays 0..1 s; burst = N messages with the same ` + "`x-deliver-at`" + ` millisecond, far enough
  ahead that all are parked first; parked = a backlog parked for an hour (memory, ingest into a growing
  store), then an AOF rewrite (BGREWRITEAOF, waited for: a rewrite of the backlog takes a core for
  seconds, and one that Redis starts on its own would otherwise fall on the release or not, by chance),
  then a burst on top of it ("release vs empty store" = its release rate / the burst row's).
- asynq baseline (v0.26.0): same workloads, its own identically configured redis-server, client and server
  in the harness process, ` + "`Concurrency: 64`, `DelayedTaskCheckInterval: 100ms`, `TaskCheckInterval: 10ms`" + `
  (its defaults, 5 s and 1 s, would add seconds of lateness), tasks deleted on success (no retention).
  asynq stores due times in whole seconds, so its tasks can run up to 1 s early (column notes: EARLY).
- minimal store baseline (` + "`-systems minimal`" + `): same workloads but the backlog, AOF everysec; and the
  steady workload again with AOF always when the delaybridge variant x1 always runs (` + "`-variants x1-always`" + `,
  part of the full run), so that each policy has its floor in the same run. Its own identically configured
  redis-server and the same streams; a worker in the harness process reads ` + "`IN`" + ` with
  its own durable consumer, parks what arrived in the last 1 ms in one Lua call (ZADD into one sorted set +
  HSET into one hash, value = target + payload), acks after it, and every 1 ms pops what is due by Redis
  TIME in one Lua call (ZRANGEBYSCORE + ZREM + HMGET + HDEL, up to 1000) and publishes it to the target
  on ` + "`OUT`" + `, waiting for the PubAcks. No shards, tombstones or retries: the floor the steady rows are compared with.
- delaybridge/kafka rows (only with ` + "`-kafka`" + `): the source is an in-process kfake broker (1 broker,
  4 partitions of ` + "`delay.in`" + `, franz-go producer, 1000-record writes, acks=all); records carry
  ` + "`x-target: nats:bench.out.w`" + `; ingest = the bridges' ` + "`delaybridge_messages_in_total{broker=\"kafka\",result=\"parked\"}`" + `.
`
}

// tablesText is the report's description of the tables after the main one (the targets
// are listed by targetsText).
func tablesText() string {
	return `- ceiling table (delaybridge burst rows): after each burst the harness publishes the same number
  of messages straight to the target stream ` + "`OUT`" + ` from one client with JetStream async publish (4096 in flight),
  each a copy of a message the bridge released in that run (its headers and payload, its own ` + "`Nats-Msg-Id`" + `):
  messages / time from the first publish to the last PubAck. release / ceiling is the median of the per-run
  ratios. Bridge CPU per released message: /proc utime+stime of the bridges from the due time to the last
  arrival / messages; per parked message: from the first publish until all were acked / messages. Bridge
  peak RSS: VmHWM of /proc/<pid>/status after the burst (the largest replica). Ceiling harness CPU per message:
  the harness process's utime+stime (embedded NATS server, the publishing client, the arrival subscriber) from
  the ceiling's first publish until its copies arrived / messages: what putting one message on the target
  stream costs this machine in the same run; "released / ceiling CPU" = the bridge's CPU per released message
  / that. The target is on the rate; the CPU figures stand beside each other, without targets of their own.
- backlog table (delaybridge parked rows): the release rate of the burst on top of the backlog beside the
  release rate of the burst row (empty store) of the same run and variant, and their ratio (the main table's
  note "release vs empty store").
- steady tables: the steady rows of delaybridge (1 replica, NATS source, no WAIT), asynq and the minimal
  store side by side per AOF policy (asynq: everysec only), Redis CPU in us per message and lateness; then,
  per AOF policy, delaybridge against the minimal store of the same run and policy: Redis CPU per message
  of both and their ratio, lateness p99 of both and their difference.
- fleet rows (delaybridge only): R bridge replicas (` + "`-fleet-replicas`" + ` 1 and 16; ` + "`-quick`" + `: 1 and 8) on one
  redis-server (AOF everysec), each with GOMAXPROCS=1 (a sidecar with a CPU limit of 1 or less: Go's
  cgroup-aware default) and its own HTTP and API ports, started 8 at a time and all answering ` + "`/readyz`" + ` before
  sending; when the bridge keeps the fleet membership set (` + "`{bench:fleet}:members`" + `), the row waits until it
  has R members, then 1.2 s more ("fleet members" column; "-" = a binary without one). Then JetStream traffic
  paced at 400/s and 5k/s (` + "`-fleet-rates`" + `) for ` + "`-fleet-for`" + ` (12 s), delays uniform 0..1 s, measured from the
  first publish to the last arrival: Redis commands, scripts and reads per message, Redis CPU and bridge CPU
  (sum over all replicas) in us per message, lateness. The table below it (same run) sets, per rate, the row
  with the most replicas against the 1-replica row: Redis commands per message of both, lateness p99 of both
  and the bound made of one replica's p99.
- idle rows: R replicas (1, 8) with ` + "`BRIDGE_SHARDS`" + ` 16 and 1024 (a fresh redis-server per row: the store records
  its shard count), no traffic; after a 5 s warm-up, the commandstats delta over 20 s / seconds / R; the detail
  table gives the top commands of every row (calls per second per replica; script-called commands under
  their own name too), so that the periodic work (health PING, dataset check, head resync, scrapes, heartbeats)
  can be told apart. The target is per replica, with either shard count.
- cluster row: a Redis Cluster of 3 spawned masters (AOF everysec each, slots split evenly, formed with
  CLUSTER ADDSLOTSRANGE / MEET), one bridge with ` + "`BRIDGE_REDIS_CLUSTER_ADDRS`" + ` and ` + "`BRIDGE_SHARDS`" + ` 64
  (` + "`-cluster-shards`" + `; 16 hash tags fall 4/5/7 on 3 masters, 64 fall 21/20/23), 5k/s paced for ` + "`-fleet-for`" + `,
  delays 0..1 s: Redis CPU and commands per message of each master (in slot order) and max/min of the per-master
  CPU.
`
}
