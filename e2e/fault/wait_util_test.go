//go:build fault

package fault

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// sendPaced publishes numbered messages to delay.in at about rate a second (in batches
// every 20 ms), message i with x-delay delay(i), from its own goroutine, until the
// returned stop is called. stop waits for every PubAck and returns the seqs of the
// messages JetStream stored: from then on each one is the bridge's to deliver. Publish
// errors are reported with t.Errorf by stop.
func (c *checker) sendPaced(prefix string, rate int, delay func(i int) time.Duration) (stop func() []string) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var seqs []string
	var errs []error
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		per := max(rate/50, 1)
		for i := 0; ; {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for range per {
				seq := fmt.Sprintf("%s-%d", prefix, i)
				m := nats.NewMsg("delay.in")
				d := delay(i)
				i++
				m.Header.Set("x-delay", strconv.FormatInt(d.Milliseconds(), 10))
				m.Header.Set("x-target", "out.fault")
				m.Header.Set("seq", seq)
				c.mu.Lock()
				c.earliest[seq] = time.Now().Add(d.Truncate(time.Millisecond))
				c.mu.Unlock()
				if _, err := c.js.PublishMsgAsync(m); err != nil {
					errs = append(errs, fmt.Errorf("publish %s: %w", seq, err))
					continue
				}
				seqs = append(seqs, seq)
			}
		}
	}()
	return func() []string {
		close(done)
		wg.Wait()
		select {
		case <-c.js.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			c.t.Error("PubAcks for delay.in did not arrive")
		}
		for i, err := range errs {
			if i == 5 {
				break
			}
			c.t.Error(err)
		}
		return seqs
	}
}
