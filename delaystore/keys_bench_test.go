package delaystore

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// BenchmarkMillionKeys measures what a million ordering keys cost the store. Each backlog
// variant first parks 1,000,000 messages of 100 B due in an hour over 16 shards, either
// without ordering key (plain) or each with its own key ("order:<7 digits>", 13 bytes:
// a million chains of one): bytes/msg is Redis used_memory (INFO memory) grown per parked
// message. Then the cycles, which never touch the backlog: park, claim and ack batches of
// 1000 messages due now, plain ones or ones with a fresh key each; ns/op and
// redis-cpu-us/msg are per message of the cycles, backlog-bytes/msg the backlog's memory per message
// (0: none). backlog=none is the empty store.
// BENCH_KEYS=n parks n instead of 1,000,000.
// Run: go test -run '^$' -bench BenchmarkMillionKeys -benchtime 200000x -timeout 30m ./delaystore/
func BenchmarkMillionKeys(b *testing.B) {
	backlog := 1_000_000
	if n, err := strconv.Atoi(os.Getenv("BENCH_KEYS")); err == nil && n > 0 {
		backlog = n // a smaller million, for a slow machine
	}
	for _, bl := range []string{"none", "plain", "keyed"} {
		b.Run("backlog="+bl, func(b *testing.B) {
			f := newFixture(b, testredis.Start(b, "--appendfsync", "everysec").URL(), func(c *Config) { c.Shards = 16 })
			perMsg := 0.0
			if bl != "none" {
				before := usedMemory(b, f)
				parkBacklog(b, f, backlog, bl == "keyed")
				perMsg = (usedMemory(b, f) - before) / float64(backlog)
			}
			for _, cycle := range []string{"plain", "keyed"} {
				b.Run("cycle="+cycle, func(b *testing.B) {
					benchKeyCycles(b, f, cycle == "keyed")
					b.ReportMetric(perMsg, "backlog-bytes/msg")
				})
			}
		})
	}
}

// parkBacklog parks n messages of 100 B due in an hour, each with its own ordering key
// when keyed, in batches of 1000.
func parkBacklog(b *testing.B, f *fixture, n int, keyed bool) {
	b.Helper()
	const batch = 1000
	payload := make([]byte, 100)
	reqs := make([]ParkRequest, batch)
	for done := 0; done < n; done += batch {
		for i := range reqs {
			reqs[i] = ParkRequest{ID: fmt.Sprintf("01K%023d", done+i), Delay: time.Hour,
				Envelope: Envelope{Target: "nats:orders.timeout", Source: "nats:delay.in", Payload: payload}}
			if keyed {
				reqs[i].Envelope.OrderingKey = fmt.Sprintf("order:%07d", done+i)
			}
		}
		if _, err := f.s.Park(b.Context(), reqs); err != nil {
			b.Fatal(err)
		}
	}
}

// benchKeyCycles parks, claims and acks b.N messages due now in batches of 1000, each
// with a fresh ordering key when keyed, and reports the Redis CPU per message.
func benchKeyCycles(b *testing.B, f *fixture, keyed bool) {
	const batch = 1000
	payload := make([]byte, 100)
	reqs := make([]ParkRequest, batch)
	tag := "p"
	if keyed {
		tag = "k"
	}
	cpu0 := redisCPU(b, f)
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		for i := range reqs {
			reqs[i] = ParkRequest{ID: fmt.Sprintf("01J%s%022d", tag, done+i),
				Envelope: Envelope{Target: "nats:orders.timeout", Source: "nats:delay.in", Payload: payload}}
			if keyed {
				reqs[i].Envelope.OrderingKey = fmt.Sprintf("cycle:%09d", done+i)
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
			b.Fatalf("ack of %d claimed: %+v, %v", len(rs), a, err)
		}
	}
	b.ReportMetric((redisCPU(b, f)-cpu0)*1e6/float64(b.N), "redis-cpu-us/msg")
}
