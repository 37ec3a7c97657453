package delaystore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// replicated is a store with MinReplicas 1 on a primary with one replica, a raw client of
// the replica, and the store's log.
type replicated struct {
	s                *Store
	primary, replica *testredis.Server
	rdb, onReplica   *redis.Client
	prefix           string
	log              *lockedLog
}

type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newReplicated(t *testing.T) *replicated {
	t.Helper()
	primary := testredis.Start(t)
	replica := testredis.StartReplica(t, primary)
	r := &replicated{primary: primary, replica: replica, prefix: testredis.Prefix(t), log: &lockedLog{}}
	r.rdb = redis.NewClient(&redis.Options{Addr: primary.Addr()})
	r.onReplica = redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { r.rdb.Close(); r.onReplica.Close() })
	r.s = r.store(t, r.rdb, 1)
	return r
}

// store is a Store over rdb with MinReplicas n, a 300 ms WAIT and r's log, initialised.
func (r *replicated) store(t *testing.T, rdb redis.UniversalClient, n int) *Store {
	t.Helper()
	s, err := New(rdb, Config{KeyPrefix: r.prefix, Shards: 4, Lease: 30 * time.Second, MinReplicas: n, WaitTimeout: 2 * time.Second},
		WithLogger(slog.New(slog.NewTextHandler(r.log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// onReplicaHas reports whether the replica holds an envelope for id.
func (r *replicated) onReplicaHas(t *testing.T, id string) bool {
	t.Helper()
	n, err := r.onReplica.HExists(t.Context(), r.s.keys[r.s.ShardOf(id)].m, id).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func parkOne(ctx context.Context, s *Store, id string) error {
	_, err := s.Park(ctx, []ParkRequest{{ID: id, Delay: time.Hour, Envelope: sampleEnvelope(1)}})
	return err
}

// TestWaitConfirms: with MinReplicas 1, a Park or Cancel that returned is on the replica
// already, and a paused replica fails every write with ErrNotReplicated, counted and
// logged once per streak, until it resumes.
func TestWaitConfirms(t *testing.T) {
	r := newReplicated(t)
	ctx := t.Context()
	for i := range 50 {
		id := fmt.Sprintf("m-%d", i)
		if err := parkOne(ctx, r.s, id); err != nil {
			t.Fatal(err)
		}
		if !r.onReplicaHas(t, id) { // read at once: WAIT returned only after the replica had it
			t.Fatalf("%s parked but not on the replica yet", id)
		}
	}
	if ok, err := r.s.Cancel(ctx, "m-0"); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if r.onReplicaHas(t, "m-0") {
		t.Fatal("m-0 cancelled but still on the replica")
	}
	if n := r.s.WaitShortfalls(); n != 0 {
		t.Fatalf("%d shortfalls with a healthy replica", n)
	}

	r.replica.Signal(t, syscall.SIGSTOP)
	for i := range 3 {
		err := parkOne(ctx, r.s, fmt.Sprintf("stopped-%d", i))
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("park with the replica stopped: %v, want ErrNotReplicated", err)
		}
	}
	if _, err := r.s.Cancel(ctx, "m-1"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("cancel with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if n := r.s.WaitShortfalls(); n != 4 {
		t.Fatalf("WaitShortfalls %d, want 4", n)
	}
	r.replica.Signal(t, syscall.SIGCONT)
	if err := parkOne(ctx, r.s, "stopped-0"); err != nil { // repeated: idempotent, confirmed now
		t.Fatal(err)
	}
	if !r.onReplicaHas(t, "stopped-0") {
		t.Fatal("stopped-0 confirmed but not on the replica")
	}
	out := r.log.String()
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Fatalf("%d Warn lines for one streak, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "confirm writes again") {
		t.Fatalf("no recovery line:\n%s", out)
	}
	t.Logf("log:\n%s", out)
}

// TestWaitFence: a repeated park that writes nothing (the id exists), sent on another
// connection than the first attempt, must still wait for the first attempt's write; the
// INCRBY 0 fence moves the connection's offset to the master's.
func TestWaitFence(t *testing.T) {
	r := newReplicated(t)
	ctx := t.Context()
	r.replica.Signal(t, syscall.SIGSTOP)
	if err := parkOne(ctx, r.s, "a"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("first attempt: %v, want ErrNotReplicated", err)
	}
	// A second replica of the bridge: its own client, fresh connections.
	other := redis.NewClient(&redis.Options{Addr: r.primary.Addr()})
	t.Cleanup(func() { other.Close() })
	s2, err := New(other, Config{KeyPrefix: r.prefix, Shards: 4, Lease: 30 * time.Second, MinReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The layout Init would read (r.s's), set without Init: no command may touch the
	// new client's connections before the repeated park.
	s2.run.Store(r.s.run.Load())
	s2.layoutKnown.Store(true)
	if err := parkOne(ctx, s2, "a"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("repeated on another connection while the replica lags: %v, want ErrNotReplicated", err)
	}
	if _, err := s2.Cancel(ctx, "never-parked"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("a cancel that deletes nothing while the replica lags: %v, want ErrNotReplicated", err)
	}
	r.replica.Signal(t, syscall.SIGCONT)
	if err := parkOne(ctx, s2, "a"); err != nil {
		t.Fatal(err)
	}
	if !r.onReplicaHas(t, "a") {
		t.Fatal("a confirmed but not on the replica")
	}
}

// TestWaitAfterNoScript: calls answered NOSCRIPT are resent with EVAL in a second
// pipeline, which needs its own WAIT.
func TestWaitAfterNoScript(t *testing.T) {
	r := newReplicated(t)
	ctx := t.Context()
	if err := r.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := parkOne(ctx, r.s, "after-flush"); err != nil {
		t.Fatal(err)
	}
	if !r.onReplicaHas(t, "after-flush") {
		t.Fatal("parked after SCRIPT FLUSH but not on the replica")
	}
	r.replica.Signal(t, syscall.SIGSTOP)
	if err := r.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := parkOne(ctx, r.s, "flushed-stopped"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("EVAL resend with the replica stopped: %v, want ErrNotReplicated", err)
	}
	r.replica.Signal(t, syscall.SIGCONT)
}

// TestInitCountsReplicas: Init logs the replicas and refuses a master with fewer than
// MinReplicas.
func TestInitCountsReplicas(t *testing.T) {
	r := newReplicated(t)
	if !strings.Contains(r.log.String(), "connected_replicas=1") {
		t.Fatalf("Init did not log the replicas:\n%s", r.log.String())
	}
	s, err := New(r.rdb, Config{KeyPrefix: r.prefix, Shards: 4, Lease: time.Second, MinReplicas: 2, WaitTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Init(t.Context())
	if !errors.Is(err, ErrTooFewReplicas) || !strings.Contains(err.Error(), r.primary.Addr()+" (role master) has 1 connected replicas") {
		t.Fatalf("Init with MinReplicas 2 and 1 replica: %v", err)
	}
	t.Log(err)

	alone := redis.NewClient(&redis.Options{Addr: testredis.Start(t).Addr()})
	t.Cleanup(func() { alone.Close() })
	for _, n := range []int{0, 1} {
		s, err := New(alone, Config{KeyPrefix: r.prefix, Shards: 4, Lease: time.Second, MinReplicas: n, WaitTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Init(t.Context())
		if n == 0 && err != nil || n == 1 && !errors.Is(err, ErrTooFewReplicas) {
			t.Fatalf("no replica, MinReplicas %d: Init = %v", n, err)
		}
	}
}

func TestNewChecksWaitConfig(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rdb.Close() })
	for _, tc := range []struct {
		n       int
		timeout time.Duration
		ok      bool
	}{
		{0, 0, true}, {1, time.Millisecond, true}, {-1, time.Second, false}, {1, 0, false}, {2, time.Microsecond, false},
	} {
		_, err := New(rdb, Config{KeyPrefix: "p", Shards: 1, Lease: time.Second, MinReplicas: tc.n, WaitTimeout: tc.timeout})
		if (err == nil) != tc.ok {
			t.Errorf("MinReplicas %d, WaitTimeout %s: New = %v", tc.n, tc.timeout, err)
		}
	}
}

// TestClusterWait: on a Cluster of 3 masters with one replica each, WAIT runs on the
// master of each shard: with one replica stopped, only that master's shards fail.
func TestClusterWait(t *testing.T) {
	c := testredis.StartCluster(t, testredis.ClusterOptions{Replicas: 1})
	rdb := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s, err := New(rdb, Config{KeyPrefix: testredis.Prefix(t), Shards: 16, Lease: time.Second, MinReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	reqs := make([]ParkRequest, 200)
	for i := range reqs {
		reqs[i] = ParkRequest{ID: fmt.Sprintf("c-%d", i), Delay: time.Hour, Envelope: sampleEnvelope(i)}
	}
	if _, err := s.Park(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Cancel(ctx, "c-1"); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if n := s.WaitShortfalls(); n != 0 {
		t.Fatalf("%d shortfalls", n)
	}

	// Stop the replica of the master that owns shard 0; park one id per shard.
	owner, err := c.Owner(ctx, testredis.KeySlot(s.keys[0].z))
	if err != nil {
		t.Fatal(err)
	}
	var replica *testredis.Server
	for _, n := range c.Nodes[3:] {
		nc := redis.NewClient(&redis.Options{Addr: n.Addr()})
		info, err := nc.Info(ctx, "replication").Result()
		nc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, fmt.Sprintf("master_port:%s\r", owner.Addr()[strings.LastIndex(owner.Addr(), ":")+1:])) {
			replica = n
		}
	}
	if replica == nil {
		t.Fatal("no replica of shard 0's master found")
	}
	replica.Signal(t, syscall.SIGSTOP)
	defer replica.Signal(t, syscall.SIGCONT)
	failed := 0
	for sh := range 16 {
		id := ""
		for i := 0; id == ""; i++ {
			if cand := fmt.Sprintf("s%d-%d", sh, i); s.ShardOf(cand) == sh {
				id = cand
			}
		}
		o, err := c.Owner(ctx, testredis.KeySlot(s.keys[sh].z))
		if err != nil {
			t.Fatal(err)
		}
		err = parkOne(ctx, s, id)
		switch {
		case o == owner && !errors.Is(err, ErrNotReplicated):
			t.Errorf("shard %d on the master with the stopped replica: %v, want ErrNotReplicated", sh, err)
		case o != owner && err != nil:
			t.Errorf("shard %d on another master: %v", sh, err)
		}
		if err != nil {
			failed++
		}
	}
	if failed == 0 || uint64(failed) != s.WaitShortfalls() {
		t.Fatalf("%d parks failed, %d shortfalls", failed, s.WaitShortfalls())
	}
	t.Logf("%d of 16 shards on the master whose replica was stopped failed with ErrNotReplicated", failed)
}

// BenchmarkParkWait measures Park on a primary with one replica, without and with
// MinReplicas 1 (the WAIT after each pipeline), for a single message and for a
// 256-message batch over 16 shards (ingress's lane batch). ns/op is per Park call.
func BenchmarkParkWait(b *testing.B) {
	primary := testredis.Start(b, "--appendfsync", "everysec")
	testredis.StartReplica(b, primary, "--appendfsync", "everysec")
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	b.Cleanup(func() { rdb.Close() })
	payload := make([]byte, 100)
	for _, batch := range []int{1, 256} {
		for _, n := range []int{0, 1} {
			b.Run(fmt.Sprintf("batch=%d/min_replicas=%d", batch, n), func(b *testing.B) {
				s, err := New(rdb, Config{KeyPrefix: testredis.Prefix(b), Shards: 16, Lease: time.Second, MinReplicas: n, WaitTimeout: time.Second})
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Init(b.Context()); err != nil {
					b.Fatal(err)
				}
				reqs := make([]ParkRequest, batch)
				b.ResetTimer()
				for i := range b.N {
					for k := range reqs {
						reqs[k] = ParkRequest{ID: fmt.Sprintf("01J%012d%06d", i, k), Delay: time.Hour,
							Envelope: Envelope{Target: "nats:orders.timeout", Source: "nats:delay.in", Payload: payload}}
					}
					if _, err := s.Park(b.Context(), reqs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestClusterWaitMoved: a shard's slot moves to another master behind the store's back.
// The confirmed park goes to the master the store's slot map names, which answers MOVED:
// the script did not run, the park fails, and after the slot map's reload a repeat is
// confirmed on the new master.
func TestClusterWaitMoved(t *testing.T) {
	c := testredis.StartCluster(t, testredis.ClusterOptions{Replicas: 1})
	rdb := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s, err := New(rdb, Config{KeyPrefix: testredis.Prefix(t), Shards: 4, Lease: time.Second, MinReplicas: 1, WaitTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for i := 0; len(ids) < 2; i++ {
		if id := fmt.Sprintf("m-%d", i); s.ShardOf(id) == 0 {
			ids = append(ids, id)
		}
	}
	if err := parkOne(ctx, s, ids[0]); err != nil { // the store's client now knows the slot map
		t.Fatal(err)
	}
	slot := testredis.KeySlot(s.keys[0].z)
	from, err := c.Owner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	if _, err := c.MoveSlot(ctx, slot, to); err != nil {
		t.Fatal(err)
	}
	err = parkOne(ctx, s, ids[1])
	if err == nil || !strings.Contains(err.Error(), "MOVED") {
		t.Fatalf("park to the old master: %v, want a MOVED error", err)
	}
	t.Log(err)
	moved := time.Now()
	deadline := moved.Add(10 * time.Second)
	for err != nil {
		if time.Now().After(deadline) {
			t.Fatalf("park after the move still fails: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
		err = parkOne(ctx, s, ids[1])
	}
	t.Logf("confirmed on the new master %s after the MOVED", time.Since(moved).Round(time.Millisecond))
	n := redis.NewClient(&redis.Options{Addr: to.Addr()})
	defer n.Close()
	if ok, err := n.HExists(ctx, s.keys[0].m, ids[1]).Result(); err != nil || !ok {
		t.Fatalf("%s not on the new master %s: %v %v", ids[1], to.Addr(), ok, err)
	}
}

// TestPrimaryGoneFailsWrites: with MinReplicas 1 and the primary killed, every write
// (a park to a target new to the store, one to a known target, cancels, a bulk change)
// returns an error and nothing panics (a failed name lookup once left Park an empty
// call list, and sendPipeline read its fence at index 0); with the primary back, the
// same writes succeed without a new Store.
func TestPrimaryGoneFailsWrites(t *testing.T) {
	r := newReplicated(t)
	ctx := t.Context()
	if err := parkOne(ctx, r.s, "before"); err != nil {
		t.Fatal(err)
	}
	park := func(ctx context.Context, id, target string) error {
		env := sampleEnvelope(1)
		env.Target = target
		_, err := r.s.Park(ctx, []ParkRequest{{ID: id, Delay: time.Hour, Envelope: env}})
		return err
	}
	writes := []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"park to a new target", func(ctx context.Context) error { return park(ctx, "new", "nats:never.seen") }},
		{"park to a known target", func(ctx context.Context) error { return parkOne(ctx, r.s, "before") }}, // its shard holds the name
		{"cancel", func(ctx context.Context) error { _, err := r.s.Cancel(ctx, "before"); return err }},
		{"cancel at", func(ctx context.Context) error { _, err := r.s.CancelAt(ctx, "x", time.Now().UnixMilli()); return err }},
		{"bulk cancel", func(ctx context.Context) error {
			_, err := r.s.Change(ctx, r.s.ShardOf("before"), BulkOp{Kind: BulkCancel}, []Pick{{ID: "before", Version: 1}}, nil)
			return err
		}},
		{"bulk cancel saving progress", func(ctx context.Context) error {
			_, err := r.s.Change(ctx, 0, BulkOp{Kind: BulkCancel}, nil, &Progress{OpID: "op", Next: "d,,", Keep: time.Minute})
			return err
		}},
	}
	r.primary.Kill()
	if got := r.s.runList(ctx, &callList{}, true); got != nil { // no call: no I/O, no WAIT
		t.Fatalf("runList of no calls: %v", got)
	}
	if got := r.s.evalConfirmed(ctx, nil, nil); got != nil {
		t.Fatalf("evalConfirmed of no calls: %v", got)
	}
	for _, w := range writes {
		t.Run("down/"+w.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := w.do(ctx); err == nil {
				t.Fatal("succeeded with the primary gone")
			} else {
				t.Log(err)
			}
		})
	}
	r.primary.Restart(t)
	deadline := time.Now().Add(30 * time.Second)
	for { // the replica reconnects by itself; until then WAIT falls short
		err := park(ctx, "after", "nats:also.new")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no park 30 s after the primary came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !r.onReplicaHas(t, "after") {
		t.Fatal("parked after the restart but not on the replica")
	}
	for _, w := range writes {
		if err := w.do(ctx); err != nil {
			t.Fatalf("%s with the primary back: %v", w.name, err)
		}
	}
}

// TestWaitConfirmsPause: with MinReplicas 1 a pause or resume that returned is on the
// replica already (a failover keeps it), and with the replica stopped both fail with
// ErrNotReplicated, a repeat that changes nothing too, until the replica is back.
func TestWaitConfirmsPause(t *testing.T) {
	r := newReplicated(t)
	ctx := t.Context()
	onReplica := func() string {
		t.Helper()
		v, err := r.onReplica.HGet(ctx, r.s.pauseKey, "orders.*").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return v
	}
	if c, err := r.s.PauseTarget(ctx, "orders.*"); err != nil || !c.Changed {
		t.Fatalf("pause: %+v %v", c, err)
	}
	if v := onReplica(); !strings.HasPrefix(v, "p,") { // read at once: WAIT returned after the replica had it
		t.Fatalf("paused, but the replica holds %q", v)
	}

	r.replica.Signal(t, syscall.SIGSTOP)
	if _, err := r.s.ResumeTarget(ctx, "orders.*"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("resume with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if _, err := r.s.PauseTarget(ctx, "billing.*"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("pause with the replica stopped: %v, want ErrNotReplicated", err)
	}
	// Repeated from another bridge replica (other connections): billing.* is paused on the
	// primary already, so the script writes nothing; the answer must still wait for the
	// first attempt's write.
	other := redis.NewClient(&redis.Options{Addr: r.primary.Addr()})
	t.Cleanup(func() { other.Close() })
	s2, err := New(other, Config{KeyPrefix: r.prefix, Shards: 4, Lease: 30 * time.Second, MinReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s2.PauseTarget(ctx, "billing.*"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("a repeated pause while the replica lags: %+v %v, want ErrNotReplicated", c, err)
	}
	r.replica.Signal(t, syscall.SIGCONT)
	if c, err := s2.PauseTarget(ctx, "billing.*"); err != nil || c.Changed {
		t.Fatalf("repeated pause with the replica back: %+v %v, want confirmed, unchanged", c, err)
	}
	if c, err := r.s.ResumeTarget(ctx, "orders.*"); err != nil || c.Changed {
		t.Fatalf("repeated resume with the replica back: %+v %v, want confirmed, unchanged", c, err)
	}
	if v := onReplica(); !strings.HasPrefix(v, "r,") {
		t.Fatalf("resumed, but the replica holds %q", v)
	}
}
