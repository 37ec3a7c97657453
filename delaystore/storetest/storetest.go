// Package storetest gives tests of other packages a ready delay store on a real Redis
// (a spawned redis-server, or BRIDGE_TEST_REDIS_URL) under a random key prefix.
package storetest

import (
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// New returns an initialised store with 4 shards and the given lease; the client is
// closed in t.Cleanup.
func New(t testing.TB, lease time.Duration) *delaystore.Store {
	t.Helper()
	st, err := delaystore.New(testredis.Client(t), delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 4, Lease: lease})
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	if err := st.Init(t.Context()); err != nil {
		t.Fatalf("storetest: init: %v", err)
	}
	return st
}
