package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

const payloadSize = 100

// sched is when one message is due: relative (delay from the moment it is sent) or absolute.
type sched struct {
	delay time.Duration
	at    time.Time
	abs   bool
	every string // x-delay-every (delaybridge only): a recurring message
	// window is x-delay-window (delaybridge only): delivered at a time drawn in
	// [due, due + window].
	window string
	// key is x-delay-ordering-key (delaybridge only).
	key string
}

// system is delaybridge (bridge processes + NATS) or asynq, on a spawned Redis.
type system interface {
	name() string
	// send sends n messages, message i scheduled by gen(i); rate > 0 paces them (msgs/s).
	// It returns when the client has handed off all of them.
	send(n int, gen func(i int) sched, rate float64) error
	// waitIngested waits until the source has acknowledged total messages (cumulative over
	// the life of the system) and returns the moment it saw it.
	waitIngested(total int, timeout time.Duration) (time.Time, error)
	rec() *recorder
	// redisNodes are the Redis servers the system writes to (one, or a cluster's masters);
	// the counters are summed over them.
	redisNodes() []*redisProc
	// workerCPU is the CPU seconds of the delaying component: the bridge processes, or for
	// asynq this harness process (its client and server run here).
	workerCPU() float64
	close()
}

// recorder collects arrivals: lateness (arrival minus due) and first/last arrival.
type recorder struct {
	late  []int64 // ns
	n     atomic.Int64
	first atomic.Int64 // unix ns
	last  atomic.Int64
	early atomic.Int64
	bad   atomic.Int64
	// spreadFrom (unix ns, 0: off) counts arrivals per second from it into spread (the
	// window row: arrivals per second of the window; the last slot takes all later ones).
	spreadFrom atomic.Int64
	spread     [spreadSlots]atomic.Int64
}

// spreadSlots is the seconds recorder.spread counts.
const spreadSlots = 64

func newRecorder(capacity int) *recorder { return &recorder{late: make([]int64, capacity)} }

func (r *recorder) reset() {
	r.n.Store(0)
	r.first.Store(0)
	r.last.Store(0)
	r.early.Store(0)
	r.bad.Store(0)
	r.spreadFrom.Store(0)
	for i := range r.spread {
		r.spread[i].Store(0)
	}
}

// arrive records one arrival at now (unix ns) of a message due at dueNs. Safe for
// concurrent use.
func (r *recorder) arrive(now, dueNs int64) {
	i := r.n.Add(1) - 1
	if i == 0 {
		r.first.Store(now)
	}
	for {
		l := r.last.Load()
		if now <= l || r.last.CompareAndSwap(l, now) {
			break
		}
	}
	d := now - dueNs
	if d < 0 {
		r.early.Add(1)
	}
	if from := r.spreadFrom.Load(); from > 0 && now >= from {
		r.spread[min((now-from)/1e9, spreadSlots-1)].Add(1)
	}
	if int(i) < len(r.late) {
		r.late[i] = d
	}
}

