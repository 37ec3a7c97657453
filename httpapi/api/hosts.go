package api

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/delaybridge/delaybridge/contract"
)

// hostGuard refuses, with 403 host_not_allowed and without reading the body, a request
// whose Host names the API by a DNS name that is neither localhost nor one of allowed
// (BRIDGE_API_HOSTS, docs/contract.md section 8). It defends the token-less API against
// DNS rebinding: a page on evil.test whose name is rebound to 127.0.0.1 is same-origin to
// the browser, so CrossOriginProtection passes it, but the browser still sends
// Host: evil.test. It wraps every route of BRIDGE_API_ADDR (the API and the console) and
// runs first; with a token it is not installed (the token is what a page cannot send).
//
// The Host is read as the server saw it (r.Host: the Host header, or the host of an
// absolute-form request URI, which net/http prefers): the port is ignored, case too, and
// one trailing dot (localhost. = localhost). An IP literal (127.0.0.1, [::1], with or
// without a port) is always allowed: no page can be served from a name that is one. An
// empty Host (HTTP/1.0 without one) is allowed: browsers always send it. Anything else
// that is not a listed name is refused, malformed hosts included (userinfo, a port that
// is not a number, non-ASCII).
func hostGuard(allowed []string, next http.Handler) http.Handler {
	names := map[string]bool{"localhost": true}
	for _, h := range allowed {
		names[canonicalName(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, names) {
			refuse(w, http.StatusForbidden, fmt.Sprintf("%s: Host %q is not an IP address, localhost or a name in BRIDGE_API_HOSTS "+
				"(without BRIDGE_API_TOKEN the API answers only to those: DNS rebinding); list the name in BRIDGE_API_HOSTS, or set BRIDGE_API_TOKEN",
				contract.ReasonHostNotAllowed, r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether the request host hostport (a Host header: host, host:port,
// [v6] or [v6]:port) may reach the token-less API: empty, an IP literal, or a name in
// names (canonical: lower case, no trailing dot).
func hostAllowed(hostport string, names map[string]bool) bool {
	if hostport == "" {
		return true
	}
	host, ok := splitHostPort(hostport)
	if !ok {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return names[canonicalName(host)]
}

// splitHostPort is hostport without its port: "[::1]:80" -> "::1", "a.b:80" -> "a.b",
// "a.b" -> "a.b". ok is false for a port that is not a decimal number, brackets around
// something that is not an IPv6 address, or text after the closing bracket that is not a
// port.
func splitHostPort(hostport string) (host string, ok bool) {
	if rest, found := strings.CutPrefix(hostport, "["); found {
		inside, after, closed := strings.Cut(rest, "]")
		if !closed || (after != "" && !isPort(strings.TrimPrefix(after, ":"), strings.HasPrefix(after, ":"))) {
			return "", false
		}
		a, err := netip.ParseAddr(inside)
		if err != nil || !a.Is6() {
			return "", false
		}
		return inside, true
	}
	if strings.Count(hostport, ":") > 1 { // a bare IPv6 address (not a browser's form)
		return hostport, true
	}
	if h, port, found := strings.Cut(hostport, ":"); found {
		return h, isPort(port, true)
	}
	return hostport, true
}

// isPort reports whether p is a port as a Host header gives one (digits; empty after a
// colon is allowed by RFC 3986). colon is whether a colon preceded it.
func isPort(p string, colon bool) bool {
	if !colon {
		return false
	}
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(p) <= 5
}

// canonicalName is a host name as compared: lower case, one trailing dot removed.
func canonicalName(h string) string {
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// CheckHostName returns why name cannot be an entry of BRIDGE_API_HOSTS, "" when it can:
// a DNS host name as a browser sends it in Host, ASCII letters, digits, hyphens and dots
// (labels of 1-63 characters, at most 253 in all; one trailing dot and any case allowed),
// so an internationalized name is given in its xn-- form. No port (any port is allowed),
// no scheme or path, and no wildcard: each name is listed (a "*" would turn the defence
// off; set BRIDGE_API_TOKEN instead). IP literals need no entry (they are always
// allowed) and are refused here so that the list holds names only.
func CheckHostName(name string) string {
	if name == "" {
		return "empty"
	}
	if strings.Contains(name, "*") {
		return "a wildcard is not supported: list each name (to answer to any host, set BRIDGE_API_TOKEN)"
	}
	if strings.Contains(name, "://") || strings.ContainsAny(name, "/@") {
		return "a host name only, without scheme, user or path"
	}
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return "an IP address: IP addresses are always allowed, list names only"
	}
	if strings.Contains(name, ":") {
		return "a host name without a port (every port is allowed)"
	}
	n := strings.TrimSuffix(name, ".")
	if len(n) == 0 || len(n) > 253 {
		return "not a host name: 1-253 characters"
	}
	for _, label := range strings.Split(n, ".") {
		if len(label) == 0 || len(label) > 63 {
			return "not a host name: each dot-separated label has 1-63 characters"
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "not a host name: a label starts or ends with a hyphen"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return "not a host name: letters, digits, hyphens and dots only (an internationalized name in its xn-- form)"
			}
		}
	}
	return ""
}
