package e2e

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStoreOfAnotherFormatRefused: a bridge whose Redis holds a store of another format
// (P:shards not "<N>,p<R>,v1") does not start: it exits non-zero with a line naming the
// key's value and the drain-and-recreate procedure of docs/operating.md ("Store format"),
// and leaves the store as it was.
func TestStoreOfAnotherFormatRefused(t *testing.T) {
	s := newStack(t)
	prefix := s.env["BRIDGE_KEY_PREFIX"]
	opts, err := redis.ParseURL(s.env["BRIDGE_REDIS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	for _, mark := range []string{"16,p4096,c2", "16"} {
		if err := rdb.Set(t.Context(), prefix+":shards", mark, 0).Err(); err != nil {
			t.Fatal(err)
		}
		b := startProcess(t, s.env)
		if err := b.Wait(t, 20*time.Second); err == nil {
			t.Fatalf("the bridge started on a store marked %q", mark)
		}
		out := b.Out.String()
		if !contains(out, mark) || !contains(out, "Store format") || contains(out, "delaybridge running") {
			t.Fatalf("want a stop naming %q and the procedure:\n%s", mark, out)
		}
		if v := rdb.Get(t.Context(), prefix+":shards").Val(); v != mark {
			t.Fatalf("P:shards rewritten from %q to %q", mark, v)
		}
	}
}
