package delaystore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/headers"
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

// BenchmarkParkedMemory reports Redis memory per parked message: 100k messages of 100 B.
// ulid: 26-character ids (ULIDs, as core NATS and the HTTP API make), typical target and
// source, no headers. jetstream: as ingress parks a JetStream message without x-delay-id
// (e2e/bench's messages): id and source id "js:IN:<seq>", x-delay-hops 1. used_memory
// delta / count, the same minus the 100 B payload, and the stored value's length.
// Run: go test -run '^$' -bench BenchmarkParkedMemory -benchtime 1x ./delaystore/
func BenchmarkParkedMemory(b *testing.B) {
	ulid := func(i int) ParkRequest {
		return ParkRequest{ID: fmt.Sprintf("01M80%021d", i), Delay: time.Hour,
			Envelope: Envelope{Target: "nats:orders.timeout", Source: "nats:delay.in"}}
	}
	js := func(i int) ParkRequest {
		id := fmt.Sprintf("js:IN:%d", 1_000_000+i)
		return ParkRequest{ID: id, Delay: time.Hour, Envelope: Envelope{SourceID: id, Target: "nats:bench.out.w",
			Source: "nats:delay.in", Headers: headers.List{{Key: "x-delay-hops", Value: "1"}}}}
	}
	for _, c := range []struct {
		name string
		req  func(int) ParkRequest
	}{{"ulid", ulid}, {"jetstream", js}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				benchParkedMemory(b, c.req)
			}
		})
	}
}

