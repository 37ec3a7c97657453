package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/delaybridge/delaybridge/config"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// errUsage: a command line error already explained to the user.
var errUsage = errors.New("usage")

// apiFlags adds the --api and --token flags to fs, defaulting to BRIDGE_API_ADDR and
// BRIDGE_API_TOKEN(_FILE) of environ.
func apiFlags(fs *flag.FlagSet, environ []string) *apiOpts {
	env := config.EnvMap(environ)
	addr := env["BRIDGE_API_ADDR"]
	if _, set := env["BRIDGE_API_ADDR"]; !set {
		addr = config.DefaultAPIAddr
	}
	o := &apiOpts{addr: fs.String("api", addr, "message API address of the running bridge (BRIDGE_API_ADDR)"), token: new(string), environ: environ}
	fs.Var(secretFlag{o.token}, "token", "bearer token (default: BRIDGE_API_TOKEN, or the content of BRIDGE_API_TOKEN_FILE)")
	return o
}

// apiOpts are the --api and --token flags of a command that talks to a running bridge's
// message API (apiFlags), with the environment their defaults come from.
type apiOpts struct {
	addr, token *string
	environ     []string
}

// client makes the API client of the flags (newClient).
func (o *apiOpts) client() (*client.Client, error) { return newClient(*o.addr, *o.token, o.environ) }

// start is the prologue of a command that checks nothing else before it calls the API:
// it parses args into fs (parseFlags), wants n positional arguments (wantArgs) and makes
// the client.
func (o *apiOpts) start(fs *flag.FlagSet, args []string, n int) ([]string, *client.Client, error) {
	pos, err := parseFlags(fs, args)
	if err == nil {
		err = wantArgs(fs, pos, n)
	}
	if err != nil {
		return nil, nil, err
	}
	c, err := o.client()
	return pos, c, err
}

// secretFlag is a string flag that never shows its value (usage texts print defaults).
type secretFlag struct{ p *string }

func (f secretFlag) String() string     { return "" }
func (f secretFlag) Set(v string) error { *f.p = v; return nil }

// apiToken is token, else BRIDGE_API_TOKEN or the content of BRIDGE_API_TOKEN_FILE, read
// as `bridge run` reads them (config.Secret: setting both is an error). Errors name the
// variable, never the token.
func apiToken(token string, environ []string) (string, error) {
	if token != "" {
		return token, nil
	}
	return config.Secret(environ, "API_TOKEN")
}

func newClient(addr, token string, environ []string) (*client.Client, error) {
	if addr == "" {
		return nil, errors.New("the message API is off (BRIDGE_API_ADDR is empty); pass --api host:port")
	}
	token, err := apiToken(token, environ)
	if err != nil {
		return nil, err
	}
	base := addr
	if !strings.Contains(base, "://") {
		if strings.HasPrefix(base, ":") {
			base = "127.0.0.1" + base
		}
		base = "http://" + base
	}
	return &client.Client{Base: base, Token: token, Actor: osUser(environ)}, nil
}

// headerMap turns --header key=value flags into the API's headers (nil when none).
func headerMap(hdrs headerFlags) (map[string]string, error) {
	if len(hdrs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, h := range hdrs {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--header %q: want key=value", h)
		}
		m[k] = v
	}
	return m, nil
}

type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ",") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

func runSend(ctx context.Context, args, environ []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	target := fs.String("target", "", "target: subject, nats:subject or kafka:topic (required)")
	delay := fs.String("delay", "", "delay: 1500 (ms), 30s, 1h30m or PT30S")
	at := fs.String("deliver-at", "", "absolute due time: RFC 3339 or unix ms")
	every := fs.String("every", "", "x-delay-every: recurring, a Go duration >= 1s (30s) or cron (\"0 9 * * 1-5\", CRON_TZ=Europe/Berlin first)")
	misfire := fs.String("misfire", "", "x-delay-misfire, with --every: missed occurrences fire once (the default), skip or all (at most 100)")
	expires := fs.String("expires", "", "x-delay-expires: dead-letter it as expired when not published this long after its due time (as --delay)")
	window := fs.String("window", "", "x-delay-window: deliver at a time drawn uniformly in [due, due + window] (as --delay, at most 1h); each firing of --every draws its own")
	maxWait := fs.String("max-wait", "", "x-delay-max-wait, with --id: a resend with the same id is due at most this long after the first pending version was sent (as --delay)")
	id := fs.String("id", "", "x-delay-id: send again with the same id to reschedule")
	key := fs.String("ordering-key", "", "x-delay-ordering-key: messages with the same key are published one at a time, in the order sent (1-256 bytes; a resend or cancel gives the same key)")
	var hdrs headerFlags
	fs.Var(&hdrs, "header", "extra header key=value (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge send --target T [--delay D | --deliver-at T] [--every S [--misfire once|skip|all]] [--expires D] [--window D] [--id ID [--max-wait D]] [--ordering-key K] [--header k=v]... PAYLOAD|-")
		fs.PrintDefaults()
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *target == "":
		fmt.Fprintln(stderr, "bridge send: --target is required")
		fs.Usage()
		return errUsage
	case len(pos) != 1:
		fmt.Fprintf(stderr, "bridge send: want one PAYLOAD (or - to read it from stdin), got %d arguments\n", len(pos))
		fs.Usage()
		return errUsage
	}
	payload, err := readPayload(pos[0], stdin)
	if err != nil {
		return err
	}
	req := httpapi.PostRequest{Target: *target, ID: *id, OrderingKey: *key, Every: *every, Misfire: *misfire, Payload: &payload}
	req.Delay, req.DeliverAt, req.Expires, req.Window = jsonString(*delay), jsonString(*at), jsonString(*expires), jsonString(*window)
	req.MaxWait = jsonString(*maxWait)
	if req.Headers, err = headerMap(hdrs); err != nil {
		return err
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	resp, err := c.Send(ctx, req)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	due := time.UnixMilli(resp.Due)
	fmt.Fprintf(stdout, "parked %s, due %s (in %s)\n", resp.ID, due.UTC().Format(cliTime),
		time.Until(due).Round(time.Millisecond))
	return nil
}

