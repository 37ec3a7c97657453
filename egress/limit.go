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

// limiter bounds the messages of each target in Publish at once, over all shards of this
// replica. Safe for concurrent use.
type limiter struct {
	mu      sync.Mutex
	limit   int
	now     func() time.Time
	targets map[string]*targetLoad // only targets with messages in flight
}

type targetLoad struct {
	inflight int
	// progress is when a publish of the target last succeeded, or when the target got
	// its first slot since it was idle.
	progress time.Time
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
	t := l.targets[target]
	if t == nil {
		t = &targetLoad{progress: now}
		l.targets[target] = t
	}
	got := min(n, l.limit-t.inflight)
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
		t.progress = now
	}
	if t.inflight <= 0 {
		delete(l.targets, target)
	}
}
