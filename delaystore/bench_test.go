package delaystore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// BenchmarkParkClaimAck measures one message's full cycle (park, claim, ack) in batches
// of 1000 messages over 16 shards, 100 B payloads. ns/op is per message. The backlog
// variants first park that many messages due in an hour, which the cycles never touch:
// their cost is what a large store adds.
func BenchmarkParkClaimAck(b *testing.B) {
	for _, backlog := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) { benchParkClaimAck(b, backlog) })
	}
}

func benchParkClaimAck(b *testing.B, backlog int) {
	f := newFixture(b, testredis.Start(b, "--appendfsync", "everysec").URL(), func(c *Config) { c.Shards = 16 })
	const batch = 1000
	payload := make([]byte, 100)
	reqs := make([]ParkRequest, batch)
	for done := 0; done < backlog; done += batch {
		for i := range reqs {
			reqs[i] = ParkRequest{
				ID: fmt.Sprintf("01K%023d", done+i), Delay: time.Hour,
				Envelope: Envelope{Target: "nats:orders.timeout", Source: "nats:delay.in", Payload: payload},
			}
		}
		if _, err := f.s.Park(b.Context(), reqs); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := redisCPU(b, f)
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		for i := range reqs {
			reqs[i] = ParkRequest{
				ID:       fmt.Sprintf("01J%023d", done+i),
				Envelope: Envelope{Target: "nats:orders.timeout", Source: "nats:delay.in", Payload: payload},
			}
		}
		if _, err := f.s.Park(b.Context(), reqs); err != nil {
			b.Fatal(err)
		}
		var rs []Receipt
		for sh := range f.s.Shards() {
			c, err := f.s.Claim(b.Context(), sh, batch)
			if err != nil {
				b.Fatal(err)
			}
			for _, m := range c.Messages {
				rs = append(rs, m.Receipt)
			}
		}
		a, err := f.s.Ack(b.Context(), rs)
		if err != nil || a.N != batch {
			b.Fatalf("ack %+v, %v", a, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric((redisCPU(b, f)-cpu0)*1e6/float64(b.N), "redis-cpu-us/msg")
}

// redisCPU returns the server's used CPU seconds (user + sys) from INFO cpu.
func redisCPU(b *testing.B, f *fixture) float64 {
	info, err := f.rdb.Info(b.Context(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += x
		}
	}
	return total
}

// BenchmarkParkedMemory reports Redis memory per parked message: 100k messages of 100 B
// with 26-character ids (ULIDs, as core NATS and the HTTP API make), typical target and
// source, no headers. used_memory delta / count, and the same minus the 100 B payload.
// Run: go test -run '^$' -bench BenchmarkParkedMemory -benchtime 1x ./delaystore/
func BenchmarkParkedMemory(b *testing.B) {
	for range b.N {
		f := newFixture(b, testredis.Start(b).URL(), func(c *Config) { c.Shards = 16 })
		mem := func() float64 {
			info, err := f.rdb.Info(b.Context(), "memory").Result()
			if err != nil {
				b.Fatal(err)
			}
			for _, line := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
					n, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return n
				}
			}
			b.Fatal("no used_memory in INFO")
			return 0
		}
		const n, batch = 100_000, 1000
		payload := make([]byte, 100)
		before := mem()
		for i := 0; i < n; i += batch {
			reqs := make([]ParkRequest, batch)
			for j := range reqs {
				reqs[j] = ParkRequest{
					ID: fmt.Sprintf("01M80%021d", i+j), Delay: time.Hour,
					Envelope: Envelope{Target: "nats:orders.timeout", Source: "nats:delay.in", Payload: payload},
				}
			}
			if _, err := f.s.Park(b.Context(), reqs); err != nil {
				b.Fatal(err)
			}
		}
		per := (mem() - before) / n
		b.ReportMetric(per, "bytes/msg")
		b.ReportMetric(per-float64(len(payload)), "bytes/msg-beyond-payload")
	}
}
