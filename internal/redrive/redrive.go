// Package redrive sends dead letters back through the bridge (`bridge redrive`): it reads
// the dead-letter subject (a JetStream stream, nats.go) or topic (Kafka, kafka-go),
// publishes each selected letter to the ingress subject or topic, and lets the letter go
// only after that publish was confirmed. docs/design.md "Dead-letter redrive".
package redrive

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// Options select and shape one run.
type Options struct {
	// Reasons keeps only letters whose reason code is one of them; empty: every letter.
	Reasons []string
	// DryRun changes nothing: letters are only counted.
	DryRun bool
	// Max stops after this many letters were looked at; 0: all present at the start.
	Max int
	// Wait bounds how long a run watches the dead-letter store, after its last letter,
	// for letters it sent back that the bridge dead-letters anew ("refused again"): the
	// watch ends when every one was seen, or when none came for Wait. 0: no watch (the
	// refused ones are then counted as redriven, except those a core NATS reply names).
	Wait time.Duration
	// IDs, when set, keeps only the letters with these ids (Letter.ID: on NATS the stream
	// sequence, on Kafka "<partition>:<offset>"); Reasons is then not used. An id that is
	// not a dead letter (gone, never one, or already past on Kafka) is counted under
	// ReasonNotFound as Other.
	IDs []string
	// Until, when not zero, stops the run between two letters once passed: it returns
	// the counts so far and an error wrapping ErrUntil (the letters not looked at stay).
	Until time.Time

	ids map[string]bool // IDs as a set (prepare)
}

// ErrUntil: the run stopped at Options.Until with letters still to look at.
var ErrUntil = errors.New("stopped at its time limit: letters remain")

// ReasonNotFound counts (as Other) the ids asked for that are not dead letters of the
// store now: redriven or passed by another run, deleted, or never dead letters.
const ReasonNotFound = "not_found"

// prepare returns o with its id set built.
func (o Options) prepare() Options {
	if len(o.IDs) > 0 {
		o.ids = make(map[string]bool, len(o.IDs))
		for _, id := range o.IDs {
			o.ids[id] = true
		}
	}
	return o
}

// over reports whether the run is past Until.
func (o Options) over() bool {
	return !o.Until.IsZero() && !time.Now().Before(o.Until)
}

// selects reports whether the letter id of reason is to be redriven.
func (o Options) selects(reason, id string) bool {
	if len(o.IDs) > 0 {
		return o.ids[id]
	}
	return len(o.Reasons) == 0 || slices.Contains(o.Reasons, reason)
}

// notFound counts the ids of opts that the run did not see.
func (c Counts) notFound(opts Options, seen map[string]bool) {
	for _, id := range opts.IDs {
		if !seen[id] {
			c.of(ReasonNotFound).Other++
		}
	}
}

// Tally counts the letters of one reason.
type Tally struct {
	// Redriven were published to the ingress and confirmed, then let go, and were not
	// seen dead-lettered anew (see Refused).
	Redriven int `json:"redriven"`
	// Refused were sent back and dead-lettered anew by the bridge: a new letter carrying
	// contract.HeaderRedrive with the old letter's place was seen in the dead-letter store
	// (at once through a core NATS ingress, whose reply says so; else within Options.Wait).
	// A refusal that comes later (a target's, after the delay) is counted as redriven.
	Refused int `json:"refused"`
	// Other were taken by another run (claimed by it, or already gone from the store, or
	// a duplicate within the ingress stream's window): not sent by this run; they stay
	// unless the other run lets them go. NATS only: on Kafka a run does not read the
	// partitions the group handed to another run, which counts their letters itself.
	Other int `json:"other_run"`
	// Selected would have been redriven (dry run).
	Selected int `json:"selected"`
	// Left were not selected (another reason) or cannot be redriven; they stay.
	Left int `json:"left"`
	// Purged were deleted by a purge (PurgeNATS), which counts them in Selected too.
	Purged int `json:"purged,omitempty"`
}

// Counts is the outcome of a run, by reason code ("no_payload" for letters sent without
// their payload, which cannot be redriven).
type Counts map[string]*Tally

func (c Counts) of(reason string) *Tally {
	t := c[reason]
	if t == nil {
		t = &Tally{}
		c[reason] = t
	}
	return t
}

