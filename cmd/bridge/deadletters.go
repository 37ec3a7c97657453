package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// runDeadLetters is `bridge dead-letters ls|show|purge`: the dead letters through the
// message API (GET /v1/dead-letters, /v1/dead-letters/counts, /v1/dead-letters/{id},
// POST /v1/dead-letters/purge).
func runDeadLetters(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || !slices.Contains([]string{"ls", "show", "purge"}, args[0]) {
		fmt.Fprintln(stderr, "usage: bridge dead-letters ls|show|purge ... (bridge dead-letters ls --help)")
		return errUsage
	}
	fs := flag.NewFlagSet("bridge dead-letters "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	broker := fs.String("broker", "", "nats or kafka, when both are configured (default: the API's default broker)")
	asJSON := fs.Bool("json", false, "print JSON")
	var reason, cursor *string
	var limit *int
	var all, dryRun, yes *bool
	switch args[0] {
	case "ls":
		reason = fs.String("reason", "", "only letters of this reason code (publish_failed, expired, ...)")
		limit = fs.Int("limit", 50, "letters per page, 1 to 1000")
		cursor = fs.String("cursor", "", "go on from an earlier page's cursor")
		all = fs.Bool("all", false, "follow the cursor to the last letter")
		fs.Usage = usage(fs, stderr, "bridge dead-letters ls [--reason R] [--limit N] [--cursor C | --all] [--broker B] [--json]")
	case "show":
		fs.Usage = usage(fs, stderr, "bridge dead-letters show [--broker B] [--json] ID")
	case "purge":
		reason = fs.String("reason", "", "delete every letter of this reason code")
		dryRun = fs.Bool("dry-run", false, "count what would be deleted; delete nothing")
		yes = fs.Bool("yes", false, "delete: without it the command only runs the dry run and says how to confirm")
		fs.Usage = usage(fs, stderr, "bridge dead-letters purge (--reason R | ID...) [--dry-run | --yes] [--broker B] [--json]")
	}
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	switch args[0] {
	case "ls":
		if err := wantArgs(fs, pos, 0); err != nil {
			return err
		}
		return deadLettersLs(ctx, c, lsArgs{reason: *reason, broker: *broker, cursor: *cursor, limit: *limit, all: *all, json: *asJSON}, stdout)
	case "show":
		if err := wantArgs(fs, pos, 1); err != nil {
			return err
		}
		return deadLetterShow(ctx, c, pos[0], *broker, *asJSON, stdout)
	}
	req := httpapi.RedriveRequest{Reason: *reason, IDs: pos, Broker: *broker}
	if (req.Reason == "") == (len(req.IDs) == 0) {
		fmt.Fprintln(stderr, "bridge dead-letters purge: give --reason R or ids, not both")
		return errUsage
	}
	return deadLettersPurge(ctx, c, req, *dryRun, *yes, *asJSON, stdout)
}

// usage prints line and fs's flags.
func usage(fs *flag.FlagSet, w io.Writer, line string) func() {
	return func() {
		fmt.Fprintln(w, "usage:", line)
		fs.PrintDefaults()
	}
}

type lsArgs struct {
	reason, broker, cursor string
	limit                  int
	all, json              bool
}

// deadLettersLs prints the counts by reason, then one page of letters (or every page).
func deadLettersLs(ctx context.Context, c *client.Client, a lsArgs, stdout io.Writer) error {
	q := url.Values{"limit": {strconv.Itoa(a.limit)}}
	for k, v := range map[string]string{"reason": a.reason, "broker": a.broker, "cursor": a.cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	enc := json.NewEncoder(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !a.json && a.cursor == "" {
		counts, err := c.DeadLetterCounts(ctx, a.broker)
		if err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
		printReasonCounts(stdout, counts)
	}
	if !a.json {
		fmt.Fprintln(tw, "ID\tREASON\tTARGET\tAT (UTC)\tSIZE\tERROR")
	}
	for {
		page, err := c.DeadLetters(ctx, q)
		if err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
		for _, d := range page.DeadLetters {
			if a.json {
				if err := enc.Encode(d); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", d.ID, d.Reason, cmp.Or(d.Target, "-"),
				time.UnixMilli(d.At).UTC().Format(tableTime), d.Size, cut(oneLine(d.Error), 80))
		}
		if page.NextCursor == nil {
			break
		}
		if !a.all {
			if !a.json {
				tw.Flush()
				fmt.Fprintf(stdout, "# more: the same command with --cursor %s (or --all)\n", *page.NextCursor)
			}
			return nil
		}
		q.Set("cursor", *page.NextCursor)
	}
	return tw.Flush()
}

// printReasonCounts prints "N dead letters: R n, R n" (and whether the count stopped).
func printReasonCounts(w io.Writer, c httpapi.DeadLetterCountsResponse) {
	reasons := make([]string, 0, len(c.ByReason))
	for r := range c.ByReason {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int { return cmp.Or(c.ByReason[b]-c.ByReason[a], strings.Compare(a, b)) })
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s %d", r, c.ByReason[r])
	}
	more := ""
	if !c.Complete {
		more = " (counted for 3 s: at least)"
	}
	fmt.Fprintf(w, "# %d dead letters (%s)%s: %s\n", c.Total, c.Broker, more, cmp.Or(strings.Join(parts, ", "), "none"))
}

// cut is s cut at n characters.
func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// deadLetterShow prints one letter: its fields, headers and payload (text, or base64 as
// the API sends it; control characters escaped so that a payload cannot drive the
// terminal).
func deadLetterShow(ctx context.Context, c *client.Client, id, broker string, asJSON bool, stdout io.Writer) error {
	d, err := c.DeadLetter(ctx, id, broker)
	if err != nil {
		return fmt.Errorf("dead letter %s: %w", id, err)
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(d)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s (%s)\nreason\t%s\nerror\t%s\ntarget\t%s\nat (UTC)\t%s\nsize\t%d\n", d.ID, d.Broker, d.Reason,
		safe(d.Error), cmp.Or(safe(d.Target), "-"), time.UnixMilli(d.At).UTC().Format(tableTime), d.Size)
	fmt.Fprintln(tw, "headers\t")
	for _, h := range d.Headers {
		fmt.Fprintf(tw, "  %s\t%s\n", safe(h.Key), safe(h.Value))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "payload (%d bytes, %s):\n%s\n", d.PayloadSize, d.PayloadEncoding, safe(d.Payload))
	return nil
}

// safe escapes the control characters of s but newline and tab.
func safe(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r < 0xa0 {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// deadLettersPurge runs a purge: a dry run, then, with yes, the purge.
func deadLettersPurge(ctx context.Context, c *client.Client, req httpapi.RedriveRequest, dryRun, yes, asJSON bool, stdout io.Writer) error {
	req.DryRun = true
	res, err := c.Purge(ctx, req)
	if err != nil {
		return fmt.Errorf("purge (dry run): %w", err)
	}
	if dryRun || !yes || res.Matched == 0 {
		if asJSON {
			return json.NewEncoder(stdout).Encode(res)
		}
		if err := printPurge(stdout, res); err != nil {
			return err
		}
		if !dryRun && res.Matched > 0 {
			fmt.Fprintf(stdout, "# %d dead letters would be deleted: the same command with --yes deletes them\n", res.Matched)
		}
		return nil
	}
	req.DryRun = false
	for {
		res, err = c.Purge(ctx, req)
		if err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		if asJSON {
			err = json.NewEncoder(stdout).Encode(res)
		} else {
			err = printPurge(stdout, res)
		}
		if err != nil || !res.More {
			return err
		}
	}
}

// printPurge prints a purge's counts by reason.
func printPurge(w io.Writer, res httpapi.PurgeResponse) error {
	reasons := make([]string, 0, len(res.ByReason))
	for r := range res.ByReason {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if res.DryRun {
		fmt.Fprintln(tw, "REASON\tWOULD DELETE\tLEFT")
	} else {
		fmt.Fprintln(tw, "REASON\tDELETED\tLEFT\tOTHER RUN")
	}
	for _, r := range reasons {
		t := res.ByReason[r]
		if res.DryRun {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", r, t.Selected, t.Left)
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", r, t.Purged, t.Left, t.Other)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !res.DryRun {
		fmt.Fprintf(w, "# deleted %d of %d (audit: %s)\n", res.Purged, res.Matched, res.OpID)
	}
	return nil
}
