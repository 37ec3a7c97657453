package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// Spread window rows (delaybridge only): a burst of n messages due at the same
// millisecond, with x-delay-window 10s and, as the reference in the same run, without.
// The windowed burst's arrivals per second of the window show the spread (ideal: n/10 in
// each); its lateness is counted from each message's drawn time (x-delay-due).

// benchWindow is the window rows' x-delay-window.
const benchWindow = 10 * time.Second

// windowChunk is how many messages the window rows publish before waiting for the stream's
// acknowledgements.
const windowChunk = 2000

// runWindowSet runs the window rows runs times each (a fresh system per run) and returns
// their medians.
func runWindowSet(bin string, n, runs int, logf func(string, ...any)) []row {
	var all []result
	for run := range runs {
		for _, w := range []time.Duration{0, benchWindow} {
			res := runWindowRow(bin, n, w)
			logf("delaybridge x1 %s run %d/%d: %s; per second %s", res.workload, run+1, runs, brief(res), joinNums(res.spread, 0))
			all = append(all, res)
			runtime.GC()
		}
	}
	return medians(all)
}

// runWindowRow: n messages due at once (window 0: without x-delay-window) on one replica.
func runWindowRow(bin string, n int, w time.Duration) result {
	label := fmt.Sprintf("%dk due at once, no window", n/1000)
	if w > 0 {
		label = fmt.Sprintf("%dk due at once, window %s", n/1000, w)
	}
	currentVariant = "delaybridge x1 window"
	s, err := startDelaybridge(bin, dbOpts{fsync: "everysec", replicas: 1, capacity: n + 1000})
	if err != nil {
		res := blankResult("delaybridge", label)
		res.err = "setup: " + err.Error()
		return res
	}
	defer s.close()
	waitMembers(s, 1)
	res := newResult(s, label)
	res.n, res.replicas, res.aof = n, 1, "everysec"
	r := s.rec()
	r.reset()
	c0 := snap(s)
	due := time.UnixMilli(time.Now().Add(leadFor(s, n)).UnixMilli())
	window := ""
	if w > 0 {
		window = w.String()
	}
	r.spreadFrom.Store(due.UnixNano())
	// In chunks, each acknowledged by the stream before the next: on a loaded machine one
	// send of 100k outruns the client's limit of outstanding async publishes.
	for sent := 0; sent < n; sent += windowChunk {
		if err := s.send(min(windowChunk, n-sent), func(int) sched { return sched{at: due, abs: true, window: window} }, 0); err != nil {
			res.err = err.Error()
			return res
		}
	}
	tIng, err := s.waitIngested(n, 5*time.Minute)
	if err != nil {
		res.err = err.Error()
		return res
	}
	res.ingest = float64(n) / tIng.Sub(c0.t).Seconds()
	noteIngest(s, res.ingest)
	if !tIng.Before(due) {
		res.err = fmt.Sprintf("ingest finished %s after the due time (lead too short)", tIng.Sub(due).Round(time.Millisecond))
	}
	time.Sleep(time.Until(due))
	if err := r.waitArrivals(n, due.Add(5*time.Minute), 20*time.Second); err != nil {
		res.err = err.Error()
	}
	c1 := snap(s)
	res.releasedIn = float64(r.last.Load()-due.UnixNano()) / 1e9
	res.release = float64(r.n.Load()) / max(res.releasedIn, 1e-3)
	res.missing = n - int(r.n.Load())
	seconds := max(int(w/time.Second), 1)
	res.spread = make([]float64, seconds+1) // the seconds of the window, then all later
	for i := range r.spread {
		res.spread[min(i, seconds)] += float64(r.spread[i].Load())
	}
	res.lateness(r)
	res.cpu(c0, c1, n)
	return res
}

// renderWindow is the spread-window section of the report.
func renderWindow(rows []row) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nSpread window (x-delay-window; a burst due at one millisecond, one replica; lateness counted from the due time, or with a window from the drawn time, x-delay-due):\n\n")
	fmt.Fprintf(&b, "| workload | runs | arrivals per second from the due time (last: after) | min / max per second of the window | last released s after due | lateness p50 / p99 / max ms | notes |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		lo, hi := nan(), nan()
		if len(r.spread) > 1 {
			lo, hi = r.spread[0], r.spread[0]
			for _, v := range r.spread[:len(r.spread)-1] {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s / %s | %s | %s / %s / %s | %s |\n", r.workload, r.runs, joinNums(r.spread, 0),
			fnum(lo, 0), fnum(hi, 0), fnum(r.releasedIn, 2), fnum(r.p50, 0), fnum(r.p99, 0), fnum(r.max, 0), strings.Join(rowNotes(r), "; "))
	}
	return b.String()
}
