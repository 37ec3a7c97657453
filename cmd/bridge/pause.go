package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
)

// runPause is `bridge pause GLOB` and `bridge resume GLOB` (op "pause" or "resume"):
// POST /v1/targets/pause or /v1/targets/resume (docs/operating.md, "Pausing a target").
func runPause(ctx context.Context, op string, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge "+op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: bridge %s [--json] GLOB   (a target glob, as BRIDGE_TARGET_RATE's: orders.*, kafka:billing.*)\n", op)
		fs.PrintDefaults()
	}
	pos, c, err := api.start(fs, args, 1)
	if err != nil {
		return err
	}
	var res httpapi.PauseResponse
	if op == "pause" {
		res, err = c.PauseTarget(ctx, pos[0])
	} else {
		res, err = c.ResumeTarget(ctx, pos[0])
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	since := time.UnixMilli(res.Since).UTC().Format(tableTime)
	switch {
	case op == "pause" && res.Changed:
		fmt.Fprintf(stdout, "paused %s: every replica stops publishing its targets within a second (op %s)\n", res.Target, res.OpID)
	case op == "pause":
		fmt.Fprintf(stdout, "%s was already paused, since %s UTC (op %s)\n", res.Target, since, res.OpID)
	case res.Changed:
		fmt.Fprintf(stdout, "resumed %s, paused since %s UTC: %d waiting messages back in due order (op %s)\n", res.Target, since, res.Moved, res.OpID)
	default:
		fmt.Fprintf(stdout, "%s was not paused; %d waiting messages back in due order (op %s)\n", res.Target, res.Moved, res.OpID)
	}
	return nil
}
