package egress

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// shardCapacity bounds, per shard, the messages claimed and not yet settled, in units of
// BatchSize (so at most shardCapacity x BatchSize messages): the memory bound of egress.
// Which target may use that capacity is the limiter's business (limit.go).
const shardCapacity = 4

// worker owns one shard: it sleeps until the shard's head is due, claims into the shard's
// free capacity and hands each claimed batch to dispatch. Its settler (settle.go) settles
// the target groups as they complete.
type worker struct {
	shard   int
	offered atomic.Int64 // earliest due offered since the worker last looked; MaxInt64 = none
	kick    chan struct{}
	room    *capacity
	settle  *settler
	groups  sync.WaitGroup // target groups being published
}

func newWorker(shard, capacity int) *worker {
	w := &worker{shard: shard, kick: make(chan struct{}, 1), room: newCapacity(capacity), settle: newSettler()}
	w.offered.Store(math.MaxInt64)
	return w
}

// offer tells the worker that something may be due at due (Redis ms). Safe for concurrent
// use; never blocks.
func (w *worker) offer(due int64) {
	for {
		cur := w.offered.Load()
		if due >= cur || w.offered.CompareAndSwap(cur, due) {
			break
		}
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// runWorker claims the shard's due messages until ctx ends, then waits for the target
// groups in flight (each bounded by the lease fence and DrainTimeout) and for the settler.
func (e *Egress) runWorker(ctx context.Context, w *worker) {
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		e.runSettler(ctx, w)
	}()
	defer func() {
		w.groups.Wait()
		w.settle.close()
		<-settled
	}()
	next := int64(-1) // the shard's head as last known; -1: empty, wait for an offer
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	c := claimer{w: w, errWait: 100 * time.Millisecond}
	for {
		if o := w.offered.Swap(math.MaxInt64); o != math.MaxInt64 && (next < 0 || o < next) {
			next = o
		}
		if !e.waitDue(ctx, w, timer, next) {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		room, ok := w.room.reserve(ctx, e.cfg.BatchSize)
		if !ok {
			return
		}
		head, ok := e.claimInto(ctx, &c, room)
		if !ok {
			return
		}
		if head != noChange {
			next = head
		}
	}
}

// waitDue waits until next (Redis ms; -1: no head known) is due. It returns false when ctx
// ended or an offer came first (then the caller looks at the offers again).
func (e *Egress) waitDue(ctx context.Context, w *worker, timer *time.Timer, next int64) bool {
	var fire <-chan time.Time
	if next >= 0 {
		if d := e.clock.local(next).Sub(e.now()); d > 0 {
			timer.Reset(d)
			fire = timer.C
		} else {
			fire = closedTime
		}
	}
	select {
	case <-ctx.Done():
		return false
	case <-w.kick:
		timer.Stop()
		return false
	case <-fire:
		return true
	}
}

// noChange is claimInto's answer when the shard's head is not known anew (a failed claim).
const noChange = math.MinInt64

// claimer is the claim loop's error state: a streak of claim errors is logged once at Warn.
type claimer struct {
	w       *worker
	failing bool
	errWait time.Duration
}

// claimInto claims up to room messages (room is reserved in the shard's capacity; what is
// not claimed is given back) and dispatches them. It returns the shard's next head to wait
// for (the claim's Now when the claim was full: more may be due), or noChange after a
// failed claim, and false when ctx ended.
func (e *Egress) claimInto(ctx context.Context, c *claimer, room int) (int64, bool) {
	w := c.w
	// Before the claim: the lease runs from a moment after it. It becomes a context
	// deadline, so it is read from the process clock, never from e.now (a test clock
	// shifted by DELAYBRIDGE_TEST_CLOCK_OFFSET would put it in the past or future).
	fence := time.Now()
	cl, err := e.store.Claim(ctx, w.shard, room)
	w.room.release(room - len(cl.Messages))
	if err != nil {
		if ctx.Err() != nil {
			return noChange, false
		}
		if !c.failing {
			e.log.Warn("claim failed; retrying with backoff", "shard", w.shard, "err", err)
			c.failing = true
		} else {
			e.log.Debug("claim failed", "shard", w.shard, "err", err)
		}
		if !sleep(ctx, c.errWait) {
			return noChange, false
		}
		c.errWait = min(2*c.errWait, 5*time.Second)
		return noChange, true
	}
	if c.failing {
		e.log.Info("claim recovered", "shard", w.shard)
		c.failing = false
	}
	c.errWait = 100 * time.Millisecond
	e.clock.observe(cl.Now, e.now())
	if len(cl.Corrupt) > 0 {
		e.quarantine(ctx, cl.Corrupt)
	}
	if len(cl.Messages) > 0 {
		e.dispatch(ctx, w, cl.Messages, fence)
	}
	if len(cl.Messages) == room {
		return cl.Now, true // more may be due: claim again at once (capacity permitting)
	}
	return cl.Next, true
}

var closedTime = func() chan time.Time { c := make(chan time.Time); close(c); return c }()

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// capacity counts a shard's messages claimed and not yet settled. Safe for concurrent use.
type capacity struct {
	mu    sync.Mutex
	used  int
	max   int
	freed chan struct{} // signalled (buffered, 1) when release makes room
}

func newCapacity(max int) *capacity {
	return &capacity{max: max, freed: make(chan struct{}, 1)}
}

// reserve waits until there is room and reserves up to n; false when ctx ended first.
func (c *capacity) reserve(ctx context.Context, n int) (int, bool) {
	for {
		c.mu.Lock()
		if free := c.max - c.used; free > 0 {
			got := min(n, free)
			c.used += got
			c.mu.Unlock()
			return got, true
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, false
		case <-c.freed:
		}
	}
}

// release gives n reserved messages back.
func (c *capacity) release(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.used -= n
	c.mu.Unlock()
	select {
	case c.freed <- struct{}{}:
	default:
	}
}

// quarantine handles entries whose envelope could not be decoded: they cannot be
// published or dead-lettered, so they stay in Redis for an operator, tried again only
// every BackoffMax, and are logged at Error.
func (e *Egress) quarantine(ctx context.Context, corrupt []delaystore.Receipt) {
	reqs := make([]delaystore.RetryRequest, len(corrupt))
	for i, r := range corrupt {
		reqs[i] = delaystore.RetryRequest{Receipt: r, Backoff: e.cfg.BackoffMax}
		e.log.Error("corrupt envelope in the delay store; left in place", "id", r.ID, "shard", r.Shard)
	}
	if _, err := e.store.Retry(ctx, reqs); err != nil {
		e.log.Error("reschedule corrupt entries", "err", err)
	}
}
