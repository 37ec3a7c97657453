package intake

import (
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// lookalikeRepeat is how long a look-alike header name stays quiet after its warning.
const lookalikeRepeat = time.Minute

// lookalikeNames bounds the names Lookalikes remembers for lookalikeRepeat: when that
// many distinct look-alikes were warned about within a minute, further new ones are
// counted but not logged until some are a minute old (a sender making up names cannot
// flood the log or grow the memory).
const lookalikeNames = 1000

// LookalikeCounter counts look-alike headers by the contract header they resemble
// (ingress.Metrics is the bridge's); safe for concurrent use.
type LookalikeCounter interface {
	Lookalike(header string)
}

// Lookalikes notices incoming headers whose name looks like a contract header's without
// being one (x-dealy, x-taget: within contract.LookalikeDistance edits, see
// contract.Lookalike). Such a message is handled as if the header were absent (x-dealy:
// 30s is delivered at once) and the header is forwarded, so the sender is told in the log:
// a warning once per header name (case-insensitive) per minute on the injected clock, and
// delaybridge_lookalike_headers_total{header=<the contract name it resembles>} for every
// one. Ingress and the message API share one. Safe for concurrent use; a nil *Lookalikes
// does nothing.
type Lookalikes struct {
	log     *slog.Logger
	metrics LookalikeCounter
	now     func() time.Time

	mu     sync.Mutex
	warned map[string]time.Time // lower-case name -> when it was last logged
}

// NewLookalikes returns a Lookalikes that logs to logger (component "ingress"), counts in
// metrics (nil: not counted) and reads the time from now (nil: time.Now).
func NewLookalikes(logger *slog.Logger, metrics LookalikeCounter, now func() time.Time) *Lookalikes {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	return &Lookalikes{log: logger.With("component", "ingress"), metrics: metrics, now: now, warned: map[string]time.Time{}}
}

// Check looks at the names of h, a message from source ("nats:delay.in", "http"). It
// allocates nothing unless a name is a look-alike, and never changes h.
func (l *Lookalikes) Check(h headers.List, source string) {
	if l == nil {
		return
	}
	for _, f := range h {
		if like := contract.Lookalike(f.Key); like != "" {
			l.found(f.Key, like, source)
		}
	}
}

// found counts the look-alike name and warns unless it was warned about within the
// minute.
func (l *Lookalikes) found(name, like, source string) {
	if l.metrics != nil {
		l.metrics.Lookalike(like)
	}
	key := strings.ToLower(name)
	now := l.now()
	l.mu.Lock()
	last, seen := l.warned[key]
	warn := !seen || now.Sub(last) >= lookalikeRepeat
	if warn && !seen && len(l.warned) >= lookalikeNames {
		l.forget(now)
		warn = len(l.warned) < lookalikeNames
	}
	if warn {
		l.warned[key] = now
	}
	l.mu.Unlock()
	if warn {
		l.log.Warn("header name looks like a contract header but is not one: the message is handled without it and delivered with it",
			"header", name, "resembles", like, "source", source)
	}
}

// forget drops the names last warned about a minute or more before now. l.mu is held.
func (l *Lookalikes) forget(now time.Time) {
	for k, at := range l.warned {
		if now.Sub(at) >= lookalikeRepeat {
			delete(l.warned, k)
		}
	}
}
