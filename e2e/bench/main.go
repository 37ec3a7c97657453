// Command bench is delaybridge's end-to-end benchmark (`make bench`).
//
// It spawns its own redis-server (AOF everysec or always; the wait variant adds a replica
// and runs the bridge with BRIDGE_REDIS_MIN_REPLICAS=1), embeds nats-server with
// JetStream, runs the built bridge binary (1 or 3 replicas), drives the workloads through
// JetStream and measures ingest and release rates, lateness, Redis memory and CPU and bridge
// CPU. The same workloads run on github.com/hibiken/asynq (scheduled tasks) on an identically
// configured redis-server as the peer baseline, and on a minimal store (minimal.go: one
// sorted set + one hash, parks batched per 1 ms, pops per 1 ms tick, same JetStream
// streams; not the parked workload; AOF everysec, and AOF always for the steady workload
// when the x1 always variant runs) as the floor the steady rows are measured against. Every delaybridge burst row is followed by its ceiling (ceiling.go: the same
// messages published straight to the target stream from one client, JetStream async
// publish), which the release rate is measured against, with the bridge's CPU
// per released and per parked message. Every (system, variant, workload, run) gets fresh
// servers, so counters and memory are not polluted by earlier runs.
//
//	go run ./e2e/bench                 # full run (~32 min): prints the tables
//	go run ./e2e/bench -quick          # short run (~4 min): x1 everysec and asynq, 1 run, no Kafka, small fleet/idle/cluster rows
//	go run ./e2e/bench -runs 5 -workloads uniform,burst -out docs/benchmarks.md
//	go run ./e2e/bench -quick -systems delaybridge -variants x1-everysec-wait1   # what WAIT costs
//	go run ./e2e/bench -workloads fleet -fleet-replicas 1,8,16 -fleet-for 15s      # the fleet rows
//	go run ./e2e/bench -quick -workloads idle,cluster
//
// The fleet, idle and cluster workloads (delaybridge only, after the others) measure the
// bridge from outside: Redis INFO (commandstats, CPU), arrivals on NATS, /proc CPU.
// fleet: 1 and 16 replicas on one redis-server at paced 400/s and 5k/s, the most replicas
// set against 1 replica; idle: Redis commands per second per idle replica with 16 and 1024
// shards; cluster: one bridge on a 3-master Redis Cluster at 5k/s, per-master CPU.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

type variant struct {
	system   string
	replicas int
	aof      string
	kafka    bool // source is Kafka (kfake) instead of NATS JetStream
	// wait > 0: Redis has one replica and the bridges run with BRIDGE_REDIS_MIN_REPLICAS=wait.
	wait int
}

func (v variant) String() string {
	if v.system == "asynq" || v.system == "minimal" {
		return fmt.Sprintf("%s aof=%s", v.system, v.aof)
	}
	if v.kafka {
		return fmt.Sprintf("delaybridge/kafka x%d aof=%s", v.replicas, v.aof)
	}
	return fmt.Sprintf("delaybridge x%d aof=%s", v.replicas, v.aofLabel())
}

// aofLabel is the AOF column of the report: the fsync policy, and the replica and WAIT of
// a wait variant.
func (v variant) aofLabel() string {
	if v.wait > 0 {
		return fmt.Sprintf("%s, 1 Redis replica, WAIT %d", v.aof, v.wait)
	}
	return v.aof
}

