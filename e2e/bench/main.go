// Command bench is delaybridge's end-to-end benchmark (`make bench`).
//
// It spawns its own redis-server (AOF everysec or always; the wait variant adds a replica
// and runs the bridge with BRIDGE_REDIS_MIN_REPLICAS=1), embeds nats-server with
// JetStream, runs the built bridge binary (1 or 3 replicas), drives the workloads through
// JetStream and measures ingest and release rates, lateness, Redis memory and CPU and bridge
// CPU. The same workloads run on github.com/hibiken/asynq (scheduled tasks) on an identically
// configured redis-server as the peer baseline. Every (system, variant, workload, run) gets
// fresh servers, so counters and memory are not polluted by earlier runs.
//
//	go run ./e2e/bench                 # full run (~13 min): prints the table
//	go run ./e2e/bench -quick          # short run (~2 min): x1 everysec and asynq, 1 run, no Kafka
//	go run ./e2e/bench -runs 5 -workloads uniform,burst -out docs/benchmarks.md
//	go run ./e2e/bench -quick -systems delaybridge -variants x1-everysec-wait1   # what WAIT costs
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
	if v.system == "asynq" {
		return fmt.Sprintf("asynq aof=%s", v.aof)
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
	quick := flag.Bool("quick", false, "short run: smaller workloads, 1 run, fewer variants (~1 min)")
	runs := flag.Int("runs", 3, "runs per workload and variant; the table shows medians")
	workloads := flag.String("workloads", "uniform,steady,burst,parked", "comma-separated: uniform, steady, burst, parked")
	systems := flag.String("systems", "delaybridge,asynq", "comma-separated: delaybridge, asynq")
	variants := flag.String("variants", "", "delaybridge variants besides x1 everysec, e.g. x3-everysec,x1-always,x1-everysec-wait1 (wait1: one Redis replica and BRIDGE_REDIS_MIN_REPLICAS=1; default: all three in a full run, none with -quick)")
	out := flag.String("out", "", "also write the Markdown report to this file (e.g. docs/benchmarks.md)")
	bridgeBin := flag.String("bridge", "", "bridge binary (default: go build ./cmd/bridge into a temp dir)")
	parkedN := flag.Int("parked", 1_000_000, "messages parked in the backlog workload")
	withKafka := flag.Bool("kafka", true, "also run the Kafka-source variant (kfake in process; uniform, steady and burst); off with -quick unless given")
	steadyFor := flag.Duration("steady-for", 30*time.Second, "duration of the steady workload")
	flag.StringVar(&profileDir, "profile", "", "write a CPU profile of every bridge process, the first -profile-for of each workload, into this directory")
	flag.DurationVar(&profileFor, "profile-for", 10*time.Second, "length of each -profile CPU profile")
	flag.Parse()

	p := params{uniformN: 100_000, steadyRate: 5000, steadyFor: *steadyFor, burstN: 100_000, parkedN: *parkedN, parkedBurst: 100_000}
	extra := []variant{{"delaybridge", 3, "everysec", false, 0}, {"delaybridge", 1, "always", false, 0}, {"delaybridge", 1, "everysec", false, 1}}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		if !set["runs"] {
			*runs = 1
		}
		if !set["steady-for"] {
			p.steadyFor = 10 * time.Second
		}
		if !set["parked"] {
			p.parkedN = 200_000
		}
		p.uniformN, p.burstN, p.parkedBurst = 50_000, 50_000, 50_000
		extra = nil
		if !set["kafka"] {
			*withKafka = false
		}
	}
	if set["variants"] {
		extra = nil
		for _, s := range splitList(*variants) {
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
			extra = append(extra, variant{"delaybridge", r, a, false, w})
		}
	}
	wl := splitList(*workloads)
	for _, w := range wl {
		if !slices.Contains([]string{"uniform", "steady", "burst", "parked"}, w) {
			fatalf("unknown workload %q", w)
		}
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		fatalf("redis-server not on PATH (apt-get install -y redis-server)")
	}

	bin := *bridgeBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "delaybridge-bench-")
		if err != nil {
			fatalf("%v", err)
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "bridge")
		build := exec.Command("go", "build", "-o", bin, "./cmd/bridge")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fatalf("build bridge (run from the module root): %v", err)
		}
	}

	var vs []variant
	syss := splitList(*systems)
	if slices.Contains(syss, "delaybridge") {
		vs = append(vs, variant{"delaybridge", 1, "everysec", false, 0})
	}
	if slices.Contains(syss, "asynq") {
		vs = append(vs, variant{"asynq", 1, "everysec", false, 0})
	}
	if slices.Contains(syss, "delaybridge") {
		vs = append(vs, extra...)
		if *withKafka {
			vs = append(vs, variant{"delaybridge", 1, "everysec", true, 0})
		}
	}

	started := time.Now()
	var all []result
	for _, v := range vs {
		// The extra variants run the three short workloads only: the backlog one is about
		// memory, which neither replicas nor fsync change.
		for _, w := range wl {
			if v != vs[0] && v.system == "delaybridge" && v != (variant{"delaybridge", 1, "everysec", false, 0}) && w == "parked" {
				continue
			}
			n := *runs
			if w == "parked" || w == "steady" {
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

	rows := medians(all)
	report := renderReport(rows, *runs, p, time.Since(started))
	fmt.Println(report)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(markdownDoc(report)), 0o644); err != nil {
			fatalf("write %s: %v", *out, err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
	}
}

func runOne(bin string, v variant, w string, p params) result {
	capacity := max(p.uniformN, p.burstN, p.parkedBurst, int(p.steadyRate*p.steadyFor.Seconds())) + 1000
	currentVariant = v.String()
	var sys system
	var err error
	if v.system == "asynq" {
		sys, err = startAsynq(v.aof, capacity)
	} else {
		sys, err = startDelaybridge(bin, v.aof, v.replicas, capacity, v.kafka, v.wait)
	}
	if err != nil {
		r := result{system: v.system, workload: w, err: "setup: " + err.Error()}
		return r
	}
	defer sys.close()
	time.Sleep(200 * time.Millisecond) // let start-up settle (consumers, wake-up subscriptions)
	if db, ok := sys.(*dbSystem); ok && profileDir != "" {
		profileSeq++
		for i, b := range db.bridges {
			name := filepath.Join(profileDir, fmt.Sprintf("%02d-%s-%s-bridge%d.pprof", profileSeq, strings.ReplaceAll(v.String(), " ", "_"), w, i))
			go b.cpuProfile(name, profileFor)
		}
	}
	var res result
	switch w {
	case "uniform":
		res = runUniform(sys, p.uniformN)
	case "steady":
		res = runSteady(sys, p.steadyRate, p.steadyFor, 0)
	case "burst":
		res = runBurst(sys, p.burstN, 0, fmt.Sprintf("burst %dk due at once", p.burstN/1000))
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

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func brief(r result) string {
	s := fmt.Sprintf("ingest %s/s release %s/s p50 %s p99 %s max %s ms, B/msg %s, redis %s s/1k, worker %s s/1k",
		fnum(r.ingest, 0), fnum(r.release, 0), fnum(r.p50, 1), fnum(r.p99, 1), fnum(r.max, 1),
		fnum(r.bytesBeyond, 0), fnum(r.redisCPUk, 4), fnum(r.workerCPUk, 4))
	if !math.IsNaN(r.bytesTomb) {
		s += fmt.Sprintf(", tombstones %s x %s B", fnum(r.tombs, 0), fnum(r.bytesTomb, 0))
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
