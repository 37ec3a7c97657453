package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/delaybridge/delaybridge/config"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// osUser is who runs the command, for the audit log's actor (X-Delay-Actor): the OS user,
// else $USER; "" when neither is known.
func osUser(environ []string) string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return config.EnvMap(environ)["USER"]
}

// resumeHint names the operation to resume in an error, "" when there is none.
func resumeHint(opID string) string {
	if opID == "" {
		return ""
	}
	return "; bridge bulk resume " + opID + " finishes it"
}

// runAudit is `bridge audit`: the audit log, newest first (GET /v1/audit), one page or,
// with --all, every page.
func runAudit(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	limit := fs.Int("limit", 50, "entries per page, 1 to 1000")
	cursor := fs.String("cursor", "", "go on from an earlier page's cursor")
	all := fs.Bool("all", false, "follow the cursor to the oldest entry")
	asJSON := fs.Bool("json", false, "print JSON, one entry per line")
	actor := fs.String("actor", "", "only the entries of this actor (exactly as recorded)")
	op := fs.String("op", "", "only this operation: cancel, reschedule, deliver-now, redrive, purge, ...")
	state := fs.String("state", "", "only entries in this state: running, done or interrupted")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge audit [--actor A] [--op O] [--state S] [--limit N] [--cursor C | --all] [--json]")
		fs.PrintDefaults()
	}
	pos, err := parseFlags(fs, args)
	if err == nil {
		err = wantArgs(fs, pos, 0)
	}
	if err != nil {
		return err
	}
	if *limit < 1 || *limit > 1000 {
		fmt.Fprintf(stderr, "bridge audit: --limit %d: want 1 to 1000\n", *limit)
		return errUsage
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	var enc *json.Encoder // nil: a table
	if *asJSON {
		enc = json.NewEncoder(stdout)
	} else {
		fmt.Fprintln(tw, "at (UTC)\top\tselector / id\tdry run\tmatched\tchanged\tstate\tactor\tremote\top id")
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	for k, v := range map[string]string{"actor": *actor, "op": *op, "state": *state, "cursor": *cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for {
		page, err := c.AuditQuery(ctx, q)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		if err := writeAuditEntries(tw, enc, page.Entries); err != nil {
			return err
		}
		if page.NextCursor == nil {
			break
		}
		if !*all {
			if !*asJSON {
				tw.Flush()
				fmt.Fprintf(stdout, "# more: the same command with --cursor %s (or --all)\n", *page.NextCursor)
			}
			return nil
		}
		q.Set("cursor", *page.NextCursor)
	}
	return tw.Flush() // nothing to flush with --json
}

// writeAuditEntries writes entries as JSON lines with enc, or as rows of the table tw
// when enc is nil.
func writeAuditEntries(tw io.Writer, enc *json.Encoder, entries []httpapi.AuditEntry) error {
	for _, e := range entries {
		if enc != nil {
			if err := enc.Encode(e); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%d\t%d\t%s\t%s\t%s\t%s\n", time.UnixMilli(e.At).UTC().Format(tableTime),
			e.Op, auditWhat(e), e.DryRun, e.Matched, e.Changed, e.State, cmp.Or(e.Actor, "-"), cmp.Or(e.Remote, "-"), e.OpID)
	}
	return nil
}

// auditWhat is an entry's selector, id and reschedule values in one cell.
func auditWhat(e httpapi.AuditEntry) string {
	var parts []string
	if e.ID != "" {
		parts = append(parts, "id="+e.ID)
	}
	if e.OrderingKey != "" {
		parts = append(parts, "ordering_key="+strconv.Quote(e.OrderingKey))
	}
	if len(e.Selector) > 0 {
		parts = append(parts, string(e.Selector))
	}
	if e.Shift != "" {
		parts = append(parts, "shift="+e.Shift)
	}
	if e.DeliverAt != nil {
		parts = append(parts, "deliver_at="+time.UnixMilli(*e.DeliverAt).UTC().Format(cliTime))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// runBulkResume is `bridge bulk resume OP_ID`: finish a bulk operation that was cut off
// (POST /v1/bulk/resume), following it until done. While the operation still runs
// elsewhere (its lease has not run out: a replica killed moments ago) it waits, up to
// --wait.
func runBulkResume(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge bulk resume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	wait := fs.Duration("wait", 30*time.Second, "while the operation still runs elsewhere, retry this long")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge bulk resume [--wait D] [--json] OP_ID")
		fs.PrintDefaults()
	}
	pos, c, err := api.start(fs, args, 1)
	if err != nil {
		return err
	}
	total, err := resumeUntilDone(ctx, c, pos[0], *wait)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(total)
	}
	fmt.Fprintf(stdout, "op %s: done; this resume matched %d, changed %d (bridge audit shows the totals)\n", pos[0], total.Matched, total.Changed)
	return nil
}

// resumeUntilDone resumes op until it is done, retrying while it runs elsewhere (409) for
// at most wait.
func resumeUntilDone(ctx context.Context, c *client.Client, op string, wait time.Duration) (httpapi.BulkResponse, error) {
	total := httpapi.BulkResponse{OpID: op}
	deadline := time.Now().Add(wait)
	for {
		res, err := c.Resume(ctx, op)
		total.Matched += res.Matched
		total.Changed += res.Changed
		var apiErr *client.APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict && strings.HasPrefix(apiErr.Message, "op_running") && time.Now().Before(deadline):
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		case err != nil:
			return total, fmt.Errorf("resume %s (matched %d, changed %d so far): %w", op, total.Matched, total.Changed, err)
		case res.NextCursor == nil:
			return total, nil
		}
	}
}
