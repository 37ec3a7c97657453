package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/clock"
)

// slowDelivery publishes each handed message after a stall of 0-40 ms (a holder slowed by
// CPU stalls: the window in which a message is in delivery but not yet published or
// acked), then records it (id, version) as delivered and acks it.
type slowDelivery struct {
	mu        sync.Mutex
	delivered map[string][]int64 // id -> versions published, in order
}

func (d *slowDelivery) deliver(_ context.Context, b batch, settle func(*settlement)) {
	go func() {
		time.Sleep(time.Duration(rand.IntN(41)) * time.Millisecond)
		st := &settlement{shard: b.shard, n: len(b.claimed), fence: b.fence}
		d.mu.Lock()
		for _, c := range b.claimed {
			d.delivered[c.ID] = append(d.delivered[c.ID], c.Version)
			st.acks = append(st.acks, c.Receipt)
		}
		d.mu.Unlock()
		settle(st)
	}()
}

func (d *slowDelivery) versions(id string) []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int64(nil), d.delivered[id]...)
}

// TestAnswersMeanWhatTheySay is issue 37 item 3, played 400 times against a real store
// and scheduler (claim ahead 32 ms, the ack hold) whose delivery is slowed: messages due
// in 60-100 ms, and 20-30 ms before each is due (while it may be claimed ahead, held, or
// handed and not yet published) either a cancel or a replace (the same id, due 150 ms
// later). A cancel answered cancelled is never delivered, and one answered in delivery
// is; a replace answered without InDelivery never has its replaced version delivered
// (no double-version delivery), and the new version is delivered once.
func TestAnswersMeanWhatTheySay(t *testing.T) {
	const n = 400
	st := storetest.NewWith(t, delaystore.Config{Lease: 10 * time.Second, Shards: 4})
	d := &slowDelivery{delivered: map[string][]int64{}}
	cfg := Config{Lease: 10 * time.Second, ClaimAhead: 32 * time.Millisecond}
	cfg.DLQSubject, cfg.ClaimAll, cfg.Now, cfg.DrainTimeout = "dlq", true, clock.Shifted(0), 5*time.Second
	cfg.defaults()
	log := slog.New(slog.DiscardHandler)
	own := newOwnership(cfg.MemberID, st.Shards(), cfg.OwnershipTTL, st, log, true)
	ctx, cancel := context.WithCancel(context.Background())
	wakes, err := st.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(cfg, st, own, wakes, &redisClock{}, log, nil, d.deliver)
	runScheduler(t, ctx, cancel, s, wakes)

	type answer struct {
		id         string
		replace    bool
		ok         bool  // cancel: answered cancelled; replace: an entry was replaced (Existed)
		inDelivery bool  // cancel: ErrInDelivery; replace: Parked.InDelivery
		first      int64 // the version parked first
		second     int64 // replace: the new version
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 3 * time.Millisecond) // spread: ~130 in flight at once
			a := answer{id: fmt.Sprintf("a-%d", i), replace: i%2 == 1}
			delay := time.Duration(60+rand.IntN(41)) * time.Millisecond
			parked, err := parkOne(st, a.id, delay)
			if err != nil {
				errs <- err
				return
			}
			m, err := st.Get(context.Background(), a.id)
			if errors.Is(err, delaystore.ErrNotFound) { // this goroutine stalled past its delivery
				a.first = -1
				answers[i] = a
				return
			} else if err != nil {
				errs <- fmt.Errorf("get %s after park: %w", a.id, err)
				return
			}
			a.first = m.Version
			time.Sleep(time.Until(time.UnixMilli(parked.Due).Add(-time.Duration(20+rand.IntN(11)) * time.Millisecond)))
			if a.replace {
				p, err := parkOne(st, a.id, 150*time.Millisecond)
				if err != nil {
					errs <- err
					return
				}
				a.ok, a.inDelivery = p.Existed, p.InDelivery
				m, err := st.Get(context.Background(), a.id)
				if err == nil {
					a.second = m.Version
				}
			} else {
				a.ok, err = st.Cancel(context.Background(), a.id)
				a.inDelivery = errors.Is(err, delaystore.ErrInDelivery)
				if err != nil && !a.inDelivery {
					errs <- fmt.Errorf("cancel %s: %w", a.id, err)
					return
				}
			}
			answers[i] = a
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	requireEmpty(t, st, 10*time.Second) // everything left is delivered and acked

	var cancelled, refused, late, replaced, replacedInDelivery, missed int
	var lies []string
	for _, a := range answers {
		got := d.versions(a.id)
		switch {
		case a.first < 0:
			missed++
		case !a.replace && a.ok:
			cancelled++
			if len(got) > 0 {
				lies = append(lies, fmt.Sprintf("%s: cancel answered cancelled, delivered %v", a.id, got))
			}
		case !a.replace && !a.inDelivery:
			late++ // found nothing: delivered and acked before the cancel
			if len(got) != 1 {
				lies = append(lies, fmt.Sprintf("%s: cancel found nothing, delivered %v", a.id, got))
			}
		case !a.replace:
			refused++
			if !a.inDelivery || len(got) != 1 {
				lies = append(lies, fmt.Sprintf("%s: cancel answered in delivery %v, delivered %v", a.id, a.inDelivery, got))
			}
		default:
			replaced++
			if a.inDelivery {
				replacedInDelivery++
			}
			old := 0
			for _, v := range got {
				if v == a.first {
					old++
				}
			}
			if !a.ok { // not a replace: the first version was delivered and acked before
				if len(got) != 2 || got[0] != a.first {
					lies = append(lies, fmt.Sprintf("%s: parked anew after %d, delivered %v", a.id, a.first, got))
				}
				continue
			}
			if (old > 0) != a.inDelivery || len(got) != old+1 || a.second == 0 || got[len(got)-1] != a.second {
				lies = append(lies, fmt.Sprintf("%s: replace answered in delivery %v, versions %d then %d, delivered %v",
					a.id, a.inDelivery, a.first, a.second, got))
			}
		}
	}
	t.Logf("cancels: %d answered cancelled, %d in delivery, %d found nothing; replaces: %d, %d of them in delivery; %d not played (delivered before the test looked)",
		cancelled, refused, late, replaced, replacedInDelivery, missed)
	if len(lies) > 0 {
		t.Fatalf("%d of %d answers did not mean what they said, e.g. %v", len(lies), n, lies[:min(len(lies), 5)])
	}
}

// parkOne parks id (replacing) to nats:t after delay.
func parkOne(st *delaystore.Store, id string, delay time.Duration) (delaystore.Parked, error) {
	p, err := st.Park(context.Background(), []delaystore.ParkRequest{{ID: id, Replace: true, Delay: delay,
		Envelope: delaystore.Envelope{Target: "nats:t", Source: "nats:delay.in", Payload: []byte("body-" + id)}}})
	if err != nil {
		return delaystore.Parked{}, fmt.Errorf("park %s: %w", id, err)
	}
	return p[0], nil
}
