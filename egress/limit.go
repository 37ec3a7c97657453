package egress

import (
	"sync"
	"time"
)

// Put-back delays: a message whose target is at its in-flight limit is put back for the
// time since that target last completed a publish successfully, within these bounds. A
// slow but working target gets its messages back soon; a hanging one about every
// putBackMax, so its backlog costs a claim and a put-back per message per putBackMax.
const (
	putBackMin = 100 * time.Millisecond
	putBackMax = 5 * time.Second
)

// flowingFactor widens a target's in-flight limit while it is flowing: one of its
// publishes succeeded within the last putBackMin. The limit is there to keep a hanging
// target from holding the shards' capacity; a target that keeps confirming is not
// hanging, and holding it to the narrow limit would put back most of a burst to a
// healthy target again and again (a claim and a put-back per message, and the burst
// released many times slower). A target that turns from flowing to hanging takes at
// most flowingFactor x limit before its limit narrows, putBackMin later.
const flowingFactor = 32

// limiter bounds the messages of each target in Publish at once, over all shards of this
// replica: limit while the target is not flowing (it has never confirmed, or not within
// putBackMin), flowingFactor x limit while it is. Safe for concurrent use.
type limiter struct {
	mu        sync.Mutex
	limit     int
	now       func() time.Time
	targets   map[string]*targetLoad // targets with messages in flight or a recent success
	lastSweep time.Time
}

type targetLoad struct {
	inflight int
	// progress is when a publish of the target last succeeded, or when the target got
	// its first slot since it was idle (the put-back delay counts from it).
	progress time.Time
	// succeeded is when a publish of the target last succeeded; zero: not since it was
	// idle.
	succeeded time.Time
}

func newLimiter(limit int, now func() time.Time) *limiter {
	return &limiter{limit: limit, now: now, targets: map[string]*targetLoad{}}
}

// acquire takes up to n slots of target. It returns how many it took and, when that is
// fewer than n, how long the others should be put back for.
func (l *limiter) acquire(target string, n int) (int, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	t := l.targets[target]
	if t == nil {
		t = &targetLoad{progress: now}
		l.targets[target] = t
	}
	limit := l.limit
	if !t.succeeded.IsZero() && now.Sub(t.succeeded) < putBackMin {
		limit *= flowingFactor
	}
	got := max(min(n, limit-t.inflight), 0)
	t.inflight += got
	if got == n {
		return got, 0
	}
	return got, min(max(now.Sub(t.progress), putBackMin), putBackMax)
}

// release returns n slots of target after its Publish returned; progressed tells whether
// any of those messages was published.
func (l *limiter) release(target string, n int, progressed bool) {
	if n <= 0 {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.targets[target]
	if t == nil {
		return
	}
	t.inflight -= n
	if progressed {
		t.progress, t.succeeded = now, now
	}
	if t.inflight <= 0 && !progressed {
		delete(l.targets, target)
	}
}

// sweep drops, at most once per putBackMin, the idle targets whose last success is older
// than putBackMin: they would start narrow again anyway, and target names come from
// messages, so the map must not keep them. Called with l.mu held.
func (l *limiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < putBackMin {
		return
	}
	l.lastSweep = now
	for name, t := range l.targets {
		if t.inflight <= 0 && now.Sub(t.succeeded) >= putBackMin {
			delete(l.targets, name)
		}
	}
}
