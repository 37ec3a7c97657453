package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The ceiling of a burst row: after the burst, the harness publishes the
// same number of messages straight to the target stream (OUT, subject bench.out.w) from
// one client with JetStream async publish (4096 in flight, as the ingest publisher), each a
// copy of a message the bridge released in that run (same headers and payload, its own
// Nats-Msg-Id so that none is a duplicate). Its rate is what this machine's NATS can take
// from one publisher at that moment, so release / ceiling compares the bridge with the
// broker it feeds, measured in the same run on the same (shared) cores.

// ceiling publishes n copies of the sample release to bench.out.w and returns the
// messages per second from the first publish until every PubAck arrived, and the harness
// process's CPU per message meanwhile (us: the embedded NATS server storing and
// acknowledging, the one publishing client, and the arrival subscriber, the same
// subscriber that receives the bridge's releases).
func (s *dbSystem) ceiling(n int) (rate, cpuUS float64, err error) {
	sample := s.sample.Load()
	if sample == nil {
		return nan(), nan(), errors.New("no released message to copy")
	}
	r := s.rec()
	defer r.reset() // the copies reach the recorder too; the row is measured already
	arrived0, cpu0 := r.n.Load(), selfCPU()
	start := time.Now()
	for i := range n {
		m := &nats.Msg{Subject: sample.Subject, Data: sample.Data, Header: make(nats.Header, len(sample.Header))}
		for k, v := range sample.Header {
			m.Header[k] = v
		}
		if _, ok := m.Header[nats.MsgIdHdr]; ok {
			m.Header[nats.MsgIdHdr] = []string{"ceiling-" + strconv.Itoa(i)}
		}
		if _, err := s.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
			return nan(), nan(), fmt.Errorf("ceiling publish %d: %w", i, err)
		}
	}
	select {
	case <-s.js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		return nan(), nan(), errors.New("ceiling publishes not acknowledged within 2 min")
	}
	took := time.Since(start)
	// The recorder may still be taking the last copies in: wait until it has them all (or
	// a second), so that their receipt is inside the CPU measured.
	for deadline := time.Now().Add(time.Second); r.n.Load()-arrived0 < int64(n) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cpuUS = (selfCPU() - cpu0) / float64(n) * 1e6
	if e := s.pubErrs.Load(); e > 0 {
		return nan(), nan(), fmt.Errorf("%d ceiling publishes failed", e)
	}
	return float64(n) / took.Seconds(), cpuUS, nil
}

// withCeiling adds to a burst row of a delaybridge system the ceiling of the same run and
// release / ceiling.
func withCeiling(sys system, res *result) {
	db, ok := sys.(*dbSystem)
	if !ok || res.err != "" {
		return
	}
	c, cpu, err := db.ceiling(res.n)
	if err != nil {
		res.err = "ceiling: " + err.Error()
		return
	}
	res.ceiling, res.vsCeiling = c, res.release/c
	res.ceilingCPUus, res.relVsCeilingCPU = cpu, res.relCPUus/cpu
	res.peakRSS = 0
	for _, b := range db.bridges {
		res.peakRSS = max(res.peakRSS, b.peakRSS())
	}
}

// renderCeiling is the table: every delaybridge burst row's release rate beside the
// ceiling of the same run, their ratio (median of the per-run ratios) with its target, and
// the bridge CPU per released and per parked message beside the ceiling's harness CPU per
// message (figures of the same run, without targets of their own).
func renderCeiling(rows []row) string {
	var b strings.Builder
	for _, r := range rows {
		if !strings.HasPrefix(r.system, "delaybridge") || !strings.HasPrefix(r.workload, "burst") || math.IsNaN(r.ceiling) {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\nBurst release vs the JetStream async publish ceiling of the same run (one client, same messages, straight to the target stream); "+
				"target: release >= %g x the ceiling; the bridge's CPU beside the ceiling's harness CPU, per message:\n\n", targetVsCeiling)
			fmt.Fprintf(&b, "| system | replicas | AOF | workload | release msgs/s | ceiling msgs/s | release / ceiling | >= %g | bridge CPU us per released msg | per parked msg | ceiling: harness CPU us per msg | released / ceiling CPU | bridge peak RSS MiB |\n"+
				"|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", targetVsCeiling)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.system, r.replicas, r.aof, r.workload,
			fnum(r.release, 0), fnum(r.ceiling, 0), fnum(r.vsCeiling, 2), atLeast(r.vsCeiling, targetVsCeiling),
			fnum(r.relCPUus, 1), fnum(r.parkCPUus, 1), fnum(r.ceilingCPUus, 1), fnum(r.relVsCeilingCPU, 2), fnum(r.peakRSS, 0))
	}
	return b.String()
}

// renderBacklog is the backlog table: every delaybridge backlog row's release rate (the
// burst on top of the parked backlog) beside the release rate of the burst on an empty
// store of the same run and variant, their ratio and its target.
func renderBacklog(rows []row) string {
	var b strings.Builder
	for _, r := range rows {
		if !strings.HasPrefix(r.system, "delaybridge") || !strings.Contains(r.workload, "parked") {
			continue
		}
		empty := emptyBurst(rows, r)
		if empty == nil {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\nRelease with a backlog vs on an empty store (the burst row of the same run and variant); target: >= %g x the empty store's rate:\n\n", targetBacklog)
			fmt.Fprintf(&b, "| system | replicas | AOF | workload | release msgs/s with the backlog | empty store: workload | release msgs/s | ratio | >= %g |\n"+
				"|---|---|---|---|---|---|---|---|---|\n", targetBacklog)
		}
		ratio := r.release / empty.release
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", r.system, r.replicas, r.aof, r.workload,
			fnum(r.release, 0), empty.workload, fnum(empty.release, 0), fnum(ratio, 2), atLeast(ratio, targetBacklog))
	}
	return b.String()
}
