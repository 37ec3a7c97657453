package nats

import (
	"errors"
	"reflect"
	"regexp"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

// violationWait is how long a publish that may have been refused waits for the server's
// asynchronous permissions error to reach the error handler.
const violationWait = 100 * time.Millisecond

// maxViolationSubjects bounds the subjects remembered; past it the table is cleared.
const maxViolationSubjects = 10_000

// publishViolationRe extracts the subject of the server's
// `Permissions Violation for Publish to "subj"`.
var publishViolationRe = regexp.MustCompile(`(?i)permissions violation for publish to "([^"]+)"`)

// violations records the server's asynchronous publish permission violations per subject.
// Core NATS reports them only through the connection's error handler, after Publish
// returned nil; the Publisher correlates them with its publishes by subject and time.
// Safe for concurrent use.
type violations struct {
	mu      sync.Mutex
	last    map[string]time.Time // subject -> time of its latest violation
	changed chan struct{}        // closed and replaced on every recorded violation
	seen    map[error]struct{}   // the latest violation errors handled, as the handler got them
	ring    []error              // seen in arrival order, for eviction
}

// seenSize bounds the remembered error values.
const seenSize = 1024

func newViolations() *violations {
	return &violations{last: map[string]time.Time{}, changed: make(chan struct{}), seen: map[error]struct{}{}}
}

// install chains v's recorder in front of nc's current error handler.
func (v *violations) install(nc *natsgo.Conn) {
	prev := nc.Opts.AsyncErrorCB
	nc.SetErrorHandler(func(c *natsgo.Conn, sub *natsgo.Subscription, err error) {
		v.record(err)
		if prev != nil {
			prev(c, sub, err)
		}
	})
}

// record notes err if it is a publish permissions violation.
func (v *violations) record(err error) {
	if !errors.Is(err, natsgo.ErrPermissionViolation) {
		return
	}
	subj, ok := violatedSubject(err)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.last) >= maxViolationSubjects {
		clear(v.last)
	}
	v.last[subj] = time.Now()
	if isComparable(err) {
		if len(v.ring) >= seenSize {
			delete(v.seen, v.ring[0])
			v.ring = v.ring[1:]
		}
		v.ring = append(v.ring, err)
		v.seen[err] = struct{}{}
	}
	close(v.changed)
	v.changed = make(chan struct{})
}

// violatedSubject returns the subject named by a publish permissions violation.
func violatedSubject(err error) (string, bool) {
	m := publishViolationRe.FindStringSubmatch(err.Error())
	if len(m) < 2 {
		return "", false
	}
	return m[1], true
}

// since reports whether a violation for subject was recorded at or after t, and returns
// a channel closed at the next recorded violation.
func (v *violations) since(subject string, t time.Time) (bool, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	at, ok := v.last[subject]
	return ok && !at.Before(t), v.changed
}

// catchUp waits (up to d) until the handler has recorded the connection's latest
// publish permissions violation. Called after a flush: the server sent its -ERR for a
// refused publish before the PONG that ended the flush, so the read loop has already set
// it as the connection's last error and queued it for the error handler, which runs the
// queue in order on another goroutine. Once the handler got the last error, it got every
// earlier one, ours included. Without a pending violation it returns at once.
func (v *violations) catchUp(nc *natsgo.Conn, d time.Duration) {
	last := nc.LastError()
	if last == nil || !errors.Is(last, natsgo.ErrPermissionViolation) || !isComparable(last) {
		return
	}
	if _, ok := violatedSubject(last); !ok {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		v.mu.Lock()
		_, done := v.seen[last]
		changed := v.changed
		v.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		}
	}
}

// isComparable reports whether err can be a map key (nats.go's errors are pointers).
func isComparable(err error) bool {
	return reflect.TypeOf(err).Comparable()
}