// jsonString is a flag value as a JSON string for a time or duration field of the API
// (which also takes integers), nil when the flag was not given.
func jsonString(v string) json.RawMessage {
	if v == "" {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

// readPayload is arg, or all of stdin when arg is "-".
func readPayload(arg string, stdin io.Reader) (string, error) {
	if arg != "-" {
		return arg, nil
	}
	b, err := io.ReadAll(stdin)
	if err != nil {
		return "", fmt.Errorf("read payload from stdin: %w", err)
	}
	return string(b), nil
}

func runStats(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge stats [--json]")
		fs.PrintDefaults()
	}
	_, c, err := api.start(fs, args, 0)
	if err != nil {
		return err
	}
	s, err := c.Stats(ctx)
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(s)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "parked\t%d\n", s.Parked)
	if s.NextDue != nil {
		fmt.Fprintf(tw, "next due\t%s (in %s)\n", time.UnixMilli(*s.NextDue).UTC().Format(cliTime),
			time.Duration(*s.NextDue-s.Now)*time.Millisecond)
	} else {
		fmt.Fprintf(tw, "next due\t-\n")
	}
	for i, n := range s.PerShard {
		fmt.Fprintf(tw, "shard %d\t%d\n", i, n)
	}
	return tw.Flush()
}

func runCancel(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge cancel", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := apiFlags(fs, environ)
	key := fs.String("ordering-key", "", "the message's x-delay-ordering-key: a keyed message is named by its id and key")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge cancel [--ordering-key K] ID")
		fs.PrintDefaults()
	}
	pos, c, err := api.start(fs, args, 1)
	if err != nil {
		return err
	}
	ok, err := c.CancelKey(ctx, pos[0], *key)
	var apiErr *client.APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict && strings.HasPrefix(apiErr.Message, "in_delivery") {
		// exit 1: not cancelled, it may still be delivered
		return fmt.Errorf("cancel %s: not cancelled: %s", pos[0], apiErr.Message)
	}
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	if !ok {
		if *key != "" {
			return fmt.Errorf("cancel %s: no pending message with that id and ordering key", pos[0]) // exit 1
		}
		return fmt.Errorf("cancel %s: no pending message with that id without ordering key (give --ordering-key for a keyed one)", pos[0]) // exit 1
	}
	fmt.Fprintf(stdout, "%s: cancelled (it will not be delivered)\n", pos[0])
	return nil
}

// parseInterleaved parses args with fs, flags before, between and after the positional
// arguments (bridge send --target t PAYLOAD --delay 5s), and returns the positional ones;
// everything after "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos, rest []string
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return append(pos, rest...), nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// printCommands writes the usage part of the help, the command list, without the headers
// and variables: the answer to an unknown command (a typo should not scroll the screen).
func printCommands(w io.Writer) {
	var b strings.Builder
	printHelp(&b)
	usage, _, _ := strings.Cut(b.String(), "\nMessages in")
	_, usage, _ = strings.Cut(usage, "Usage:\n")
	fmt.Fprint(w, "Commands:\n", usage, "\n`bridge --help` also lists the message headers and every BRIDGE_* variable.\n")
}

