package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
)

// errHelp: the user asked for a command's usage (-h, --help) and it was printed: exit 0.
var errHelp = errors.New("help")

// apiCommands are the commands that go through a running bridge's message API: the ones
// that take --api and --token.
var apiCommands = map[string]bool{"send": true, "stats": true, "cancel": true, "ls": true,
	"targets": true, "pause": true, "resume": true, "tail": true, "bulk": true, "audit": true, "dead-letters": true}

// apiCommandList names apiCommands in the order the help lists them.
const apiCommandList = "send, stats, cancel, ls, targets, pause, resume, tail, bulk, audit, dead-letters"

// globalFlagNames are the flags that may come before the command as well as after it.
var globalFlagNames = []string{"api", "token"}

func isHelpOrVersion(cmd string) bool {
	switch cmd {
	case "help", "--help", "-h", "-help", "version", "--version", "-v":
		return true
	}
	return false
}

// commandLine splits args into the command ("run" when none) and its arguments, the
// --api and --token flags given before the command moved after it (withGlobalFlags).
// Those flags before a command that does not take them are an error.
func commandLine(args []string) (cmd string, rest []string, err error) {
	global, args, err := splitGlobalFlags(args)
	if err != nil {
		return "", nil, err
	}
	cmd = "run"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	if len(global) > 0 && !apiCommands[cmd] && !isHelpOrVersion(cmd) {
		return "", nil, fmt.Errorf("--api and --token are flags of the commands that use the message API (%s), not of %s", apiCommandList, cmd)
	}
	return cmd, withGlobalFlags(cmd, args, global), nil
}

// splitGlobalFlags takes the --api and --token flags that come before the command
// (`bridge --api host:port ls`) off args, in the forms the flag package accepts (-api,
// --api, with the value as the next argument or after "="), and returns them, each as
// one "--name=value" argument, and the rest of args from the command on.
func splitGlobalFlags(args []string) (global, rest []string, err error) {
	for len(args) > 0 {
		name, value, hasValue := strings.Cut(flagName(args[0]), "=")
		if !slices.Contains(globalFlagNames, name) {
			break
		}
		args = args[1:]
		if !hasValue {
			if len(args) == 0 {
				return nil, nil, fmt.Errorf("flag needs an argument: --%s", name)
			}
			value, args = args[0], args[1:]
		}
		global = append(global, "--"+name+"="+value)
	}
	return global, args, nil
}

// flagName is arg without its one or two leading dashes, "" when it is not a flag.
func flagName(arg string) string {
	if name, ok := strings.CutPrefix(arg, "--"); ok {
		return name
	}
	if name, ok := strings.CutPrefix(arg, "-"); ok {
		return name
	}
	return ""
}

// withGlobalFlags puts the flags given before the command at the start of its arguments,
// after the operation of `bridge bulk` (cancel, reschedule, deliver-now, resume), which
// picks its flags. A flag given again after the command wins, as the later one does.
func withGlobalFlags(cmd string, args, global []string) []string {
	at := 0
	if (cmd == "bulk" || cmd == "dead-letters") && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		at = 1
	}
	return slices.Concat(args[:at], global, args[at:])
}

// parseFlags parses args with fs, flags before, between and after the positional
// arguments (parseInterleaved), and returns the positional ones. On a bad flag the flag
// package has printed the problem and the usage (once): errUsage; on -h or --help it has
// printed the usage: errHelp.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	pos, err := parseInterleaved(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, errHelp
	case err != nil:
		return nil, errUsage
	}
	return pos, nil
}

// wantArgs checks that a command got n positional arguments; otherwise it prints why
// and the usage, and returns errUsage.
func wantArgs(fs *flag.FlagSet, pos []string, n int) error {
	if len(pos) == n {
		return nil
	}
	if n == 0 {
		fmt.Fprintf(fs.Output(), "%s takes no arguments, got %q\n", fs.Name(), pos)
	} else {
		fmt.Fprintf(fs.Output(), "%s: want %d argument(s), got %d\n", fs.Name(), n, len(pos))
	}
	fs.Usage()
	return errUsage
}