func main() {
	quick := flag.Bool("quick", false, "short run: smaller workloads, 1 run, fewer variants and replicas (~4 min)")
	runs := flag.Int("runs", 3, "runs per workload and variant; the table shows medians")
	workloads := flag.String("workloads", "uniform,steady,keyed,burst,parked,fleet,idle,cluster,rate,recurring,window,quota", "comma-separated: uniform, steady, keyed (steady with ordering keys, delaybridge x1 everysec only), burst, parked, fleet, idle, cluster, rate, recurring, window, quota")
	systems := flag.String("systems", "delaybridge,asynq,minimal", "comma-separated: delaybridge, asynq, minimal (the minimal-store baseline: one sorted set + one hash, see minimal.go)")
	variants := flag.String("variants", "", "delaybridge variants besides x1 everysec, e.g. x3-everysec,x1-always,x1-everysec-wait1 (wait1: one Redis replica and BRIDGE_REDIS_MIN_REPLICAS=1; default: all three in a full run, none with -quick); x1-always also runs the minimal store's steady row with AOF always")
	out := flag.String("out", "", "also write the Markdown report to this file (e.g. docs/benchmarks.md)")
	bridgeBin := flag.String("bridge", "", "bridge binary (default: go build ./cmd/bridge into a temp dir)")
	parkedN := flag.Int("parked", 1_000_000, "messages parked in the backlog workload")
	withKafka := flag.Bool("kafka", true, "also run the Kafka-source variant (kfake in process; uniform, steady and burst); off with -quick unless given")
	steadyFor := flag.Duration("steady-for", 30*time.Second, "duration of the steady workload")
	flag.StringVar(&profileDir, "profile", "", "write a CPU profile of every bridge process, the first -profile-for of each workload, into this directory")
	bridgeEnv := flag.String("bridge-env", "", "comma-separated K=V added to every bridge's environment (experiments; named in the report)")
	flag.BoolVar(&perCommand, "commands", false, "print every row's Redis calls and microseconds per message by command (INFO commandstats) to stderr")
	flag.IntVar(&tailsN, "tails", 0, "attach this many live-event streams (GET /v1/events, read and counted) to the bridges of every delaybridge row: they must not change the row")
	flag.DurationVar(&profileFor, "profile-for", 10*time.Second, "length of each -profile CPU profile")
	fleetParamsOf := fleetFlags()
	flag.Float64Var(&firstIngestEstimate, "ingest-estimate", 8000, "burst and parked: the ingest rate (msgs/s) assumed before one is measured in the run, which sizes the lead before the due time (lower it on a busy machine, where a single run would otherwise fail with \"lead too short\")")
	flag.Parse()
	setExtraEnv(*bridgeEnv)

	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		applyQuick(set)
	}
	p := params{uniformN: 100_000, steadyRate: 5000, steadyFor: *steadyFor, burstN: 100_000, parkedN: *parkedN, parkedBurst: 100_000}
	extra := []variant{{"delaybridge", 3, "everysec", false, 0}, {"delaybridge", 1, "always", false, 0}, {"delaybridge", 1, "everysec", false, 1}}
	if *quick {
		p.uniformN, p.burstN, p.parkedBurst = 50_000, 50_000, 50_000
		extra = nil
	}
	fp := fleetParamsOf(max(1, min(*runs, 2)))
	if set["variants"] {
		extra = parseVariants(*variants)
	}
	wl := workloadList(*workloads)
	if _, err := exec.LookPath("redis-server"); err != nil {
		fatalf("redis-server not on PATH (apt-get install -y redis-server)")
	}
	bin, cleanup := bridgeBinary(*bridgeBin)
	defer cleanup()

	syss := splitList(*systems)
	vs := variantList(syss, extra, *withKafka)
	started := time.Now()
	all := runVariants(bin, vs, wl, *runs, p, started)

	var x extraSections
	if slices.Contains(syss, "delaybridge") {
		x = runFleetSets(bin, wl, fp, started)
	}
	rows := medians(all)
	report := renderReport(rows, *runs, p, time.Since(started), x)
	fmt.Println(report)
	if *out != "" {
		writeDoc(*out, report)
	}
}

