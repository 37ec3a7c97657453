// Command bridge is delaybridge: delayed delivery for NATS and Kafka, parked in Redis.
//
//	bridge [run]         run from the environment (BRIDGE_* variables)
//	bridge dev           self-contained, not durable: embedded NATS (JetStream) + in-memory Redis
//	bridge send ...      schedule a message through a running bridge's message API
//	bridge stats         show the delay store statistics
//	bridge cancel ID     cancel a pending message
//	bridge ls            list parked messages in due order
//	bridge targets       parked count and next due per target, and the paused ones
//	bridge pause GLOB    stop publishing the targets GLOB matches, fleet-wide; resume GLOB
//	bridge tail          live events of the fleet: deliveries, dead letters, changes
//	bridge bulk ...      cancel, reschedule or deliver now many parked messages at once; resume one
//	bridge audit         the audit log of changes, newest first
//	bridge healthcheck   GET /readyz of a running bridge, exit 0 on 200 (container health)
//	bridge redrive       send dead letters back to the ingress (after fixing their cause)
//	bridge version       print the version
//	bridge help          usage, the message headers and every BRIDGE_* variable
//
// send, stats, cancel, ls, targets, pause, resume, tail, bulk and audit go through a running bridge's message
// API; their --api and --token flags may also come before the command
// (`bridge --api host:port ls`). See `bridge --help` for every flag and variable.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/delaybridge/delaybridge/httpapi/client"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command and returns the process exit code.
func run(ctx context.Context, args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd, args, err := commandLine(args)
	if err != nil {
		fmt.Fprintln(stderr, "bridge:", err)
		return 2
	}
	switch cmd {
	case "run":
		err = runBridge(ctx, environ, stderr)
	case "dev":
		err = runDev(ctx, args, environ, stdout, stderr)
	case "send":
		err = runSend(ctx, args, environ, stdin, stdout, stderr)
	case "stats":
		err = runStats(ctx, args, environ, stdout, stderr)
	case "cancel":
		err = runCancel(ctx, args, environ, stdout, stderr)
	case "bulk":
		err = runBulk(ctx, args, environ, stdout, stderr)
	case "audit":
		err = runAudit(ctx, args, environ, stdout, stderr)
	case "ls":
		err = runLs(ctx, args, environ, stdout, stderr)
	case "targets":
		err = runTargets(ctx, args, environ, stdout, stderr)
	case "tail":
		err = runTail(ctx, args, environ, stdout, stderr)
	case "pause", "resume":
		err = runPause(ctx, cmd, args, environ, stdout, stderr)
	case "healthcheck":
		err = runHealthcheck(ctx, args, environ, stdout, stderr)
	case "dead-letters":
		err = runDeadLetters(ctx, args, environ, stdout, stderr)
	case "redrive":
		err = runRedrive(ctx, args, environ, stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "delaybridge", version)
	case "help", "--help", "-h", "-help":
		printHelp(stdout)
	default:
		fmt.Fprintf(stderr, "bridge: unknown command %s\n\n", cmd)
		printCommands(stderr)
		return 2
	}
	return exitCode(err, stderr)
}

// exitCode is the exit status of a command that returned err, which it prints unless the
// command did: 0 done (or its usage printed as asked), 2 a bad command line, 1 failed.
func exitCode(err error, stderr io.Writer) int {
	switch err {
	case nil, errHelp:
		return 0
	case errUsage:
		return 2
	}
	fmt.Fprintln(stderr, "bridge:", explain(err))
	return 1
}

// explain adds what to do to an error that does not say it: a 401 of the message API
// names the token's flag and variables.
func explain(err error) error {
	if apiErr := (*client.APIError)(nil); errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized {
		return fmt.Errorf("%w (give the bridge's BRIDGE_API_TOKEN: --token, or BRIDGE_API_TOKEN or BRIDGE_API_TOKEN_FILE in the environment)", err)
	}
	return err
}
