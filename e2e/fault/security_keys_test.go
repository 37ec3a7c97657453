//go:build fault

package fault

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// secHostile are target names and ids built to steer Redis keys, hash tags, glob patterns
// or scripts.
var secHostile = []string{
	"a}{b", "*", "?", "[x]", "{", "}", "out.{x}", "out.}{", "out.*", "out.>", "out.[a-z]",
	"$JS.API.STREAM.DELETE.IN", "_INBOX.x", "__consumer_offsets", "out.%s%d", "out.\\x",
	"{delay:0}:z", ":shards", "out.a b", "out.é", "]]..redis.call('FLUSHALL')..[[",
}

// TestRedisKeySetIndependentOfInput is row H1: secHostile target names and ids, plus 1000
// distinct targets and ids, sent through NATS and the message API, leave exactly the fixed
// key set in Redis ({P:i}:z, {P:i}:m, {P:i}:seq, {P:i}:epoch, {P:i}:n (targets are its
// fields) for each shard, P:shards, P:cursor (the key that seals API cursors), the audit
// log's {P:audit}:z, :e and :s (op ids are members and fields, never key names), and
// {P:i}:tn, the tombstones, in the shards where a
// message with a source id was cancelled,
// and {P:i}:c and {P:i}:cx, the remembered cancels, in the shards of the cancelled ids),
// whatever was parked, dead-lettered or cancelled; tombstone members are the adapter's
// source ids (js:IN:<seq>), never input; the remembered cancels are fields and members,
// never key names.
func TestRedisKeySetIndependentOfInput(t *testing.T) {
	s := newStack(t)
	prefix := s.env["BRIDGE_KEY_PREFIX"]
	const shards = 16
	b := e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_SHARDS", strconv.Itoa(shards)))

	var dlq atomic.Int64
	sub, err := s.nc.Subscribe("delay.dlq", func(*nats.Msg) { dlq.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	sent := 0
	send := func(target, id string) {
		m := nats.NewMsg("delay.in")
		m.Header.Set("x-delay", "1h")
		m.Header.Set("x-target", target)
		if id != "" {
			m.Header.Set("x-delay-id", id)
		}
		if _, err := s.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatalf("publish: %v", err)
		}
		sent++
	}
	for _, h := range secHostile {
		send(h, "")
		send("out.ok", h)
		send(h, h)
	}
	for i := range 1000 {
		send(fmt.Sprintf("out.t%d.{tag%d}", i, i), fmt.Sprintf("{%s:%d}:x%d*", prefix, i%shards, i))
	}
	api := "http://" + b.APIAddr + "/v1/messages"
	for _, h := range secHostile {
		secAPI(t, "POST", api, "", fmt.Sprintf(`{"target":%q,"delay":"1h","id":%q,"payload":"x"}`, h, h))
		secAPI(t, "GET", api+"/"+url.PathEscape(h), "", "")
	}
	// The audit log and the bulk operations take hostile ids, selectors, op ids and cursors
	// as fields and members only (DELETE and a bulk change are audited).
	base := "http://" + b.APIAddr
	for _, h := range secHostile {
		secAPI(t, "DELETE", api+"/"+url.PathEscape(h), "", "")
		secAPI(t, "POST", base+"/v1/bulk/cancel", "", fmt.Sprintf(`{"id":%q,"target":%q,"dry_run":true}`, h, h))
		secAPI(t, "POST", base+"/v1/bulk/resume", "", fmt.Sprintf(`{"op_id":%q}`, h))
		secAPI(t, "GET", base+"/v1/audit?cursor="+url.QueryEscape(h), "", "")
	}
	for _, h := range secHostile[:5] {
		m := nats.NewMsg("delay.cancel")
		m.Header.Set("x-delay-id", h)
		if _, err := s.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}

	// Wait until the bridge consumed and acked every NATS message (parked, replaced,
	// cancelled or dead-lettered).
	deadline := time.Now().Add(20 * time.Second)
	for !secConsumed(t, s, "delaybridge") || !secConsumed(t, s, "delaybridge-cancel") {
		if time.Now().After(deadline) {
			t.Fatal("the bridge did not consume every message within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var parkedN int
	_, body := e2etest.HTTPGet("http://" + b.APIAddr + "/v1/stats")
	fmt.Sscanf(body, `{"parked":%d`, &parkedN)

	opts, err := redis.ParseURL(s.redis.URL())
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(opts)
	defer admin.Close()
	stats := secStatsKeys(t, admin, prefix)
	keys := secKeys(t, admin)
	var want []string
	for i := range shards {
		for _, k := range []string{"epoch", "m", "n", "nm", "seq", "z"} {
			want = append(want, fmt.Sprintf("{%s:%d}:%s", prefix, i, k))
		}
	}
	want = append(want, prefix+":shards", prefix+":cursor")
	// The audit log (its entries are fields and members: op ids the store made).
	for _, k := range []string{"z", "e", "s"} {
		want = append(want, fmt.Sprintf("{%s:audit}:%s", prefix, k))
	}
	// The fleet membership of the one replica (pending entries only live between a first
	// heartbeat and the next).
	for _, k := range []string{"members", "tokens", "version"} {
		want = append(want, fmt.Sprintf("{%s:fleet}:%s", prefix, k))
	}
	slices.Sort(want)
	pats := secKeyPatterns(prefix)
	for _, k := range keys {
		if !slices.ContainsFunc(pats, func(p *regexp.Regexp) bool { return p.MatchString(k) }) {
			t.Errorf("unexpected key %q", k)
		}
	}
	var tombs, cancels []string
	for _, k := range keys {
		switch {
		case strings.HasSuffix(k, "}:tn"), strings.HasSuffix(k, "}:to"):
			tombs = append(tombs, k)
		case strings.HasSuffix(k, "}:c"), strings.HasSuffix(k, "}:cx"):
			cancels = append(cancels, k)
		}
	}
	// The fleet's counts: a minute and an hour bucket (two of either when a flush fell in the
	// next minute or hour), named by time; their fields are the bridge's own names.
	optional := func(k string) bool {
		return strings.HasSuffix(k, "}:tn") || strings.HasSuffix(k, "}:to") || strings.HasSuffix(k, "}:c") || strings.HasSuffix(k, "}:cx") ||
			strings.HasSuffix(k, "}:b") || strings.HasSuffix(k, "}:bx") || slices.Contains(stats, k)
	}
	field := regexp.MustCompile(`^(in|out|dead):[a-z_]+$|^late:([0-9.e+-]+|\+Inf)$`)
	for _, k := range stats {
		for _, f := range admin.HKeys(t.Context(), k).Val() {
			if !field.MatchString(f) {
				t.Errorf("fleet counts %s hold field %q, not one of the bridge's own", k, f)
			}
		}
	}
	if got := slices.DeleteFunc(slices.Clone(keys), optional); !slices.Equal(got, want) {
		t.Errorf("keys %d (besides %d tombstone sets and %d remembered-cancel keys), want exactly %d: got %q", len(got), len(tombs), len(cancels), len(want), got)
	}
	if len(tombs) == 0 {
		t.Error("no tombstone set: the cancelled messages with source ids left none")
	}
	if len(cancels) == 0 || len(cancels)%2 != 0 {
		t.Errorf("remembered-cancel keys %q: want a :c and a :cx per shard of a cancelled id", cancels)
	}
	member := regexp.MustCompile(`^js:IN:[0-9]+$`)
	for _, k := range tombs {
		for _, m := range admin.SMembers(t.Context(), k).Val() {
			if !member.MatchString(m) {
				t.Errorf("tombstone set %s holds %q, not a source id", k, m)
			}
		}
	}
	t.Logf("H1: %d NATS messages (%d secHostile names, 1000 distinct targets and ids) + %d API calls: %d parked, %d dead-lettered; Redis keys %d = 5 x %d shards + 2 + 3 fleet keys + %d tombstone sets + %d remembered-cancel keys + %d fleet count buckets, none from input",
		sent, len(secHostile), 2*len(secHostile), parkedN, dlq.Load(), len(keys), shards, len(tombs), len(cancels), len(stats))
}

// secConsumed reports whether the IN stream's consumer has nothing pending or unacked.
func secConsumed(t *testing.T, s *stack, consumer string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.js.Consumer(ctx, "IN", consumer)
	if err != nil {
		return false
	}
	info, err := c.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}