// fleetFlags declares the flags of the fleet, idle, cluster, firing and quota workloads;
// after flag.Parse (and -quick), the function it returns builds their fleetParams, with
// runs runs per row.
func fleetFlags() func(runs int) fleetParams {
	fleetRates := flag.String("fleet-rates", "400,5000", "fleet: paced rates (msgs/s), comma-separated")
	fleetReplicas := flag.String("fleet-replicas", "1,16", "fleet: bridge replicas per row, comma-separated (-quick: 1,8); the targets set the most against 1")
	fleetFor := flag.Duration("fleet-for", 12*time.Second, "fleet and cluster: sending time per row (-quick: 5s)")
	idleReplicas := flag.String("idle-replicas", "1,8", "idle: bridge replicas per row, comma-separated (-quick: 1,4)")
	idleShards := flag.String("idle-shards", "16,1024", "idle: BRIDGE_SHARDS per row, comma-separated")
	idleWarmup := flag.Duration("idle-warmup", 5*time.Second, "idle: wait after the replicas are ready before measuring (-quick: 2s)")
	idleFor := flag.Duration("idle-for", 20*time.Second, "idle: measured window (-quick: 5s)")
	clusterShards := flag.Int("cluster-shards", 64, "cluster: BRIDGE_SHARDS (16 hash tags fall 4/5/7 on 3 masters; 64: 21/20/23)")
	clusterRate := flag.Float64("cluster-rate", 5000, "cluster: paced rate, msgs/s")
	rateN := flag.Int("rate-n", 10_000, "rate: messages due at once to the limited target (-quick: 2000)")
	rateLimit := flag.Int("rate-limit", 500, "rate: the target's BRIDGE_TARGET_RATE, msgs/s")
	recurring := flag.Int("recurring", 1000, "recurring: messages every 1s (firings per second) (-quick: 500)")
	quotaN := flag.Int("quota-n", 50_000, "quota: messages parked with and without a BRIDGE_TARGET_QUOTA pattern (-quick: 10000)")
	recurFor := flag.Duration("recurring-for", 15*time.Second, "recurring: measured window, and the one-shot reference's sending time (-quick: 5s)")
	windowN := flag.Int("window-n", 100_000, "window: messages of the burst due at once, with a 10 s x-delay-window and without (-quick: 20000)")
	return func(runs int) fleetParams {
		return fleetParams{rates: floatList(*fleetRates), replicas: intList(*fleetReplicas), dur: *fleetFor, runs: runs,
			idleReplicas: intList(*idleReplicas), idleShards: intList(*idleShards), idleWarmup: *idleWarmup, idleFor: *idleFor,
			clusterMasters: 3, clusterShards: *clusterShards, clusterRate: *clusterRate,
			firing: firingParams{rateN: *rateN, rateLimit: *rateLimit, replicas: []int{1, 4}, recurring: *recurring, recurFor: *recurFor, windowN: *windowN},
			quotaN: *quotaN}
	}
}

// workloadList reads -workloads.
func workloadList(s string) []string {
	wl := splitList(s)
	for _, w := range wl {
		if !slices.Contains([]string{"uniform", "steady", "keyed", "burst", "parked", "fleet", "idle", "cluster", "rate", "recurring", "window", "quota"}, w) {
			fatalf("unknown workload %q", w)
		}
	}
	return wl
}

// writeDoc writes the Markdown document of report to path.
func writeDoc(path, report string) {
	if err := os.WriteFile(path, []byte(markdownDoc(report)), 0o644); err != nil {
		fatalf("write %s: %v", path, err)
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", path)
}

// bridgeBinary is bin, or when bin is empty a bridge built from ./cmd/bridge into a
// temporary directory, which cleanup removes.
func bridgeBinary(bin string) (_ string, cleanup func()) {
	if bin != "" {
		return bin, func() {}
	}
	dir, err := os.MkdirTemp("", "delaybridge-bench-")
	if err != nil {
		fatalf("%v", err)
	}
	bin = filepath.Join(dir, "bridge")
	build := exec.Command("go", "build", "-o", bin, "./cmd/bridge")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		fatalf("build bridge (run from the module root): %v", err)
	}
	return bin, func() { os.RemoveAll(dir) }
}

// quickDefaults are the flag values of -quick, for the flags not given.
var quickDefaults = [][2]string{
	{"runs", "1"}, {"steady-for", "10s"}, {"parked", "200000"}, {"kafka", "false"},
	{"fleet-replicas", "1,8"}, {"fleet-for", "5s"}, {"idle-replicas", "1,4"}, {"idle-warmup", "2s"}, {"idle-for", "5s"},
	{"rate-n", "2000"}, {"recurring", "500"}, {"recurring-for", "5s"}, {"window-n", "20000"}, {"quota-n", "10000"},
}

// applyQuick sets the quickDefaults of the flags not in set (the flags given).
func applyQuick(set map[string]bool) {
	for _, kv := range quickDefaults {
		if set[kv[0]] {
			continue
		}
		if err := flag.Set(kv[0], kv[1]); err != nil {
			fatalf("-quick: %s=%s: %v", kv[0], kv[1], err)
		}
	}
}

// baseVariant is the variant every comparison starts from: delaybridge, 1 replica, AOF
// everysec, NATS source, no WAIT.
var baseVariant = variant{"delaybridge", 1, "everysec", false, 0}

