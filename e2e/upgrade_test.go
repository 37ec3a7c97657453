package e2e

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestUpgradeDeliversEarlierEntries: messages parked by the previous version in its store
// (P:shards "16": recorded by a version before the position layout; the text header
// "<version>,<attempts>,<due>," and body format 1 or 2, written here byte for byte as it
// wrote them) are delivered by this version after a rolling upgrade: payload, headers,
// x-delay-id and x-delay-due as parked; the store keeps its mark (this version goes on
// writing what the previous one reads). The test writes Redis only to stand in for the
// earlier version; the bridge is seen through NATS alone.
func TestUpgradeDeliversEarlierEntries(t *testing.T) {
	s := newStack(t)
	target := s.name("upgrade.out")
	arrivals := subscribe(t, s.nc, target)
	prefix := s.env["BRIDGE_KEY_PREFIX"]
	opts, err := redis.ParseURL(s.env["BRIDGE_REDIS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()

	if err := rdb.Set(t.Context(), prefix+":shards", "16", 0).Err(); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(500 * time.Millisecond).UnixMilli()
	field := func(v string) string { return string(rune(len(v))) + v } // lengths < 128: one byte
	tail := field("nats:"+target) + field("nats:delay.in") + "\x00" +  // target, source, no key
		"\x02" + field("a") + field("1") + field("x-delay-hops") + field("1") // two headers
	entries := map[string]string{
		"old-1":     "\x01" + tail + "payload of format 1",
		"js:IN:901": "\x02" + tail + "payload of format 2", // source id = the id
	}
	for id, body := range entries {
		h := fnv.New32a()
		h.Write([]byte(id))
		tag := fmt.Sprintf("{%s:%d}", prefix, h.Sum32()%16) // BRIDGE_SHARDS 16, the default
		if err := rdb.HSet(t.Context(), tag+":m", id, fmt.Sprintf("7,0,%d,%s", due, body)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ZAdd(t.Context(), tag+":z", redis.Z{Score: float64(due), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	startBridge(t, s.env)

	for range entries {
		a := receive(t, arrivals, 15*time.Second)
		id := a.msg.Header.Get("x-delay-id")
		want := map[string]string{"old-1": "payload of format 1", "js:IN:901": "payload of format 2"}[id]
		if want == "" || string(a.msg.Data) != want {
			t.Fatalf("arrival %q with payload %q", id, a.msg.Data)
		}
		if got := a.msg.Header.Get("x-delay-due"); got != strconv.FormatInt(due, 10) {
			t.Fatalf("%s: x-delay-due %q, want %d", id, got, due)
		}
		if a.msg.Header.Get("a") != "1" || a.msg.Header.Get("x-delay-hops") != "1" {
			t.Fatalf("%s: headers %v", id, a.msg.Header)
		}
		delete(entries, id)
	}
	if v := rdb.Get(t.Context(), prefix+":shards").Val(); v != "16" {
		t.Fatalf("P:shards rewritten to %q", v)
	}
}