// usedMemory is Redis used_memory (INFO memory).
func usedMemory(b testing.TB, f *fixture) float64 {
	b.Helper()
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

func benchParkedMemory(b *testing.B, req func(int) ParkRequest) {
	f := newFixture(b, testredis.Start(b).URL(), func(c *Config) { c.Shards = 16 })
	mem := func() float64 { return usedMemory(b, f) }
	const n, batch = 100_000, 1000
	payload := make([]byte, 100)
	before := mem()
	for i := 0; i < n; i += batch {
		reqs := make([]ParkRequest, batch)
		for j := range reqs {
			reqs[j] = req(i + j)
			reqs[j].Envelope.Payload = payload
		}
		if _, err := f.s.Park(b.Context(), reqs); err != nil {
			b.Fatal(err)
		}
	}
	per := (mem() - before) / n
	id := req(n - 1).ID
	value, err := f.rdb.HGet(b.Context(), f.s.keys[f.s.ShardOf(id)].m, id).Result()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(per, "bytes/msg")
	b.ReportMetric(per-float64(len(payload)), "bytes/msg-beyond-payload")
	b.ReportMetric(float64(len(value)), "value-bytes")
}

// BenchmarkTombstoneMemory reports Redis memory per tombstone: 100k messages with source
// ids ("js:IN:<seq>", as e2e/bench's JetStream messages) parked due at once, claimed and
// acked in batches of 1000 (TTL 90 s, the default); used_memory after (the entries gone,
// the tombstones left) minus before, per message.
// Run: go test -run '^$' -bench BenchmarkTombstoneMemory -benchtime 1x ./delaystore/
func BenchmarkTombstoneMemory(b *testing.B) {
	for range b.N {
		benchTombstoneMemory(b)
	}
}

func benchTombstoneMemory(b *testing.B) {
	f := newFixture(b, testredis.Start(b).URL(), func(c *Config) { c.Shards = 16; c.TombstoneTTL = 90 * time.Second })
	const n, batch = 100_000, 1000
	before := usedMemory(b, f)
	for i := 0; i < n; i += batch {
		reqs := make([]ParkRequest, batch)
		for j := range reqs {
			id := fmt.Sprintf("js:IN:%d", 1_000_000+i+j)
			reqs[j] = ParkRequest{ID: id, Envelope: Envelope{SourceID: id, Target: "nats:bench.out.w", Source: "nats:delay.in", Payload: make([]byte, 100)}}
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
		if a, err := f.s.Ack(b.Context(), rs); err != nil || a.N != batch {
			b.Fatalf("ack %+v, %v", a, err)
		}
	}
	b.ReportMetric((usedMemory(b, f)-before)/n, "bytes/tombstone")
}

// BenchmarkBatchShape measures Redis CPU per message of park + claim + ack by the shape of
// the calls, the way egress makes them: each round parks a batch, then one Exchange acks
// the previous round's claims and claims the shards the batch went to. A steady load
// parks and claims a few messages at a time (at 5k msgs/s and a round trip every ms or
// two, 5-10), a burst a thousand; they spread over the shards; and messages with source
// ids (every JetStream or Kafka message) leave a tombstone that park checks and ack
// expires (TTL 90 s as by default, so the set grows over the run as in production).
//
//	go test -run '^$' -bench BenchmarkBatchShape -benchtime 40000x ./delaystore/
func BenchmarkBatchShape(b *testing.B) {
	for _, shards := range []int{16, 1} {
		for _, batch := range []int{1000, 40, 8} {
			for _, src := range []bool{false, true} {
				name := fmt.Sprintf("shards=%d/batch=%d/sourceids=%v", shards, batch, src)
				b.Run(name, func(b *testing.B) { benchBatchShape(b, shards, batch, src) })
			}
		}
	}
}

func benchBatchShape(b *testing.B, shards, batch int, sourceIDs bool) {
	f := newFixture(b, testredis.Start(b, "--appendfsync", "everysec").URL(), func(c *Config) {
		c.Shards = shards
		c.TombstoneTTL = 90 * time.Second
	})
	payload := make([]byte, 100)
	reqs := make([]ParkRequest, batch)
	var acks []Receipt
	cpu0 := redisCPU(b, f)
	b.ResetTimer()
	done := 0 // whole batches: b.N rounded up
	for ; done < b.N; done += batch {
		in := map[int]bool{}
		for i := range reqs {
			reqs[i] = ParkRequest{
				ID:       fmt.Sprintf("01J%023d", done+i),
				Envelope: Envelope{Target: "nats:orders.timeout", Source: "nats:delay.in", Payload: payload},
			}
			if sourceIDs {
				reqs[i].Envelope.SourceID = fmt.Sprintf("js:IN:%d", done+i)
			}
			in[f.s.ShardOf(reqs[i].ID)] = true
		}
		if _, err := f.s.Park(b.Context(), reqs); err != nil {
			b.Fatal(err)
		}
		var claims []ClaimRequest
		for sh := range in {
			claims = append(claims, ClaimRequest{Shard: sh, Max: batch})
		}
		acks = exchangeRound(b, f.s, acks, claims, batch)
	}
	if a, err := f.s.Ack(b.Context(), acks); err != nil || a.N != len(acks) {
		b.Fatalf("ack %+v, %v", a, err)
	}
	b.ReportMetric((redisCPU(b, f)-cpu0)*1e6/float64(done), "redis-cpu-us/msg")
}

// exchangeRound acks acks and claims claims in one Exchange and returns the receipts of
// what it claimed, which must be n messages.
func exchangeRound(b *testing.B, s *Store, acks []Receipt, claims []ClaimRequest, n int) []Receipt {
	x := s.Exchange(b.Context(), acks, nil, claims)
	if x.AckErr != nil || x.Acked.N != len(acks) {
		b.Fatalf("ack %+v, %v", x.Acked, x.AckErr)
	}
	var rs []Receipt
	for i, c := range x.Claims {
		if x.ClaimErrs[i] != nil {
			b.Fatal(x.ClaimErrs[i])
		}
		for _, m := range c.Messages {
			rs = append(rs, m.Receipt)
		}
	}
	if len(rs) != n {
		b.Fatalf("claimed %d of %d", len(rs), n)
	}
	return rs
}