// parseVariants reads -variants: e.g. x3-everysec, x1-always, x1-everysec-wait1.
func parseVariants(list string) []variant {
	var out []variant
	for _, s := range splitList(list) {
		var r, w int
		var a string
		spec, waitSpec, hasWait := strings.Cut(s, "-wait")
		if hasWait {
			if _, err := fmt.Sscanf(waitSpec, "%d", &w); err != nil || w != 1 {
				fatalf("bad variant %q (the wait variant has one replica: -wait1)", s)
			}
		}
		if _, err := fmt.Sscanf(strings.Replace(spec, "-", " ", 1), "x%d %s", &r, &a); err != nil || (a != "everysec" && a != "always") || r < 1 {
			fatalf("bad variant %q (want e.g. x3-everysec or x1-everysec-wait1)", s)
		}
		out = append(out, variant{"delaybridge", r, a, false, w})
	}
	return out
}

// variantList is the variants to run, in order, for the systems syss and the delaybridge
// variants extra. With the minimal store and the x1 always variant among extra, the
// minimal store runs with AOF always too (steady only): the always row's own baseline.
func variantList(syss []string, extra []variant, withKafka bool) []variant {
	var vs []variant
	db := slices.Contains(syss, "delaybridge")
	if db {
		vs = append(vs, baseVariant)
	}
	if slices.Contains(syss, "asynq") {
		vs = append(vs, variant{"asynq", 1, "everysec", false, 0})
	}
	if slices.Contains(syss, "minimal") {
		vs = append(vs, variant{"minimal", 1, "everysec", false, 0})
	}
	if db {
		vs = append(vs, extra...)
	}
	if slices.Contains(syss, "minimal") && slices.Contains(extra, variant{"delaybridge", 1, "always", false, 0}) {
		vs = append(vs, variant{"minimal", 1, "always", false, 0})
	}
	if db && withKafka {
		vs = append(vs, variant{"delaybridge", 1, "everysec", true, 0})
	}
	return vs
}

// runsWorkload reports whether variant v runs workload w in the per-variant loop (the fleet
// workloads run once, later). first is the first variant of the run.
func runsWorkload(v, first variant, w string) bool {
	switch {
	case slices.Contains(fleetWorkloads, w):
		return false
	case v.system == "minimal" && w == "parked":
		return false // a baseline for steady load (and burst memory), not for the backlog
	case v.system == "minimal" && v.aof == "always":
		return w == "steady" // the always row's baseline: steady only
	case w == "keyed":
		return v == baseVariant // beside the plain steady row of the same variant
	case v.system == "delaybridge" && w == "parked":
		// The extra variants run the short workloads only: the backlog one is about
		// memory, which neither replicas nor fsync change.
		return v == first || v == baseVariant
	}
	return true
}

// runVariants runs every workload of wl that each variant of vs runs, runs times (the long
// ones at most twice), and returns the results in order.
func runVariants(bin string, vs []variant, wl []string, runs int, p params, started time.Time) []result {
	var all []result
	for _, v := range vs {
		for _, w := range wl {
			if !runsWorkload(v, vs[0], w) {
				continue
			}
			n := runs
			if w == "parked" || w == "steady" || w == "keyed" {
				n = max(1, min(n, 2)) // the long ones: at most 2 runs
			}
			for run := range n {
				res := runOne(bin, v, w, p)
				res.replicas, res.aof = v.replicas, v.aofLabel()
				fmt.Fprintf(os.Stderr, "[%s] %-28s %-26s run %d/%d: %s\n", time.Since(started).Round(time.Second), v, res.workload, run+1, n, brief(res))
				all = append(all, res)
			}
		}
	}
	return all
}

