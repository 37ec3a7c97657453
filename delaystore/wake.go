package delaystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Special values of Wake.Shard.
const (
	// WakeResync: the subscription was (re)established; wake-ups may have been missed, so
	// re-read the heads of the followed shards.
	WakeResync = -1
	// WakeFleet: the membership version moved (Heartbeat, Leave); Wake.Due holds the new
	// version.
	WakeFleet = -2
	// WakePauses: the pause set changed (PauseTarget, ResumeTarget): read it again.
	WakePauses = -3
	// WakeTails: a relay announced that it has live-event tails (AnnounceTails); Wake.ID
	// is its id.
	WakeTails = -4
)

// Notices on the fleet channel besides the membership version (a number).
const (
	noticePauses = "pause"
	noticeTails  = "tails:"
)

// ErrWakeupsClosed is returned by Wakeups.Follow after Close or after the context of
// Store.Wakeups ended.
var ErrWakeupsClosed = errors.New("delaystore: wake-up subscription closed")

// Wakeups is one pub/sub connection following the fleet channel ("P:wake:fleet") and the
// wake channels ("P:wake:<s>") of a set of shards. Make it with Store.Wakeups. Its methods
// are safe for concurrent use.
type Wakeups struct {
	// C delivers the wake-ups: Wake{Shard: s, Due} when a park made followed shard s's head
	// earlier, Wake{Shard: WakeFleet, Due: version} when the membership version moved,
	// Wake{Shard: WakePauses} when the pause set changed, Wake{Shard: WakeTails, ID: relay}
	// when a relay announced tails, and Wake{Shard: WakeResync} once the subscription is
	// established and again after every reconnect (notices may have been missed). It is closed when the context of Store.Wakeups ends or Close is called.
	// The caller must keep reading it: while it does not, wake-ups queue up coalesced (per
	// shard the earliest due, the latest fleet version, one resync), so a slow reader loses
	// nothing but their order and count.
	C <-chan Wake

	s        *Store
	ps       *redis.PubSub
	done     chan struct{} // closed when the reader goroutine ends
	followMu sync.Mutex    // serialises Follow

	mu          sync.Mutex
	followed    map[string]bool // channel of a followed shard -> its subscription was confirmed
	unconfirmed int             // followed channels not confirmed yet
	ready       chan struct{}   // closed by the reader when unconfirmed reaches 0 (nil: nobody waits)
	closeOnce   sync.Once
	closeErr    error
}

// wakeBuffer is the capacity of Wakeups.C.
const wakeBuffer = 64

// Wakeups subscribes to the fleet channel ("<prefix>:wake:fleet") only (add shards with
// Follow) and blocks until Redis confirmed the subscription, or ctx is done (its error is
// returned). The first Wake on C is {Shard: WakeResync}. C is closed when ctx is done, Close
// is called or the Redis client is closed. Each call makes its own connection; safe for
// concurrent use.
func (s *Store) Wakeups(ctx context.Context) (*Wakeups, error) {
	ps := s.rdb.Subscribe(ctx, s.fleetChannel)
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	// The first reply is the subscription confirmation: a failed connection shows here.
	msg, err := ps.ReceiveTimeout(ctx, 10*time.Second)
	if err == nil {
		if _, ok := msg.(*redis.Subscription); !ok {
			err = fmt.Errorf("unexpected first message %T", msg)
		}
	}
	if err != nil {
		stop()
		_ = ps.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("subscribe %s: %w", s.fleetChannel, err)
	}
	out := make(chan Wake, wakeBuffer)
	w := &Wakeups{C: out, s: s, ps: ps, done: make(chan struct{}), followed: map[string]bool{}}
	in := ps.ChannelWithSubscriptions() // go-redis pings and re-subscribes by itself
	go func() {
		// On return, in this order: stop and drain, then done (Follow answers
		// ErrWakeupsClosed from then on), then C: a reader that sees C closed finds done
		// closed too.
		defer close(out)
		defer close(w.done)
		defer func() {
			stop()
			_ = w.Close()
			for range in { // let go-redis's receive goroutine finish
			}
		}()
		w.run(ctx, in, out)
	}()
	return w, nil
}

