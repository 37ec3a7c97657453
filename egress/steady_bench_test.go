package egress

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// BenchmarkSteadyRedisCPU is the steady row of `make bench` without the brokers: b.N
// JetStream-like messages (id = source id js:IN:<seq>) at 5k msgs/s, delays uniform in
// 0..1 s, parked every 1 ms as ingress's group commit does, claimed and acked by the real
// scheduler over 16 shards, or 1 (a fake delivery acks at once); it reports Redis CPU per
// message. Variants: the ack hold (0: acks ride with every claim; ackHold, the default). It also reports the lateness of the hand-off to delivery (p50, p99: handed
// minus due, ms), which the hold must not move.
//
//	go test -run '^$' -bench BenchmarkSteadyRedisCPU -benchtime 25000x ./egress/
func BenchmarkSteadyRedisCPU(b *testing.B) {
	for _, shards := range []int{16, 1} {
		for _, hold := range []time.Duration{0, ackHold} {
			b.Run(fmt.Sprintf("shards=%d/hold=%s", shards, hold), func(b *testing.B) {
				benchSteady(b, shards, hold)
			})
		}
	}
}

func benchSteady(b *testing.B, shards int, hold time.Duration) {
	srv := testredis.Start(b, "--appendfsync", "everysec")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = rdb.Close() })
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: "delay", Shards: shards, Lease: 30 * time.Second, TombstoneTTL: 90 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Init(b.Context()); err != nil {
		b.Fatal(err)
	}
	f := newFakeDelivery()
	cfg := Config{DLQSubject: "dlq", ClaimAll: true, DrainTimeout: 5 * time.Second, Lease: 30 * time.Second}
	cfg.defaults()
	log := slog.New(slog.DiscardHandler)
	own := newOwnership(cfg.MemberID, st.Shards(), cfg.OwnershipTTL, st, log, true)
	ctx, cancel := context.WithCancel(context.Background())
	wakes, err := st.Wakeups(ctx)
	if err != nil {
		b.Fatal(err)
	}
	s := newScheduler(cfg, st, own, wakes, &redisClock{}, log, nil, f.deliver)
	s.ackHold = hold
	runScheduler(b, ctx, cancel, s, wakes)
	payload := make([]byte, 100)
	cpu0, scripts0, cmds0 := redisUse(b, rdb)
	per0 := commandCalls(b, rdb)
	self0 := selfCPU(b)
	b.ResetTimer()
	start, sent := time.Now(), 0
	for sent < b.N {
		time.Sleep(time.Until(start.Add(time.Duration(sent/5+1) * time.Millisecond)))
		// one Park call per millisecond of arrivals (5), late or not: the shape does not
		// depend on how busy the machine is
		var reqs []delaystore.ParkRequest
		for upTo := min(b.N, sent+5); sent < upTo; sent++ {
			id := "js:IN:" + strconv.Itoa(sent+1)
			reqs = append(reqs, delaystore.ParkRequest{ID: id, Delay: time.Duration(rand.IntN(1001)) * time.Millisecond,
				Envelope: delaystore.Envelope{Target: "nats:bench.out", Source: "nats:delay.in", SourceID: id, Payload: payload}})
		}
		if _, err := st.Park(b.Context(), reqs); err != nil {
			b.Fatal(err)
		}
	}
	for f.handed() < b.N {
		time.Sleep(10 * time.Millisecond)
	}
	for s.handed.Load() > 0 || !s.settleEmpty() {
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric((selfCPU(b)-self0)*1e6/float64(b.N), "self-cpu-us/msg")
	cpu1, scripts1, cmds1 := redisUse(b, rdb)
	b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-cpu-us/msg")
	b.ReportMetric(float64(scripts1-scripts0)/float64(b.N), "scripts/msg")
	b.ReportMetric(float64(cmds1-cmds0)/float64(b.N), "cmds/msg")
	p50, p99 := f.lateness()
	b.ReportMetric(p50, "p50-late-ms")
	b.ReportMetric(p99, "p99-late-ms")
	if os.Getenv("BENCH_COMMANDS") != "" && b.N >= 1000 {
		var line []string
		for k, v := range commandCalls(b, rdb) {
			if d := float64(v-per0[k]) / float64(b.N); d >= 0.01 {
				line = append(line, fmt.Sprintf("%s %.3f", k, d))
			}
		}
		slices.Sort(line)
		b.Logf("calls/msg: %s", strings.Join(line, ", "))
	}
}

// selfCPU is this process's CPU seconds so far (user + sys): the scheduler, the parks
// and the Redis client, as the bridge's egress would spend them, plus the fake delivery.
func selfCPU(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// commandCalls reads INFO commandstats: calls per command so far.
func commandCalls(b *testing.B, rdb *redis.Client) map[string]int64 {
	info, err := rdb.Info(b.Context(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if name, isCmd := strings.CutPrefix(k, "cmdstat_"); ok && isCmd {
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			out[name], _ = strconv.ParseInt(calls, 10, 64)
		}
	}
	return out
}

// redisUse reads Redis's CPU seconds (user + sys), its EVALSHA calls and its other
// commands' calls (those of scripts included) so far.
func redisUse(b *testing.B, rdb *redis.Client) (cpu float64, scripts, cmds int64) {
	info, err := rdb.Info(b.Context(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case ok && (k == "used_cpu_user" || k == "used_cpu_sys"):
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			cpu += x
		case ok && strings.HasPrefix(k, "cmdstat_"):
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			if k == "cmdstat_evalsha" {
				scripts = n
			} else {
				cmds += n
			}
		}
	}
	return cpu, scripts, cmds
}