func runOne(bin string, v variant, w string, p params) result {
	capacity := max(p.uniformN, p.burstN, p.parkedBurst, int(p.steadyRate*p.steadyFor.Seconds())) + 1000
	currentVariant = v.String()
	var sys system
	var err error
	switch v.system {
	case "asynq":
		sys, err = startAsynq(v.aof, capacity)
	case "minimal":
		sys, err = startMinimal(v.aof, capacity)
	default:
		sys, err = startDelaybridge(bin, dbOpts{fsync: v.aof, replicas: v.replicas, capacity: capacity, kafka: v.kafka, wait: v.wait})
	}
	if err != nil {
		r := result{system: v.system, workload: w, err: "setup: " + err.Error()}
		return r
	}
	defer sys.close()
	time.Sleep(200 * time.Millisecond) // let start-up settle (consumers, wake-up subscriptions)
	if db, ok := sys.(*dbSystem); ok {
		profileBridges(db, v.String(), w)
		if tailsN > 0 {
			tr := attachTails(db, tailsN)
			defer tr.stop(v.String() + " " + w)
		}
	}
	var res result
	switch w {
	case "uniform":
		res = runUniform(sys, p.uniformN)
	case "steady":
		res = runSteady(sys, p.steadyRate, p.steadyFor, 0)
	case "keyed":
		res = runKeyed(sys, p.steadyRate, p.steadyFor, benchKeys)
	case "burst":
		res = runBurst(sys, p.burstN, 0, fmt.Sprintf("burst %dk due at once", p.burstN/1000))
		withCeiling(sys, &res)
	case "parked":
		res = runParked(sys, p.parkedN, p.parkedBurst)
	}
	if res.err != "" {
		if db, ok := sys.(*dbSystem); ok {
			for i, b := range db.bridges {
				if out := strings.TrimSpace(b.out.String()); out != "" {
					fmt.Fprintf(os.Stderr, "bridge %d output (tail):\n%s\n", i, tail(out, 2000))
				}
			}
		}
	}
	runtime.GC()
	return res
}

// fleetWorkloads run once on delaybridge (not per variant, not on asynq).
var fleetWorkloads = []string{"fleet", "idle", "cluster", "rate", "recurring", "window", "quota"}

// runFleetSets runs the fleet, idle and cluster workloads that wl names.
func runFleetSets(bin string, wl []string, fp fleetParams, started time.Time) extraSections {
	var x extraSections
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "[%s] "+format+"\n", append([]any{time.Since(started).Round(time.Second)}, a...)...)
	}
	if slices.Contains(wl, "fleet") {
		var all []result
		for _, rate := range fp.rates {
			for _, r := range fp.replicas {
				for run := range fp.runs {
					res := runFleet(bin, rate, r, fp.dur)
					logf("delaybridge x%-3d fleet %-22s run %d/%d: %s", r, res.workload, run+1, fp.runs, brief(res))
					all = append(all, res)
					runtime.GC()
				}
			}
		}
		x.fleet = medians(all)
	}
	if slices.Contains(wl, "idle") {
		for _, sh := range fp.idleShards {
			for _, r := range fp.idleReplicas {
				res := runIdle(bin, r, sh, fp.idleWarmup, fp.idleFor)
				logf("delaybridge x%-3d idle, %d shards: %.1f Redis cmds/s per replica, %.2f scripts/s, Redis CPU %.1f ms/s %s",
					r, sh, res.cmds, res.scripts, res.redisCPU, res.err)
				x.idle = append(x.idle, res)
			}
		}
	}
	if slices.Contains(wl, "cluster") {
		var all []result
		for run := range fp.runs {
			res, perMaster := runCluster(bin, fp.clusterMasters, fp.clusterShards, fp.clusterRate, fp.dur)
			if perMaster != nil {
				x.perMaster = perMaster
			}
			logf("delaybridge x1 %s run %d/%d: %s; per master CPU us/msg %s, cmds/msg %s", res.workload, run+1, fp.runs, brief(res),
				joinNums(res.nodeCPUus, 1), joinNums(res.nodeCmdsMsg, 1))
			all = append(all, res)
			runtime.GC()
		}
		x.cluster = medians(all)
	}
	x.rate, x.recurring = runFiringSets(bin, wl, fp.firing, fp.runs, logf)
	if slices.Contains(wl, "window") {
		x.window = runWindowSet(bin, fp.firing.windowN, fp.runs, logf)
	}
	if slices.Contains(wl, "quota") {
		var all []result
		for run := range max(fp.runs, 3) { // alternating: without, with, without, ...
			for _, with := range []bool{false, true} {
				park := runQuotaRow(bin, fp.quotaN, with)
				logf("delaybridge x1 %s run %d: %s", park.workload, run+1, brief(park))
				all = append(all, park)
				runtime.GC()
			}
		}
		x.quota = medians(all)
	}
	return x
}