// run moves messages from in to out until in is closed or ctx is done, never blocking on
// out: pending wake-ups are kept coalesced until the reader takes them.
func (w *Wakeups) run(ctx context.Context, in <-chan any, out chan<- Wake) {
	q := wakeQueue{due: map[int]int64{}}
	q.add(Wake{Shard: WakeResync})
	for {
		var send chan<- Wake
		var next Wake
		if q.len() > 0 {
			send, next = out, q.peek()
		}
		select {
		case <-ctx.Done():
			return
		case send <- next:
			q.pop()
		case m, ok := <-in:
			if !ok {
				return
			}
			if wk, ok := w.receive(m); ok {
				q.add(wk)
			}
		}
	}
}

// receive turns one pub/sub message into a wake-up (false: none), and notes subscription
// confirmations for Follow.
func (w *Wakeups) receive(m any) (Wake, bool) {
	switch m := m.(type) {
	case *redis.Subscription:
		if m.Kind != "subscribe" {
			return Wake{}, false
		}
		if m.Channel == w.s.fleetChannel {
			return Wake{Shard: WakeResync}, true // the first, or a reconnect: go-redis resubscribed all
		}
		w.mu.Lock()
		if ok, known := w.followed[m.Channel]; known && !ok {
			w.followed[m.Channel] = true
			w.unconfirmed--
			if w.unconfirmed == 0 && w.ready != nil {
				close(w.ready)
				w.ready = nil
			}
		}
		w.mu.Unlock()
	case *redis.Message:
		if m.Channel == w.s.fleetChannel {
			return fleetNotice(m.Payload)
		}
		w.mu.Lock()
		_, followed := w.followed[m.Channel]
		w.mu.Unlock()
		if !followed {
			return Wake{}, false // dropped by Follow meanwhile
		}
		wk, ok := w.s.parseWake(m.Payload)
		if !ok || w.s.keys[wk.Shard].wake != m.Channel {
			return Wake{}, false // not ours; the periodic resync covers any gap
		}
		return wk, true
	}
	return Wake{}, false
}

// Follow changes the followed shard channels to exactly shards: it subscribes the new ones
// and unsubscribes the dropped ones, on the Wakeups' connection, and blocks until Redis
// confirmed every followed channel (so a park after Follow returned is heard), or ctx is
// done (its error is returned; the change stands, and the next Follow subscribes the
// channels still unconfirmed again and waits for them). A shard out of range is an error and changes nothing. After
// Close it returns an error wrapping ErrWakeupsClosed. Concurrent calls are serialised.
func (w *Wakeups) Follow(ctx context.Context, shards []int) error {
	want := make(map[string]bool, len(shards))
	for _, sh := range shards {
		if err := w.s.checkShard(sh); err != nil {
			return fmt.Errorf("follow: %w", err)
		}
		want[w.s.keys[sh].wake] = true
	}
	w.followMu.Lock()
	defer w.followMu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	select {
	case <-w.done:
		return fmt.Errorf("follow: %w", ErrWakeupsClosed)
	default:
	}
	add, drop := w.retarget(want)
	// Errors of a broken connection are left to go-redis: it records the channels first and
	// resubscribes them after the reconnect; the wait below sees the confirmations (or the
	// next Follow subscribes them again).
	if len(drop) > 0 {
		if err := w.ps.Unsubscribe(ctx, drop...); err != nil && w.closed() {
			return fmt.Errorf("follow: %w", ErrWakeupsClosed)
		}
	}
	if len(add) > 0 {
		if err := w.ps.Subscribe(ctx, add...); err != nil && w.closed() {
			return fmt.Errorf("follow: %w", ErrWakeupsClosed)
		}
	}
	return w.awaitConfirmed(ctx)
}

// retarget makes want the followed channels: it returns the channels to SUBSCRIBE (new
// ones, and those an earlier call left unconfirmed) and those to UNSUBSCRIBE, and counts
// the unconfirmed ones.
func (w *Wakeups) retarget(want map[string]bool) (add, drop []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch, ok := range w.followed {
		if !want[ch] {
			drop = append(drop, ch)
			delete(w.followed, ch)
			if !ok {
				w.unconfirmed--
			}
		}
	}
	for ch := range want {
		confirmed, ok := w.followed[ch]
		if !ok {
			w.followed[ch] = false
			w.unconfirmed++
		}
		if !confirmed { // new, or left unconfirmed by an earlier call: SUBSCRIBE (again)
			add = append(add, ch)
		}
	}
	return add, drop
}

