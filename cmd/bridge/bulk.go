package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/delaybridge/delaybridge/httpapi"
)

// runBulk is `bridge bulk cancel|reschedule|deliver-now`: a bulk change through the
// message API (POST /v1/bulk/<op>), followed through its cursor until done.
func runBulk(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "resume" {
		return runBulkResume(ctx, args[1:], environ, stdout, stderr)
	}
	fs := flag.NewFlagSet("bridge bulk", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	target, from, to := selectorFlags(fs)
	shift := fs.String("shift", "", "reschedule: move the due time by a signed duration (+1h, -30m)")
	at := fs.String("deliver-at", "", "reschedule: the new due time, RFC 3339 or unix ms")
	dryRun := fs.Bool("dry-run", false, "count what matches; change nothing")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge bulk cancel|reschedule|deliver-now [--target G] [--due-from T] [--due-to T] [--shift D | --deliver-at T] [--dry-run] [--json]")
		fs.PrintDefaults()
	}
	pos, err := parseFlags(fs, args)
	if err == nil {
		err = wantArgs(fs, pos, 1)
	}
	if err != nil {
		return err
	}
	req := httpapi.BulkRequest{Target: *target, DryRun: *dryRun, Shift: *shift}
	req.DueFrom, req.DueTo, req.DeliverAt = jsonString(*from), jsonString(*to), jsonString(*at)
	c, err := api.client()
	if err != nil {
		return err
	}
	var total httpapi.BulkResponse
	for {
		res, err := c.Bulk(ctx, pos[0], req)
		total.Matched += res.Matched
		total.Changed += res.Changed
		total.OpID = cmp.Or(res.OpID, total.OpID)
		if err != nil {
			return fmt.Errorf("bulk %s (matched %d, changed %d so far%s): %w", pos[0], total.Matched, total.Changed, resumeHint(total.OpID), err)
		}
		if res.NextCursor == nil {
			break
		}
		req.Cursor = *res.NextCursor
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(total)
	}
	verb := "changed"
	if *dryRun {
		verb = "changed (dry run)"
	}
	fmt.Fprintf(stdout, "%s: matched %d, %s %d (op %s)\n", pos[0], total.Matched, verb, total.Changed, total.OpID)
	return nil
}

// selectorFlags declares the message selector of `bridge bulk` and `bridge ls`: target
// glob and due range.
func selectorFlags(fs *flag.FlagSet) (target, from, to *string) {
	target = fs.String("target", "", "target glob: orders.* (the name) or kafka:billing.* (broker:name)")
	from = fs.String("due-from", "", "messages due at or after: RFC 3339 or unix ms")
	to = fs.String("due-to", "", "messages due at or before: RFC 3339 or unix ms")
	return target, from, to
}
