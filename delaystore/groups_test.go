package delaystore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// On one Redis node a batch is one script run whatever the number of shards it touches:
// a park of 200 messages over 16 shards, their claim and their ack are one EVALSHA each
// (issue 13: Redis work per message at steady load).
func TestOneScriptRunPerBatch(t *testing.T) {
	f := newFixture(t, testredis.Start(t).URL(), func(c *Config) { c.Shards = 16 })
	ctx := t.Context()
	reqs := make([]ParkRequest, 200)
	shards := map[int]bool{}
	for i := range reqs {
		reqs[i] = ParkRequest{ID: fmt.Sprintf("m%d", i), Envelope: sampleEnvelope(i)}
		shards[f.s.ShardOf(reqs[i].ID)] = true
	}
	if len(shards) != 16 {
		t.Fatalf("the batch touches %d shards, want 16", len(shards))
	}
	f.internSample(t) // names new to a shard cost one intern call each, once
	if err := f.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	f.park(t, reqs...)
	if n := cmdCalls(t, f.rdb, "evalsha"); n != 1 {
		t.Fatalf("park of 16 shards ran %d scripts, want 1", n)
	}
	claims := make([]ClaimRequest, 16)
	for sh := range claims {
		claims[sh] = ClaimRequest{Shard: sh, Max: 100}
	}
	x := f.s.Exchange(ctx, nil, nil, claims)
	if err := x.Err(); err != nil {
		t.Fatal(err)
	}
	var rs []Receipt
	for _, c := range x.Claims {
		for _, m := range c.Messages {
			rs = append(rs, m.Receipt)
		}
	}
	if len(rs) != len(reqs) {
		t.Fatalf("claimed %d of %d", len(rs), len(reqs))
	}
	x = f.s.Exchange(ctx, rs, nil, nil)
	if x.Err() != nil || x.Acked.N != len(reqs) || len(x.Acked.Heads) != 16 {
		t.Fatalf("ack: %+v, %v", x.Acked, x.Err())
	}
	if n := cmdCalls(t, f.rdb, "evalsha"); n != 3 {
		t.Fatalf("park, claim and ack of 16 shards ran %d scripts, want 3", n)
	}
}

// A shard whose group fails (here: its sorted set is not one) fails alone: its error ends
// the packed run, and the store sends the call's groups again one call each, so the other
// shards of the batch are parked and claimed.
func TestGroupErrorStaysInItsShard(t *testing.T) {
	f := newFixture(t, testredis.Start(t).URL(), func(c *Config) { c.Shards = 4 })
	ctx := t.Context()
	if err := f.rdb.Set(ctx, f.s.keys[2].z, "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var reqs []ParkRequest
	for sh := range 4 {
		for _, id := range idsOnShard(f.s, sh, 3, "g") {
			reqs = append(reqs, ParkRequest{ID: id, Envelope: sampleEnvelope(sh)})
		}
	}
	parked, err := f.s.Park(ctx, reqs)
	if err == nil || !strings.Contains(err.Error(), "park shard 2") || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("park error = %v, want shard 2's WRONGTYPE", err)
	}
	for i, p := range parked {
		if sh := f.s.ShardOf(reqs[i].ID); (p.ID == "") != (sh == 2) {
			t.Errorf("%s (shard %d): parked %+v", reqs[i].ID, sh, p)
		}
	}
	// Packing is off for a while now: the claims go one call a shard, so shard 2's error
	// does not take the others' messages with it.
	x := f.s.Exchange(ctx, nil, nil, []ClaimRequest{{Shard: 0, Max: 10}, {Shard: 1, Max: 10}, {Shard: 2, Max: 10}, {Shard: 3, Max: 10}})
	for sh, c := range x.Claims {
		if got := len(c.Messages); (sh == 2) != (x.ClaimErrs[sh] != nil) || (sh != 2 && got != 3) {
			t.Errorf("shard %d: claimed %d, err %v", sh, got, x.ClaimErrs[sh])
		}
	}
}