// awaitConfirmed blocks until Redis confirmed every followed channel, ctx is done or the
// Wakeups are closed.
func (w *Wakeups) awaitConfirmed(ctx context.Context) error {
	w.mu.Lock()
	if w.unconfirmed == 0 {
		w.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	w.ready = ready
	w.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		if w.ready == ready {
			w.ready = nil
		}
		w.mu.Unlock()
		return fmt.Errorf("follow: %d channels not confirmed: %w", w.pending(), ctx.Err())
	case <-w.done:
		return fmt.Errorf("follow: %w", ErrWakeupsClosed)
	}
}

func (w *Wakeups) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unconfirmed
}

func (w *Wakeups) closed() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Close ends the subscription: C is closed soon after (once the reader goroutine ended). It
// does not block on Redis; calling it again does nothing.
func (w *Wakeups) Close() error {
	w.closeOnce.Do(func() {
		if err := w.ps.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			w.closeErr = err
		}
	})
	return w.closeErr
}

// parseWake parses "<shard>:<due ms>", or a withdrawal "<shard>:x<version>:<id>" (cancel.lua,
// park.lua; a bridge before them finds no number after the first colon and ignores it).
func (s *Store) parseWake(p string) (Wake, bool) {
	a, b, ok := strings.Cut(p, ":")
	if !ok {
		return Wake{}, false
	}
	if rest, ok := strings.CutPrefix(b, "x"); ok {
		v, id, ok := strings.Cut(rest, ":")
		sh, err1 := strconv.Atoi(a)
		ver, err2 := strconv.ParseInt(v, 10, 64)
		if !ok || id == "" || err1 != nil || err2 != nil || sh < 0 || sh >= s.shards {
			return Wake{}, false
		}
		return Wake{Shard: sh, ID: id, Version: ver}, true
	}
	sh, err1 := strconv.Atoi(a)
	due, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || sh < 0 || sh >= s.shards {
		return Wake{}, false
	}
	return Wake{Shard: sh, Due: due}, true
}

// fleetNotice reads a message of the fleet channel: the membership version, the pause
// notice, or a relay's tails notice (false: none of them, not ours).
func fleetNotice(p string) (Wake, bool) {
	if p == noticePauses {
		return Wake{Shard: WakePauses}, true
	}
	if id, ok := strings.CutPrefix(p, noticeTails); ok && id != "" {
		return Wake{Shard: WakeTails, ID: id}, true
	}
	v, err := strconv.ParseInt(p, 10, 64)
	if err != nil {
		return Wake{}, false // the heartbeat reads the version anyway
	}
	return Wake{Shard: WakeFleet, Due: v}, true
}

// wakeQueue holds the wake-ups not yet taken by the reader, coalesced: per shard the
// earliest due, for WakeFleet the latest version, one WakeResync; first come first out.
// Withdrawals are not coalesced: they go first, in order, at most maxWithdrawals of them
// (more are dropped: best effort, see Wake).
type wakeQueue struct {
	order []int
	due   map[int]int64
	drops []Wake
}

// maxWithdrawals bounds the withdrawals a wakeQueue keeps while the reader is slow.
const maxWithdrawals = 4096

func (q *wakeQueue) len() int { return len(q.drops) + len(q.order) }

func (q *wakeQueue) add(w Wake) {
	if w.ID != "" {
		if len(q.drops) < maxWithdrawals {
			q.drops = append(q.drops, w)
		}
		return
	}
	old, ok := q.due[w.Shard]
	switch {
	case !ok:
		q.order = append(q.order, w.Shard)
		q.due[w.Shard] = w.Due
	case w.Shard == WakeFleet && w.Due > old, w.Shard >= 0 && w.Due < old:
		q.due[w.Shard] = w.Due
	}
}

func (q *wakeQueue) peek() Wake {
	if len(q.drops) > 0 {
		return q.drops[0]
	}
	return Wake{Shard: q.order[0], Due: q.due[q.order[0]]}
}

func (q *wakeQueue) pop() {
	if len(q.drops) > 0 {
		q.drops = q.drops[1:]
		return
	}
	delete(q.due, q.order[0])
	q.order = q.order[1:]
}