// helpText is the help up to the variables, which printHelp adds from the config.
const helpText = `delaybridge: delayed delivery for NATS and Kafka, parked in Redis.

Usage:
  bridge [run]                 run from the environment (variables below)
  bridge dev [--nats-port N] [--kafka [--kafka-port N]]
                               self-contained dev bridge: embedded NATS with JetStream and an
                               in-memory Redis (--kafka: and a Kafka-protocol stand-in, kfake);
                               NOT durable; prints how to try it
  bridge send --target T [--delay D | --deliver-at T] [--every S [--misfire once|skip|all]] [--expires D] [--window D] [--id ID [--max-wait D]] [--ordering-key K] [--header k=v]... PAYLOAD|-
                               schedule a message through a running bridge's message API
  bridge stats [--json]        delay store statistics (through the message API)
  bridge cancel [--ordering-key K] ID
                               cancel a pending message (through the message API); a keyed
                               message is named by its id and ordering key
  bridge ls [--target G] [--due-from T] [--due-to T] [--limit N] [--cursor C | --all] [--json]
                               list parked messages in due order (through the message API)
  bridge targets [--recount] [--json]
                               parked count and next due per target, and the paused ones
                               (through the message API)
  bridge pause|resume [--json] GLOB
                               stop (resume) publishing the targets GLOB matches, on every
                               replica within a second; their messages stay parked
  bridge tail [--target G] [--json]
                               live events of the whole fleet until interrupted: deliveries,
                               dead letters, expiries, changes made through the API
  bridge bulk cancel|reschedule|deliver-now [--target G] [--due-from T] [--due-to T]
              [--shift D | --deliver-at T] [--dry-run] [--json]
                               change many parked messages at once (through the message API)
  bridge bulk resume [--wait D] [--json] OP_ID
                               finish a bulk change that was cut off, exactly as it began
  bridge audit [--actor A] [--op O] [--state S] [--limit N] [--cursor C | --all] [--json]
                               the audit log of changes, newest first (through the message API)
  bridge dead-letters ls [--reason R] [--limit N] [--cursor C | --all] [--broker B] [--json]
                               counts by reason, then the dead letters (through the message API)
  bridge dead-letters show [--broker B] [--json] ID
                               one dead letter: headers and payload (text, or base64)
  bridge dead-letters purge (--reason R | ID...) [--dry-run | --yes] [--broker B] [--json]
                               delete dead letters (NATS): a dry run; --yes deletes (audited)
  bridge healthcheck [--path P | --url URL] [--timeout D]
                               GET /readyz (or P) on BRIDGE_HTTP_ADDR; exit 0 on 200
                               (container health checks: the image has no shell)
  bridge redrive [--broker B] [--reason R,...] [--dry-run] [--max N] [--wait D] [--from-start] [--json] [--no-audit]
                               send dead letters (BRIDGE_DLQ_SUBJECT) back to the ingress
                               subject/topic, each let go only once that publish is confirmed
  bridge version               print the version
  bridge --help                this help; bridge COMMAND --help: the command's flags

The commands that go through a running bridge's message API (send, stats, cancel, ls,
targets, pause, resume, tail, bulk, audit, dead-letters) take, before or after the command (bridge --api host:port ls):
  --api host:port   its address; default BRIDGE_API_ADDR, else 127.0.0.1:8081
  --token T         its bearer token; default BRIDGE_API_TOKEN, or the content of
                    BRIDGE_API_TOKEN_FILE (never printed)

Messages in (NATS or Kafka, to BRIDGE_NATS_SUBJECT / BRIDGE_KAFKA_TOPIC):
  x-delay       1500 (ms) | 1500ms, 30s, 1h30m | PT30S, P1DT2H
  x-deliver-at  2026-11-21T15:04:05.123Z | unix ms
  x-target      orders.timeout | nats:orders.timeout | kafka:orders.timeout
  x-delay-id    optional identity: same id again reschedules; cancel by id
  x-delay-expires  optional, as x-delay: not published this long after its due time,
                it is dead-lettered with reason expired
  x-delay-every    optional: recurring, 30s | 0 9 * * 1-5 | CRON_TZ=Europe/Berlin 0 9 * * *;
                parked again after each firing (same x-delay-id); cancel stops it
  x-delay-window   optional, as x-delay, at most 1h: delivered at a time drawn uniformly in
                [due, due + window] (x-delay-due is that time); per firing when recurring
  x-delay-max-wait optional, as x-delay, with x-delay-id: a replacement is due at most this
                long after the first pending version was parked (a debounce with a bound)
  x-delay-ordering-key optional, 1-256 bytes: messages with the same key are published one
                at a time in the order parked, none before its due time nor before the one
                before it left; a keyed message is replaced or cancelled with its key

Environment:
`

func printHelp(w io.Writer) {
	fmt.Fprint(w, helpText)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, v := range config.Variables() {
		def := v.Default
		if def == "" {
			def = "(empty)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", v.Name, def, v.Doc)
	}
	tw.Flush()
}
