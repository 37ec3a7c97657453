package redrive

import (
	"context"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/backoff"
)

// letterWatch follows the dead letters stored after a run started, and remembers the
// contract.HeaderRedrive values (letter places) they carry: the letters that this run
// sent back and the bridge refused again. Not safe for concurrent use.
type letterWatch struct {
	r      *natsRun
	cursor uint64          // the next sequence to read
	refs   map[string]bool // seen, not yet asked for
}

func newLetterWatch(r *natsRun, from uint64) *letterWatch {
	return &letterWatch{r: r, cursor: from, refs: map[string]bool{}}
}

// poll reads the letters stored since the last poll and reports whether any carried a
// place.
func (w *letterWatch) poll(ctx context.Context) (bool, error) {
	found := false
	for {
		m, err := w.r.next(ctx, w.cursor)
		if err != nil || m == nil {
			return found, err
		}
		w.cursor = m.Sequence + 1
		if ref, ok := fromNATS(m.Header).Get(contract.HeaderRedrive); ok {
			w.refs[ref] = true
			found = true
		}
	}
}

// find reports whether a new letter with place ref is in the stream, polling for up to
// within (a replica serving direct gets may lag).
func (w *letterWatch) find(ctx context.Context, ref string, within time.Duration) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	b := backoff.Backoff{Min: 10 * time.Millisecond, Max: 500 * time.Millisecond}
	for {
		if w.refs[ref] {
			delete(w.refs, ref)
			return true, nil
		}
		if _, err := w.poll(wctx); err != nil {
			return false, nilIfDone(wctx, ctx, err)
		}
		if w.refs[ref] {
			continue
		}
		if !backoff.Sleep(wctx, b.Next()) {
			return false, ctx.Err()
		}
	}
}

// until hands each place seen to done, until done returns true or no letter with a place
// came for idle.
func (w *letterWatch) until(ctx context.Context, idle time.Duration, done func(ref string) bool) error {
	b := backoff.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	quiet := time.Now().Add(idle)
	for time.Now().Before(quiet) {
		found, err := w.poll(ctx)
		if err != nil {
			return err
		}
		for ref := range w.refs {
			delete(w.refs, ref)
			if done(ref) {
				return nil
			}
		}
		if found {
			quiet = time.Now().Add(idle)
			b.Reset()
		}
		if !backoff.Sleep(ctx, min(b.Next(), time.Until(quiet))) {
			return ctx.Err()
		}
	}
	return nil
}

// nilIfDone is nil when err came from inner ending while outer goes on.
func nilIfDone(inner, outer context.Context, err error) error {
	if inner.Err() != nil && outer.Err() == nil {
		return nil
	}
	return err
}