// runFiringSets runs the rate and recurring workloads that wl names.
func runFiringSets(bin string, wl []string, f firingParams, runs int, logf func(string, ...any)) (rate, recurring []row) {
	if slices.Contains(wl, "rate") {
		var all []result
		for _, r := range f.replicas {
			for run := range runs {
				res := runRateRow(bin, f.rateN, f.rateLimit, r)
				logf("delaybridge x%-3d %s run %d/%d: %s", r, res.workload, run+1, runs, brief(res))
				all = append(all, res)
				runtime.GC()
			}
		}
		rate = medians(all)
	}
	if slices.Contains(wl, "recurring") {
		var all []result
		for run := range runs {
			rec, one := runRecurringRow(bin, f.recurring, f.recurFor)
			logf("delaybridge x1 %s run %d/%d: %s", rec.workload, run+1, runs, brief(rec))
			logf("delaybridge x1 %s run %d/%d: %s", one.workload, run+1, runs, brief(one))
			all = append(all, rec, one)
			runtime.GC()
		}
		recurring = medians(all)
	}
	return rate, recurring
}

func intList(s string) []int {
	var out []int
	for _, f := range splitList(s) {
		var n int
		if _, err := fmt.Sscanf(f, "%d", &n); err != nil || n < 1 {
			fatalf("bad count %q in %q", f, s)
		}
		out = append(out, n)
	}
	return out
}

func floatList(s string) []float64 {
	var out []float64
	for _, f := range splitList(s) {
		var x float64
		if _, err := fmt.Sscanf(f, "%g", &x); err != nil || x <= 0 {
			fatalf("bad rate %q in %q", f, s)
		}
		out = append(out, x)
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func brief(r result) string {
	s := fmt.Sprintf("ingest %s/s release %s/s p50 %s p99 %s max %s ms, B/msg %s, redis %s s/1k, worker %s s/1k, redis cmds %s scripts %s reads %s /msg",
		fnum(r.ingest, 0), fnum(r.release, 0), fnum(r.p50, 1), fnum(r.p99, 1), fnum(r.max, 1),
		fnum(r.bytesBeyond, 0), fnum(r.redisCPUk, 4), fnum(r.workerCPUk, 4), fnum(r.cmdsMsg, 1), fnum(r.scriptsMsg, 2), fnum(r.readsMsg, 2))
	if !math.IsNaN(r.bytesTomb) {
		s += fmt.Sprintf(", tombstones %s x %s B", fnum(r.tombs, 0), fnum(r.bytesTomb, 0))
	}
	if !math.IsNaN(r.ceiling) {
		s += fmt.Sprintf(", ceiling %s/s, release/ceiling %s, bridge us per released %s per parked %s, ceiling harness us %s, bridge peak RSS %s MiB",
			fnum(r.ceiling, 0), fnum(r.vsCeiling, 2), fnum(r.relCPUus, 1), fnum(r.parkCPUus, 1), fnum(r.ceilingCPUus, 1), fnum(r.peakRSS, 0))
	}
	if r.err != "" {
		s += " ERROR: " + r.err
	}
	if r.missing != 0 || r.early != 0 {
		s += fmt.Sprintf(" missing %d early %d", r.missing, r.early)
	}
	return s
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
	os.Exit(1)
}

func fnum(f float64, prec int) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, f)
}

// profileBridges starts, with -profile, a CPU profile of every bridge of s for the first
// -profile-for of a workload (in the background).
func profileBridges(s *dbSystem, variant, workload string) {
	if profileDir == "" {
		return
	}
	profileSeq++
	for i, b := range s.bridges {
		clean := strings.NewReplacer(" ", "_", "/", "_")
		name := filepath.Join(profileDir, fmt.Sprintf("%02d-%s-%s-bridge%d.pprof", profileSeq,
			clean.Replace(variant), clean.Replace(workload), i))
		go b.cpuProfile(name, profileFor)
	}
}

// setExtraEnv sets extraEnv from -bridge-env, or exits with status 2.
func setExtraEnv(list string) {
	var err error
	if extraEnv, err = parseEnvList(list); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -bridge-env:", err)
		os.Exit(2)
	}
}

// parseEnvList reads -bridge-env: comma-separated K=V.
func parseEnvList(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want K=V", kv)
		}
		out[k] = v
	}
	return out, nil
}
