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
// (internal/redrive; docs/operating.md "Redriving dead letters"), recorded in the audit log
// (beginRedriveAudit) unless --no-audit. The counts by reason are printed also when it
// stops on an error.
func runRedrive(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	f, err := parseRedriveFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, err := config.Load(config.EnvMap(environ))
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	broker, err := redriveBroker(cfg, f.broker)
	if err != nil {
		return err
	}
	end := func(redrive.Counts, error) {}
	switch {
	case f.noAudit:
		fmt.Fprintln(stderr, "note: not recorded in the audit log (--no-audit)")
	case !config.RedisNamed(config.EnvMap(environ)) && f.opts.DryRun:
		fmt.Fprintln(stderr, "note: this dry run is not recorded in the audit log: "+errNoRedisNamed.Error())
	case !config.RedisNamed(config.EnvMap(environ)):
		return fmt.Errorf("redrive not run: %w; or pass --no-audit to run it unrecorded", errNoRedisNamed)
	default:
		end, err = beginRedriveAudit(ctx, cfg, environ, redriveSelector(broker, f.opts, f.fromStart), f.opts.DryRun, stderr)
		if err != nil {
			return err
		}
	}
	var counts redrive.Counts
	if broker == "nats" {
		counts, err = redriveNATS(ctx, cfg, f.opts)
	} else {
		counts, err = redriveKafka(ctx, cfg, f.opts, f.fromStart)
	}
	end(counts, err)
	printRedriveCounts(stdout, counts, f)
	return err
}

// redriveFlags is the command line of `bridge redrive`.
type redriveFlags struct {
	broker    string
	opts      redrive.Options // DryRun, Max, Wait and Reasons
	fromStart bool
	asJSON    bool
	noAudit   bool
}

// parseRedriveFlags reads the command line of `bridge redrive`; on a problem it has
// printed it and the usage.
func parseRedriveFlags(args []string, stderr io.Writer) (redriveFlags, error) {
	var f redriveFlags
	fs := flag.NewFlagSet("bridge redrive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.broker, "broker", "", "nats or kafka (needed when both are configured)")
	reasons := fs.String("reason", "", "comma-separated reason codes to redrive (x-delay-error before ':'); default: all")
	fs.BoolVar(&f.opts.DryRun, "dry-run", false, "change nothing: count the dead letters by reason")
	fs.IntVar(&f.opts.Max, "max", 0, "look at no more than this many dead letters (0: all present at the start)")
	fs.BoolVar(&f.fromStart, "from-start", false, "kafka: read the dead-letter topic from its first offset, not from where the last run stopped (resets the group's offsets: refused while another run is in the group)")
	fs.BoolVar(&f.asJSON, "json", false, "print the counts as JSON")
	fs.DurationVar(&f.opts.Wait, "wait", 5*time.Second, "after the last letter, watch the dead letters this long (renewed by each one seen) for letters refused again (0: no watch)")
	fs.BoolVar(&f.noAudit, "no-audit", false, "do not record the run in the audit log (a run whose entry cannot be written to Redis is refused without it)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge redrive [--broker nats|kafka] [--reason r1,r2] [--dry-run] [--max N] [--wait D] [--from-start] [--json] [--no-audit]")
		fmt.Fprintln(stderr, "Each run is recorded in the audit log (bridge audit) in the Redis of BRIDGE_REDIS_URL (or the")
		fmt.Fprintln(stderr, "BRIDGE_REDIS_* topology): a redrive whose entry cannot be written within 5s is not run unless")
		fmt.Fprintln(stderr, "--no-audit is given; a --dry-run, which changes nothing, then warns and goes on.")
		fs.PrintDefaults()
	}
	pos, err := parseFlags(fs, args)
	if err == nil {
		err = wantArgs(fs, pos, 0)
	}
	if err != nil {
		return f, err
	}
	if f.opts.Max < 0 || f.opts.Wait < 0 {
		fmt.Fprintln(stderr, "bridge redrive: --max and --wait must not be negative")
		return f, errUsage
	}
	for _, r := range strings.Split(*reasons, ",") {
		if r = strings.TrimSpace(r); r != "" {
			f.opts.Reasons = append(f.opts.Reasons, r)
		}
	}
	return f, nil
}

// printRedriveCounts prints a run's counts by reason, as a table or JSON (nothing when
// the run stopped before it counted anything).
func printRedriveCounts(w io.Writer, counts redrive.Counts, f redriveFlags) {
	switch {
	case counts == nil:
	case f.asJSON:
		_ = json.NewEncoder(w).Encode(counts)
	default:
		_ = counts.Print(w, f.opts.DryRun)
		if !f.opts.DryRun {
			fmt.Fprintf(w, "REFUSED AGAIN: seen dead-lettered anew (core NATS: the bridge's reply; else within --wait %s). A later refusal (a target's, after the delay) counts as REDRIVEN and comes back as a new dead letter.\n", f.opts.Wait)
		}
	}
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