// Totals are a run's matched and changed, as the API's answer and the audit log count
// them: matched the letters selected (a dry run: those it would send or delete), changed
// those that left the dead-letter store (redriven, refused again and replaced by their new
// letter, or purged).
func (c Counts) Totals() (matched, changed int) {
	for _, t := range c {
		matched += t.Selected
		changed += t.Redriven + t.Refused + t.Purged
	}
	return matched, changed
}

// Print writes the counts as a table, one line per reason, sorted.
func (c Counts) Print(w io.Writer, dryRun bool) error {
	reasons := make([]string, 0, len(c))
	for r := range c {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if dryRun {
		fmt.Fprintln(tw, "REASON\tWOULD REDRIVE\tLEFT")
	} else {
		fmt.Fprintln(tw, "REASON\tREDRIVEN\tREFUSED AGAIN\tLEFT\tOTHER RUN")
	}
	for _, r := range reasons {
		t := c[r]
		if dryRun {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", r, t.Selected, t.Left)
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", r, t.Redriven, t.Refused, t.Left, t.Other)
		}
	}
	return tw.Flush()
}

// Reasons of letters that cannot be redriven, counted as left.
const (
	// reasonNoPayload: the letter was sent without its payload.
	reasonNoPayload = "no_payload"
	// reasonNATSSchedule: the letter carries a NATS schedule (renamed) and the ingress is a
	// JetStream stream, which refuses Nats-Schedule headers: without them it would be
	// delivered at once, before its time.
	reasonNATSSchedule = "nats_schedule"
)

// reasonOf is the reason code of a dead letter: x-delay-error up to its first ":"
// ("unknown" when there is none).
func reasonOf(h headers.List) string {
	v, _ := h.Get(contract.HeaderError)
	code, _, _ := strings.Cut(v, ":")
	if code = strings.TrimSpace(code); code == "" {
		return contract.ReasonUnknown
	}
	return code
}

// judge decides what happens to a letter: its reason, and whether it is redriven (under
// opts). A letter without its payload is never redriven, nor one with a NATS schedule when
// schedules cannot travel (a JetStream ingress).
func judge(h headers.List, id string, opts Options, schedules bool) (reason string, redrive bool) {
	if _, ok := h.Get(contract.HeaderOriginalSize); ok {
		return reasonNoPayload, false
	}
	if !schedules && hasNATSSchedule(h) {
		return reasonNATSSchedule, false
	}
	reason = reasonOf(h)
	return reason, opts.selects(reason, id)
}

// hasNATSSchedule reports whether h carries a renamed NATS schedule header.
func hasNATSSchedule(h headers.List) bool {
	for _, f := range h {
		if _, ok := scheduleName(f.Key); ok {
			return true
		}
	}
	return false
}

// scheduleName is the NATS schedule header name (Nats-Schedule, Nats-Schedule-Target,
// ...) that key, x-delay-original-<name>, stands for.
func scheduleName(key string) (string, bool) {
	p := contract.HeaderOriginalPrefix
	if len(key) <= len(p) || !strings.EqualFold(key[:len(p)], p) {
		return "", false
	}
	orig := key[len(p):]
	return orig, strings.HasPrefix(strings.ToLower(orig), "nats-schedule")
}

// republished is the header list a letter is sent back with: without x-delay-error and
// the delivery headers the bridge sets itself, with contract.HeaderRedrive = ref (the
// letter's place, replacing an earlier redrive's), and with the NATS schedule headers the
// bridge reads (Nats-Schedule, Nats-Schedule-Target, ...; a NATS dead letter carries them
// renamed x-delay-original-Nats-Schedule...) under their own names again. Other renamed
// NATS headers (Nats-Expected-*, Nats-Msg-Id, Nats-Rollup, Nats-TTL) stay renamed: they
// were about the original publish, and a stream would act on them.
func republished(h headers.List, ref string) headers.List {
	out := make(headers.List, 0, len(h)+1)
	for _, f := range h {
		switch strings.ToLower(f.Key) {
		case contract.HeaderError, contract.HeaderDue, contract.HeaderSource, contract.HeaderRedrive:
			continue
		}
		key := f.Key
		if orig, ok := scheduleName(key); ok {
			key = orig
		}
		out = append(out, headers.Header{Key: key, Value: f.Value})
	}
	return append(out, headers.Header{Key: contract.HeaderRedrive, Value: ref})
}
