package admin

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// Admin is the operator's side of a delay store: what the message API, the console and
// the CLI show and change besides single messages. It holds no Redis client of its own:
// every read and every change goes through the store's exported primitives, each change
// one of the store's scripts. Create it with New and call Init once before use. All
// methods are safe for concurrent use; every method that talks to Redis blocks until Redis
// answered or ctx is done.
type Admin struct {
	store *delaystore.Store
	// cursorKey seals cursors (cursor.go): read by Init and again by Open when a cursor
	// does not open with it.
	cursorKey atomic.Pointer[[]byte]
	// audit bounds the audit log (audit.go); lease and renew are opLease and opRenew
	// (tests shorten them).
	audit        AuditConfig
	lease, renew time.Duration
	// pauseSettle is how long Resume waits before its pass (pause.go; tests shorten it).
	pauseSettle time.Duration
}

// Option adjusts an Admin made by New.
type Option func(*Admin)

// New returns the operator's side of store, adjusted by opts. It does no I/O; call Init
// before use.
func New(store *delaystore.Store, opts ...Option) *Admin {
	a := &Admin{store: store, audit: DefaultAuditConfig(), lease: opLease, renew: opRenew, pauseSettle: pauseSettle}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Init reads the key that seals cursors from the store (created there by the first
// replica that asks). Until it succeeds, Seal seals with no key and Open refuses every
// cursor until it could read the key: the message API answers invalid_cursor, delivery
// is not concerned. It blocks until Redis answered or ctx is done; safe to call again.
func (a *Admin) Init(ctx context.Context) error {
	return a.loadCursorKey(ctx)
}

// allShards is every shard of the store, in order.
func (a *Admin) allShards() []int {
	out := make([]int, a.store.Shards())
	for i := range out {
		out[i] = i
	}
	return out
}
