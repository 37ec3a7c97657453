// Package envconf is what a component needs to own its BRIDGE_* variables: the problem
// type its Validate method returns, and the checks and formats every component shares.
//
// A component declares its variables as env tags on its Config fields (name without the
// BRIDGE_ prefix, envDefault, envDoc); package config embeds the Config, parses the
// environment into it and turns the component's Problems into its own errors.
package envconf

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Problem is one configuration problem of one variable.
type Problem struct {
	// Var is the variable's name as its env tag gives it, without the BRIDGE_ prefix
	// (e.g. "MAX_ATTEMPTS").
	Var string
	// Problem says what is wrong; it never contains a secret.
	Problem string
}

func (p *Problem) Error() string { return p.Var + ": " + p.Problem }

// Problems collects the problems of a configuration; the zero value is empty and usable.
type Problems []*Problem

// Add records a problem of the variable name (without BRIDGE_).
func (ps *Problems) Add(name, format string, args ...any) {
	*ps = append(*ps, &Problem{Var: name, Problem: fmt.Sprintf(format, args...)})
}

// PositiveDuration checks that d is > 0 and at least min, and reports whether it is.
func (ps *Problems) PositiveDuration(name string, d, min time.Duration) bool {
	switch {
	case d <= 0:
		ps.Add(name, "%s: must be > 0", Duration(d))
	case d < min:
		ps.Add(name, "%s: must be at least %s", Duration(d), Duration(min))
	default:
		return true
	}
	return false
}

// Quote quotes a value for a problem, cut after 64 bytes.
func Quote(s string) string {
	const limit = 64
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}

// Duration is d.String() without zero trailing units: "8760h", "1m", "1h30m".
func Duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