// An ack that rides with a claim of its shard leaves the head to the claim (one read
// fewer); alone it reads it.
func TestExchangeReadsEachHeadOnce(t *testing.T) {
	f := newFixture(t, testredis.Start(t).URL(), func(c *Config) { c.Shards = 2 })
	ctx := t.Context()
	ids := idsOnShard(f.s, 0, 3, "h")
	now := f.now(t)
	f.park(t, ParkRequest{ID: ids[0], Envelope: sampleEnvelope(0)}, ParkRequest{ID: ids[1], Envelope: sampleEnvelope(1)},
		ParkRequest{ID: ids[2], Absolute: true, At: now + 3_600_000, Envelope: sampleEnvelope(2)})
	c, err := f.s.Claim(ctx, 0, 1)
	if err != nil || len(c.Messages) != 1 {
		t.Fatalf("claim: %v %+v", err, c)
	}
	x := f.s.Exchange(ctx, []Receipt{c.Messages[0].Receipt}, nil, []ClaimRequest{{Shard: 0, Max: 10}})
	if err := x.Err(); err != nil || x.Acked.N != 1 {
		t.Fatalf("exchange: %v %+v", err, x.Acked)
	}
	if _, ok := x.Acked.Heads[0]; ok {
		t.Errorf("the ack read shard 0's head though a claim of it followed: %v", x.Acked.Heads)
	}
	cl := x.Claims[0]
	if len(cl.Messages) != 1 || cl.Next != cl.Messages[0].Token {
		t.Fatalf("claim after the ack: %d messages, next %d, want 1 and the token", len(cl.Messages), cl.Next)
	}
	a, err := f.s.Ack(ctx, []Receipt{cl.Messages[0].Receipt})
	if err != nil || a.N != 1 || a.Heads[0] != now+3_600_000 {
		t.Fatalf("ack alone: %v %+v, want the head %d", err, a, now+3_600_000)
	}
}

// A park refused for memory answers one error for the whole run and nothing else: the
// next reply on the connection is the next command's (regression: a group run under
// pcall made Redis 7.0 answer a refused write twice, shifting every later reply of a
// pipeline onto the wrong command).
func TestRefusedRunAnswersOnce(t *testing.T) {
	f, _ := ownServer(t, func(c *Config) { c.Shards = 4 })
	fill(t, f.rdb)
	var groups []group
	for sh := range 4 {
		id := idsOnShard(f.s, sh, 1, "oom")[0]
		groups = append(groups, group{shard: sh, keys: f.s.keys[sh].park,
			args: []any{f.s.keys[sh].wake, f.s.keys[sh].shardID, id, "r", "0", "0", encodeBody(sampleEnvelope(sh), id), "0", "0", "0"}}) // no quota, names or keys block
	}
	c := packedCall(groups)
	for range 3 {
		pipe := f.rdb.Pipeline()
		run := f.s.scripts[scriptPark].EvalSha(t.Context(), pipe, c.keys, c.args...)
		ping := pipe.Echo(t.Context(), "after")
		_, _ = pipe.Exec(t.Context())
		if !IsOOM(run.Err()) || ping.Val() != "after" {
			t.Fatalf("park on a full Redis: %v, then ECHO: %q %v", run.Err(), ping.Val(), ping.Err())
		}
	}
}

// A batch larger than packBytes goes in several calls (each group whole), so that a full
// Redis with a little room takes it call by call; the answers still line up.
func TestPackSplitsLargeBatches(t *testing.T) {
	f := newFixture(t, testredis.Start(t).URL(), func(c *Config) { c.Shards = 16 })
	var reqs []ParkRequest
	for i := range 160 {
		env := sampleEnvelope(i)
		env.Payload = make([]byte, 1024)
		reqs = append(reqs, ParkRequest{ID: fmt.Sprintf("big-%d", i), Envelope: env})
	}
	f.internSample(t)
	if err := f.rdb.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	parked := f.park(t, reqs...)
	for i, p := range parked {
		if p.ID != reqs[i].ID || p.Existed {
			t.Fatalf("park %d: %+v", i, p)
		}
	}
	if n := cmdCalls(t, f.rdb, "evalsha"); n < 4 || n > 16 {
		t.Fatalf("a park of 160 KiB over 16 shards ran %d scripts, want 4 to 16 (calls of at most %d bytes)", n, packBytes)
	}
	if z, m := f.counts(t); z != 160 || m != 160 {
		t.Fatalf("parked %d/%d of 160", z, m)
	}
}
