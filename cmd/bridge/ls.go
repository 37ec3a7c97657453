package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
)

// tableTime is how the CLI's tables show a time (UTC), and cliTime how it prints one
// elsewhere (RFC 3339 in UTC): both with milliseconds, so every time printed has the same
// width (time.RFC3339Nano drops trailing zeros: 19:00:40.89Z beside 19:00:40.123Z).
const (
	tableTime = "2006-01-02 15:04:05.000"
	cliTime   = "2006-01-02T15:04:05.000Z07:00"
)

// runLs is `bridge ls`: parked messages through the message API (GET /v1/messages), one
// page, or every page with --all.
func runLs(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge ls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	target, from, to := selectorFlags(fs)
	limit := fs.Int("limit", 100, "messages per page, 1-1000")
	cursor := fs.String("cursor", "", "go on from a page's next cursor")
	all := fs.Bool("all", false, "follow the pages to the end")
	asJSON := fs.Bool("json", false, "print JSON (the API's answer; with --all every message in one answer)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge ls [--target G] [--due-from T] [--due-to T] [--limit N] [--cursor C | --all] [--json]")
		fs.PrintDefaults()
	}
	pos, err := parseFlags(fs, args)
	if err == nil {
		err = wantArgs(fs, pos, 0)
	}
	if err != nil {
		return err
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	for name, v := range map[string]string{"target": *target, "due_from": *from, "due_to": *to, "cursor": *cursor} {
		if v != "" {
			q.Set(name, v)
		}
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	var out httpapi.ListResponse
	for {
		page, err := c.List(ctx, q)
		if err != nil {
			return fmt.Errorf("ls: %w", err)
		}
		out.Messages, out.NextCursor = append(out.Messages, page.Messages...), page.NextCursor
		if out.Total == 0 { // the selector's total, as the first page counted it
			out.Total, out.TotalEstimated = page.Total, page.TotalEstimated
		}
		if !*all || page.NextCursor == nil {
			break
		}
		q.Set("cursor", *page.NextCursor)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	return printListed(stdout, out, time.Now())
}

// printListed writes a page as a table, how many the selector matches in all, and how to
// go on when there is more. A recurring message shows its schedule in EVERY. A keyed
// message shows its ordering key beside its id (the two name it) and, while the message
// before it with that key holds it, that message's id beside its due time.
func printListed(w io.Writer, page httpapi.ListResponse, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTARGET\tDUE (UTC)\tIN\tATTEMPTS\tSIZE\tEVERY")
	for _, m := range page.Messages {
		in := time.UnixMilli(m.Due).Sub(now).Round(time.Second)
		attempts := strconv.Itoa(m.Attempts)
		if m.Scheduled != m.Due {
			attempts += fmt.Sprintf(" (next %s)", time.UnixMilli(m.Scheduled).UTC().Format("15:04:05.000"))
		}
		due := time.UnixMilli(m.Due).UTC().Format(tableTime)
		if m.Window > 0 {
			due += fmt.Sprintf(" (drawn in a %s window)", time.Duration(m.Window)*time.Millisecond)
		}
		if m.MaxWait > 0 {
			due += fmt.Sprintf(" (max wait %s: by %s)", time.Duration(m.MaxWait)*time.Millisecond, time.UnixMilli(m.DueBy).UTC().Format("15:04:05.000"))
		}
		if m.HeldBy != "" {
			due += " (held by " + m.HeldBy + ")"
		}
		id := m.ID
		if m.OrderingKey != "" { // named by both: bridge cancel ID --ordering-key K
			id += fmt.Sprintf(" (key %q)", m.OrderingKey)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", id, m.Target, due, in, attempts, m.Size, cmp.Or(m.Every, "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(page.Messages) == 0 {
		fmt.Fprintln(w, "(no parked message matches)")
	}
	if page.TotalEstimated {
		fmt.Fprintf(w, "about %d match in all (an estimate: counting them exactly would read more than a page)\n", page.Total)
	} else {
		fmt.Fprintf(w, "%d match in all\n", page.Total)
	}
	if page.NextCursor != nil {
		fmt.Fprintf(w, "more: the same command with --cursor %s (or --all)\n", *page.NextCursor)
	}
	return nil
}

// runTargets is `bridge targets`: parked count and next due per target through the
// message API (GET /v1/targets), and how many messages their ordering key holds (all
// targets).
func runTargets(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge targets", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	recount := fs.Bool("recount", false, "count every shard from its entries first (when the counts look wrong)")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge targets [--recount] [--json]")
		fs.PrintDefaults()
	}
	_, c, err := api.start(fs, args, 0)
	if err != nil {
		return err
	}
	res, err := c.Targets(ctx, *recount)
	if err != nil {
		return fmt.Errorf("targets: %w", err)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPARKED\tNEXT DUE (UTC)\tIN\tPAUSED")
	for _, t := range res.Targets {
		due, in := "unknown", "-" // null: not found within the API's read bound (docs/operating.md, "HTTP")
		if t.NextDue != nil {
			due = time.UnixMilli(*t.NextDue).UTC().Format(tableTime)
			in = time.UnixMilli(*t.NextDue).Sub(now).Round(time.Second).String()
		}
		paused := "-"
		if t.Paused {
			paused = "paused"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", t.Target, t.Parked, due, in, paused)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Targets) == 0 {
		fmt.Fprintln(stdout, "(nothing parked)")
	}
	if res.HeldByOrder > 0 {
		fmt.Fprintf(stdout, "(%d of them held by their ordering key's predecessor)\n", res.HeldByOrder)
	}
	if err := printPaused(stdout, res.Paused); err != nil {
		return err
	}
	if err := printQuotas(stdout, res.Quotas); err != nil || len(res.Quotas) == 0 {
		return err
	}
	fleet, err := c.FleetOverview(ctx)
	if err != nil {
		return fmt.Errorf("the fleet's quota refusals: %w", err)
	}
	printFleetQuota(stdout, fleet.LastHour.Total.QuotaRejected)
	return nil
}

// printFleetQuota prints the fleet's quota refusals of the last hour under the quota table
// (whose REJECTED column is the replica's that answered).
func printFleetQuota(w io.Writer, q map[string]int64) {
	api, all := q["http"], int64(0)
	for _, n := range q {
		all += n
	}
	fmt.Fprintf(w, "# the fleet refused %d in the last hour: dead-lettered quota_exceeded %d, API 429 %d\n", all, all-api, api)
}

// printPaused prints the paused globs of `bridge targets` (nothing when none is).
func printPaused(w io.Writer, ps []httpapi.PausedResponse) error {
	if len(ps) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PAUSED GLOB\tSINCE (UTC)")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\n", p.Target, time.UnixMilli(p.Since).UTC().Format(tableTime))
	}
	return tw.Flush()
}

// printQuotas prints the BRIDGE_TARGET_QUOTA table of `bridge targets` (nothing when no
// quota is configured).
func printQuotas(w io.Writer, qs []httpapi.QuotaResponse) error {
	if len(qs) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUOTA PATTERN\tPARKED\tLIMIT\tUSED\tREJECTED (THIS REPLICA)")
	for _, q := range qs {
		limit, used := "-", "-" // a pattern another replica's configuration counts
		if q.Limit > 0 {
			limit = fmt.Sprint(q.Limit)
			used = fmt.Sprintf("%.1f%%", 100*float64(q.Parked)/float64(q.Limit))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\n", q.Pattern, q.Parked, limit, used, q.Rejected)
	}
	return tw.Flush()
}