// waitArrivals waits until n messages arrived, or nothing arrived for stall, or deadline.
func (r *recorder) waitArrivals(n int, deadline time.Time, stall time.Duration) error {
	lastN, lastChange := r.n.Load(), time.Now()
	for {
		c := r.n.Load()
		if c >= int64(n) {
			return nil
		}
		if c != lastN {
			lastN, lastChange = c, time.Now()
		}
		if time.Now().After(deadline) || time.Since(lastChange) > stall {
			return fmt.Errorf("%d of %d messages arrived", c, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// result is one measured run of one workload; NaN = not measured.
type result struct {
	system, workload, aof string
	replicas              int
	n                     int     // messages that were meant to be released
	ingest, release       float64 // msgs/s
	p50, p99, p999, max   float64 // ms
	bytesBeyond           float64 // Redis bytes per parked message beyond the payload
	bytesTomb             float64 // burst: Redis bytes per tombstone left by the delivered messages
	tombs                 float64 // burst: tombstones counted for bytesTomb
	redisCPUk, workerCPUk float64 // CPU seconds per 1000 messages handled
	redisUtil, workerUtil float64 // fraction of one core over the workload
	harnessUtil           float64
	// burst and parked: CPU (cores) of Redis, bridges, harness while parking (first publish
	// until all acked) and while releasing (due time until the last arrival).
	ingRedis, ingWorker, ingHarness float64
	relRedis, relWorker, relHarness float64
	forks, relForks                 float64 // AOF rewrites over the workload, and while releasing
	rewriteWait                     float64 // parked: seconds waited for an AOF rewrite to end before the burst
	// Redis commands per message handled (INFO commandstats calls, Lua-called commands
	// included), scripts (EVAL/EVALSHA/FCALL) per message, socket reads per message
	// (total_reads_processed: about the round trips), over the same window as the CPU.
	cmdsMsg, scriptsMsg, readsMsg float64
	// Per Redis node (a cluster's masters, in slot order): CPU us per message, commands
	// per message.
	nodeCPUus, nodeCmdsMsg []float64
	// window row: arrivals in each second of the window, then all after it.
	spread []float64
	// fleet rows: the offered rate, and the fleet members seen before sending (-1: the
	// binary keeps no membership key).
	rate           float64
	members        int
	releasedIn     float64 // burst: seconds from due to the last arrival
	releaseVsEmpty float64 // parked: release rate / release rate of the burst on an empty store
	// burst (delaybridge): the JetStream async publish ceiling of the same run (msgs/s, see
	// ceiling.go), release / ceiling, and the bridge CPU (all replicas, /proc utime+stime)
	// in us per released message (due time until the last arrival) and per parked one
	// (first publish until all acked).
	ceiling, vsCeiling, relCPUus, parkCPUus float64
	// burst (delaybridge): the harness's CPU per ceiling message (us; see ceiling), and the
	// bridge's CPU per released message / that: a yardstick of the same run and machine.
	ceilingCPUus, relVsCeilingCPU float64
	peakRSS                       float64 // burst (delaybridge): the largest bridge's peak RSS (VmHWM), MiB
	missing, early                int
	err                           string
}

func nan() float64 { return math.NaN() }

func newResult(sys system, w string) result { return blankResult(sys.name(), w) }

// blankResult is a result of system (a name) and workload w with nothing measured.
func blankResult(system, w string) result {
	return result{system: system, workload: w, ingest: nan(), release: nan(), p50: nan(), p99: nan(),
		p999: nan(), max: nan(), bytesBeyond: nan(), bytesTomb: nan(), tombs: nan(), redisCPUk: nan(), workerCPUk: nan(), redisUtil: nan(),
		workerUtil: nan(), harnessUtil: nan(), releasedIn: nan(), releaseVsEmpty: nan(),
		ingRedis: nan(), ingWorker: nan(), ingHarness: nan(), relRedis: nan(), relWorker: nan(), relHarness: nan(),
		forks: nan(), relForks: nan(), rewriteWait: nan(), cmdsMsg: nan(), scriptsMsg: nan(), readsMsg: nan(), rate: nan(),
		ceiling: nan(), vsCeiling: nan(), relCPUus: nan(), parkCPUus: nan(), ceilingCPUus: nan(), relVsCeilingCPU: nan(), peakRSS: nan()}
}

func (res *result) lateness(r *recorder) {
	n := min(int(r.n.Load()), len(r.late))
	if n == 0 {
		return
	}
	l := slices.Clone(r.late[:n])
	slices.Sort(l)
	pct := func(p float64) float64 {
		i := int(math.Ceil(float64(n)*p)) - 1
		return float64(l[max(0, min(i, n-1))]) / 1e6
	}
	res.p50, res.p99, res.p999, res.max = pct(0.50), pct(0.99), pct(0.999), float64(l[n-1])/1e6
	res.early = int(r.early.Load())
}

// params sizes the workloads.
type params struct {
	uniformN    int
	steadyRate  float64
	steadyFor   time.Duration
	burstN      int
	parkedN     int
	parkedBurst int
}

// ingestEstimate (msgs/s, per system name) sizes the lead time of absolute-due workloads so
// that ingest finishes before the due time; updated with every measured ingest rate.
var ingestEstimate = map[string]float64{}

// currentVariant keys ingestEstimate (AOF always ingests slower than everysec).
var currentVariant string

// firstIngestEstimate is -ingest-estimate: the estimate before the run measured one.
var firstIngestEstimate = 8000.0

// Set by -profile and -profile-for; profileSeq numbers the profiled runs. perCommand is
// -commands. extraEnv is -bridge-env: variables added to every bridge's environment
// (experiments, e.g. BRIDGE_SHARDS=4), named in the report's set-up.
var (
	extraEnv   map[string]string
	perCommand bool
	profileDir string
	profileFor time.Duration
	profileSeq int
)

func leadFor(sys system, n int) time.Duration {
	est := ingestEstimate[currentVariant]
	if est <= 0 {
		est = firstIngestEstimate
	}
	return time.Duration((1.4*float64(n)/est + 2) * float64(time.Second))
}

func noteIngest(sys system, rate float64) {
	if rate > 0 && !math.IsNaN(rate) {
		if old := ingestEstimate[currentVariant]; old == 0 || rate < old {
			ingestEstimate[currentVariant] = rate
		}
	}
}

// measure wraps a workload body with the CPU and Redis counters.
type counters struct {
	t      time.Time
	redis  redisStats   // summed over the nodes
	nodes  []redisStats // per node
	worker float64
	self   float64
}

func snap(sys system) counters {
	c := counters{t: time.Now()}
	for _, n := range sys.redisNodes() {
		st := n.stats()
		c.nodes = append(c.nodes, st)
		c.redis = c.redis.add(st)
	}
	c.worker, c.self = sys.workerCPU(), selfCPU()
	return c
}

// scriptCalls is the number of script invocations among the commands of a commandstats
// delta.
func scriptCalls(cmds map[string]int64) int64 {
	var n int64
	for _, k := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"} {
		n += cmds[k]
	}
	return n
}

func (res *result) cpu(a, b counters, handled int) {
	wall := b.t.Sub(a.t).Seconds()
	rc, wc, hc := b.redis.cpu-a.redis.cpu, b.worker-a.worker, b.self-a.self
	res.redisCPUk = rc / float64(handled) * 1000
	res.workerCPUk = wc / float64(handled) * 1000
	res.redisUtil, res.workerUtil, res.harnessUtil = rc/wall, wc/wall, hc/wall
	calls, reads, cmds := b.redis.sub(a.redis)
	res.cmdsMsg, res.readsMsg = float64(calls)/float64(handled), float64(reads)/float64(handled)
	res.scriptsMsg = float64(scriptCalls(cmds)) / float64(handled)
	if perCommand {
		printPerCommand(res, cmds, b.redis.usecSince(a.redis), handled)
	}
	if len(a.nodes) > 1 && len(a.nodes) == len(b.nodes) {
		res.nodeCPUus, res.nodeCmdsMsg = nil, nil
		for i := range a.nodes {
			c, _, _ := b.nodes[i].sub(a.nodes[i])
			res.nodeCPUus = append(res.nodeCPUus, (b.nodes[i].cpu-a.nodes[i].cpu)/float64(handled)*1e6)
			res.nodeCmdsMsg = append(res.nodeCmdsMsg, float64(c)/float64(handled))
		}
	}
	if res.system == "asynq" || res.system == "minimal" { // its worker is this process: do not count it twice
		res.harnessUtil = nan()
	}
}

// utils is the CPU (cores) of Redis, the worker and the harness between a and b.
func utils(a, b counters) (float64, float64, float64) {
	wall := b.t.Sub(a.t).Seconds()
	return (b.redis.cpu - a.redis.cpu) / wall, (b.worker - a.worker) / wall, (b.self - a.self) / wall
}

func uniformDelay(int) sched { return sched{delay: time.Duration(rand.IntN(1001)) * time.Millisecond} }

// runUniform: n messages with delays uniform in 0..1 s, sent as fast as the source takes them.
func runUniform(sys system, n int) result {
	res := newResult(sys, "uniform 0..1s")
	res.n = n
	r := sys.rec()
	r.reset()
	c0 := snap(sys)
	if err := sys.send(n, uniformDelay, 0); err != nil {
		res.err = err.Error()
		return res
	}
	tIng, err := sys.waitIngested(n, 5*time.Minute)
	if err != nil {
		res.err = err.Error()
		return res
	}
	res.ingest = float64(n) / tIng.Sub(c0.t).Seconds()
	noteIngest(sys, res.ingest)
	if err := r.waitArrivals(n, time.Now().Add(5*time.Minute), 20*time.Second); err != nil {
		res.err = err.Error()
	}
	c1 := snap(sys)
	// release: arrivals per second between the first and the last arrival (bounded by ingest here).
	res.release = float64(r.n.Load()) / (float64(r.last.Load()-r.first.Load()) / 1e9)
	res.missing = n - int(r.n.Load())
	res.lateness(r)
	res.cpu(c0, c1, n)
	return res
}

// runSteady: rate msgs/s for d, delays uniform in 0..1 s.
func runSteady(sys system, rate float64, d time.Duration, base int) result {
	return runPaced(sys, fmt.Sprintf("steady %.0f/s %s", rate, d), rate, d, base, uniformDelay)
}

// runKeyed is runSteady with an ordering key on every message, message i's
// "key-<i mod keys>": keys chains of about rate/keys messages per second each, whose
// messages often wait for their predecessor (delays 0..1 s). The label does not start
// with "steady" (steadyRow).
func runKeyed(sys system, rate float64, d time.Duration, keys int) result {
	gen := func(i int) sched {
		sc := uniformDelay(i)
		sc.key = "key-" + strconv.Itoa(i%keys)
		return sc
	}
	return runPaced(sys, fmt.Sprintf("keyed steady %.0f/s %s, %d ordering keys", rate, d, keys), rate, d, 0, gen)
}

// runPaced sends rate msgs/s for d as gen makes them and measures the row label.
func runPaced(sys system, label string, rate float64, d time.Duration, base int, gen func(int) sched) result {
	res := newResult(sys, label)
	n := int(rate * d.Seconds())
	res.n = n
	r := sys.rec()
	r.reset()
	c0 := snap(sys)
	if err := sys.send(n, gen, rate); err != nil {
		res.err = err.Error()
		return res
	}
	tIng, err := sys.waitIngested(base+n, 5*time.Minute)
	if err != nil {
		res.err = err.Error()
		return res
	}
	res.ingest = float64(n) / tIng.Sub(c0.t).Seconds()
	if err := r.waitArrivals(n, time.Now().Add(2*time.Minute), 20*time.Second); err != nil {
		res.err = err.Error()
	}
	c1 := snap(sys)
	res.release = float64(r.n.Load()) / (float64(r.last.Load()-r.first.Load()) / 1e9)
	res.missing = n - int(r.n.Load())
	res.lateness(r)
	res.cpu(c0, c1, n)
	return res
}

// runBurst: n messages all due at the same millisecond, far enough ahead that all are
// parked before it. base is the count the source has already acknowledged.
func runBurst(sys system, n, base int, label string) result {
	res := newResult(sys, label)
	res.n = n
	r := sys.rec()
	r.reset()
	c0 := snap(sys)
	due := time.UnixMilli(time.Now().Add(leadFor(sys, n)).UnixMilli())
	if err := sys.send(n, func(int) sched { return sched{at: due, abs: true} }, 0); err != nil {
		res.err = err.Error()
		return res
	}
	tIng, err := sys.waitIngested(base+n, 5*time.Minute)
	if err != nil {
		res.err = err.Error()
		return res
	}
	res.ingest = float64(n) / tIng.Sub(c0.t).Seconds()
	noteIngest(sys, res.ingest)
	mid := snap(sys)
	res.ingRedis, res.ingWorker, res.ingHarness = utils(c0, mid)
	if tIng.Before(due) {
		res.bytesBeyond = float64(mid.redis.usedMemory-c0.redis.usedMemory)/float64(n) - payloadSize
	} else {
		res.err = fmt.Sprintf("ingest finished %s after the due time (lead too short)", tIng.Sub(due).Round(time.Millisecond))
	}
	if got := r.n.Load(); got > 0 && r.first.Load() < due.UnixNano() {
		res.err = fmt.Sprintf("%d arrived before due", got)
	}
	time.Sleep(time.Until(due))
	cDue := snap(sys)
	if err := r.waitArrivals(n, due.Add(5*time.Minute), 20*time.Second); err != nil {
		res.err = err.Error()
	}
	c1 := snap(sys)
	// Tombstones (delaybridge, burst on an empty store): every delivered message left one.
	if db, ok := sys.(*dbSystem); ok && base == 0 && res.err == "" {
		if n, per, err := db.tombstoneBytes(c0.redis.usedMemory); err != nil {
			res.err = "tombstones: " + err.Error()
		} else {
			res.tombs, res.bytesTomb = float64(n), per
		}
	}
	res.relRedis, res.relWorker, res.relHarness = utils(cDue, c1)
	res.parkCPUus = (mid.worker - c0.worker) / float64(n) * 1e6
	res.relCPUus = (c1.worker - cDue.worker) / float64(n) * 1e6
	res.forks, res.relForks = float64(c1.redis.forks-c0.redis.forks), float64(c1.redis.forks-cDue.redis.forks)
	from := max(due.UnixNano(), tIng.UnixNano()) // never credit time spent before everything was parked
	res.release = float64(r.n.Load()) / (float64(r.last.Load()-from) / 1e9)
	res.releasedIn = float64(r.last.Load()-due.UnixNano()) / 1e9
	res.missing = n - int(r.n.Load())
	res.lateness(r)
	res.cpu(c0, c1, n)
	return res
}

// runParked: park m messages due in an hour (memory per parked message and ingest with a
// growing store), then a burst of burstN due at once on top of that backlog (release rate
// with a large backlog).
func runParked(sys system, m, burstN int) result {
	res := newResult(sys, fmt.Sprintf("%dk parked + %dk burst", m/1000, burstN/1000))
	r := sys.rec()
	r.reset()
	c0 := snap(sys)
	at := time.Now().Add(time.Hour)
	if err := sys.send(m, func(int) sched { return sched{at: at, abs: true} }, 0); err != nil {
		res.err = err.Error()
		return res
	}
	tIng, err := sys.waitIngested(m, 10*time.Minute)
	if err != nil {
		res.err = err.Error()
		return res
	}
	mid := snap(sys)
	res.ingest = float64(m) / tIng.Sub(c0.t).Seconds()
	res.bytesBeyond = float64(mid.redis.usedMemory-c0.redis.usedMemory)/float64(m) - payloadSize
	// An AOF rewrite of the backlog takes a core for seconds; on this 2-core machine it
	// would halve a release it overlaps, and Redis starts one whenever the AOF doubled. The
	// harness rewrites the AOF once all are parked and sends the burst after it, so that no
	// rewrite of the backlog falls on the release and the row compares the store's work with
	// and without a backlog (notes: the wait).
	res.rewriteWait = rewriteAOF(sys, 5*time.Minute).Seconds()
	b := runBurst(sys, burstN, m, "")
	res.n = burstN
	res.release, res.releasedIn, res.missing, res.early = b.release, b.releasedIn, b.missing, b.early
	res.p50, res.p99, res.p999, res.max = b.p50, b.p99, b.p999, b.max
	res.ingRedis, res.ingWorker, res.ingHarness = utils(c0, mid)
	res.relRedis, res.relWorker, res.relHarness = b.relRedis, b.relWorker, b.relHarness
	if b.err != "" {
		res.err = b.err
	}
	c1 := snap(sys)
	res.forks, res.relForks = float64(c1.redis.forks-c0.redis.forks), b.relForks
	res.cpu(c0, c1, m+burstN)
	return res
}

// rewriteAOF rewrites the AOF of every Redis server of sys (BGREWRITEAOF, after any
// rewrite in progress) and waits until none is rewriting, at most timeout; it returns how
// long that took.
func rewriteAOF(sys system, timeout time.Duration) time.Duration {
	start := time.Now()
	idle := func() bool {
		for time.Since(start) < timeout {
			busy := false
			for _, n := range sys.redisNodes() {
				busy = busy || n.rewriting()
			}
			if !busy {
				return true
			}
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}
	if idle() {
		for _, n := range sys.redisNodes() {
			n.bgRewrite()
		}
		idle()
	}
	return time.Since(start)
}

// printPerCommand writes, for -commands, the calls and Redis microseconds per message of
// every command of a row to stderr, most time first (a script's time includes the
// commands it called, which are listed too).
func printPerCommand(res *result, cmds, usec map[string]int64, handled int) {
	names := make([]string, 0, len(cmds))
	for k := range cmds {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return int(usec[b] - usec[a]) })
	fmt.Fprintf(os.Stderr, "per command, %s %s (%s): command calls/msg usec/msg\n", res.system, res.workload, currentVariant)
	for _, k := range names {
		fmt.Fprintf(os.Stderr, "  %-16s %8.3f %8.3f\n", k, float64(cmds[k])/float64(handled), float64(usec[k])/float64(handled))
	}
}
