// Package envconf is what a component needs to own its BRIDGE_* variables: the problem
// type its Validate method returns, and the checks and formats every component shares.
//
// A component declares its variables as env tags on its Config fields (name without the
// BRIDGE_ prefix, envDefault, envDoc); package config embeds the Config, parses the
// environment into it and turns the component's Problems into its own errors.
package envconf

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"
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

// TLSFiles checks that a client certificate comes with its key: the variables
// <system>_TLS_CERT_FILE and <system>_TLS_KEY_FILE (system "REDIS", "NATS", "KAFKA").
func (ps *Problems) TLSFiles(system, cert, key string) {
	if cert != "" && key == "" {
		ps.Add(system+"_TLS_KEY_FILE", "required with BRIDGE_%s_TLS_CERT_FILE", system)
	}
	if key != "" && cert == "" {
		ps.Add(system+"_TLS_CERT_FILE", "required with BRIDGE_%s_TLS_KEY_FILE", system)
	}
}

// DialAddr returns why s is not a host:port to connect to, or "".
func DialAddr(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "want host:port"
	}
	if host == "" {
		return "missing host"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "port must be 1-65535"
	}
	return ""
}

// HasSpaceOrControl reports whether s holds whitespace or a control character.
func HasSpaceOrControl(s string) bool {
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return true
		}
	}
	return false
}
