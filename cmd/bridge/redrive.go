package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/bridge"
	"github.com/delaybridge/delaybridge/config"
	natsbroker "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/connect"
	"github.com/delaybridge/delaybridge/internal/redrive"
)

// runRedrive is `bridge redrive`: dead letters of one broker back to its ingress
// (internal/redrive; docs/design.md "Dead-letter redrive"), recorded in the audit log
// (beginRedriveAudit) unless --no-audit. The counts by reason are printed also when it
// stops on an error.
func runRedrive(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge redrive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokerName := fs.String("broker", "", "nats or kafka (needed when both are configured)")
	reasons := fs.String("reason", "", "comma-separated reason codes to redrive (x-delay-error before ':'); default: all")
	dryRun := fs.Bool("dry-run", false, "change nothing: count the dead letters by reason")
	maxN := fs.Int("max", 0, "look at no more than this many dead letters (0: all present at the start)")
	fromStart := fs.Bool("from-start", false, "kafka: read the dead-letter topic from its first offset, not from where the last run stopped (resets the group's offsets: refused while another run is in the group)")
	asJSON := fs.Bool("json", false, "print the counts as JSON")
	wait := fs.Duration("wait", 5*time.Second, "after the last letter, watch the dead letters this long (renewed by each one seen) for letters refused again (0: no watch)")
	noAudit := fs.Bool("no-audit", false, "do not record the run in the audit log (a run whose entry cannot be written to Redis is refused without it)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge redrive [--broker nats|kafka] [--reason r1,r2] [--dry-run] [--max N] [--wait D] [--from-start] [--json] [--no-audit]")
		fmt.Fprintln(stderr, "Each run is recorded in the audit log (bridge audit) in the Redis of BRIDGE_REDIS_URL (or the")
		fmt.Fprintln(stderr, "BRIDGE_REDIS_* topology): a redrive whose entry cannot be written within 5s is not run unless")
		fmt.Fprintln(stderr, "--no-audit is given; a --dry-run, which changes nothing, then warns and goes on.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage // flag printed the problem and the usage
	}
	if fs.NArg() != 0 || *maxN < 0 || *wait < 0 {
		fs.Usage()
		return errUsage
	}
	cfg, err := config.Load(config.EnvMap(environ))
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	broker, err := redriveBroker(cfg, *brokerName)
	if err != nil {
		return err
	}
	opts := redrive.Options{DryRun: *dryRun, Max: *maxN, Wait: *wait}
	for _, r := range strings.Split(*reasons, ",") {
		if r = strings.TrimSpace(r); r != "" {
			opts.Reasons = append(opts.Reasons, r)
		}
	}
	end := func(redrive.Counts, error) {}
	if *noAudit {
		fmt.Fprintln(stderr, "note: not recorded in the audit log (--no-audit)")
	} else if end, err = beginRedriveAudit(ctx, cfg, environ, redriveSelector(broker, opts, *fromStart), *dryRun, stderr); err != nil {
		return err
	}
	var counts redrive.Counts
	if broker == "nats" {
		counts, err = redriveNATS(ctx, cfg, opts)
	} else {
		counts, err = redriveKafka(ctx, cfg, opts, *fromStart)
	}
	end(counts, err)
	if counts != nil {
		if *asJSON {
			_ = json.NewEncoder(stdout).Encode(counts)
		} else {
			_ = counts.Print(stdout, *dryRun)
			if !*dryRun {
				fmt.Fprintf(stdout, "REFUSED AGAIN: seen dead-lettered anew (core NATS: the bridge's reply; else within --wait %s). A later refusal (a target's, after the delay) counts as REDRIVEN and comes back as a new dead letter.\n", *wait)
			}
		}
	}
	return err
}

// redriveBroker is the broker to redrive: the one asked for, or the only one configured.
func redriveBroker(cfg config.Config, asked string) (string, error) {
	on := cfg.Brokers()
	switch {
	case asked != "" && !slices.Contains(on, asked):
		return "", fmt.Errorf("--broker %s: not configured (configured: %s)", asked, strings.Join(on, ", "))
	case asked != "":
		return asked, nil
	case len(on) == 1:
		return on[0], nil
	case len(on) == 0:
		return "", errors.New("no broker configured: set BRIDGE_NATS_URL or BRIDGE_KAFKA_BROKERS as for the bridge")
	}
	return "", errors.New("both NATS and Kafka are configured: choose one with --broker nats|kafka")
}

func redriveNATS(ctx context.Context, cfg config.Config, opts redrive.Options) (redrive.Counts, error) {
	natsOpts, err := connect.NATSOptions(cfg.NATS)
	if err != nil {
		return nil, err
	}
	nc, err := natsbroker.Connect(ctx, cfg.NATS.URL, "delaybridge-redrive", slog.New(slog.DiscardHandler), natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	return redrive.NATS(ctx, nc, bridge.RedriveNATS(cfg), opts)
}

func redriveKafka(ctx context.Context, cfg config.Config, opts redrive.Options, fromStart bool) (redrive.Counts, error) {
	sec, err := connect.KafkaSecurity(cfg.Kafka)
	if err != nil {
		return nil, err
	}
	kc := bridge.RedriveKafka(cfg, sec)
	kc.FromStart = fromStart
	return redrive.Kafka(ctx, kc, opts)
}
