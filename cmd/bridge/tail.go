package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/internal/events"
)

// runTail prints the fleet's live events (GET /v1/events) until interrupted.
func runTail(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	target := fs.String("target", "", "only events of targets matching this glob (as bridge ls --target)")
	asJSON := fs.Bool("json", false, "print each event as one line of JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge tail [--target GLOB] [--json]")
		fmt.Fprintln(stderr, "prints deliveries, dead letters, expiries and changes made through the API, fleet-wide, until interrupted")
		fs.PrintDefaults()
	}
	_, c, err := api.start(fs, args, 0)
	if err != nil {
		return err
	}
	err = c.Events(ctx, *target, func(e events.Event) error {
		if *asJSON {
			_, err := stdout.Write(append(e.AppendJSON(nil), '\n'))
			return err
		}
		_, err := fmt.Fprintln(stdout, eventLine(e))
		return err
	})
	if errors.Is(err, context.Canceled) {
		return nil // interrupted: the normal end
	}
	if err == nil {
		return errors.New("tail: the bridge ended the stream (shutting down)")
	}
	return fmt.Errorf("tail: %w", err)
}

// eventLine is e for a terminal: time (UTC), kind, target, then what applies.
func eventLine(e events.Event) string {
	kind := e.Type
	if e.Type == events.Changed {
		kind = "changed:" + e.Op
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-18s %s", time.UnixMilli(e.At).UTC().Format("15:04:05.000"), kind, e.Target)
	if e.ID != "" {
		fmt.Fprintf(&b, "  id=%s", strings.ToValidUTF8(jsonish(e.ID), "?"))
	}
	if e.Type == events.Delivered && e.Due != 0 {
		fmt.Fprintf(&b, "  late=%s", time.Duration(e.At-e.Due)*time.Millisecond)
	}
	if e.Attempts > 1 || (e.Attempts > 0 && e.Type != events.Delivered) {
		fmt.Fprintf(&b, "  attempts=%d", e.Attempts)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, "  reason=%s", e.Reason)
	}
	switch {
	case e.Type == events.Missed:
		fmt.Fprintf(&b, "  %d events missed (this reader was too slow, or a replica's could not be relayed)", e.Count)
	case e.Count > 1:
		fmt.Fprintf(&b, "  messages=%d", e.Count)
	}
	return b.String()
}

// jsonish is s quoted when it holds anything but printable characters (an id may hold
// control characters: the terminal must not interpret them).
func jsonish(s string) string {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == ' ' {
			q, _ := json.Marshal(s)
			return string(q)
		}
	}
	return s
}
