package intake

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// checkLimits rejects a header list with more than maxHeaders fields or more than maxBytes
// bytes of names and values. The error wraps [ErrInvalidHeaders].
func checkLimits(h headers.List, maxHeaders, maxBytes int) error {
	if len(h) > maxHeaders {
		return fmt.Errorf("%w: %d headers, limit %d", ErrInvalidHeaders, len(h), maxHeaders)
	}
	n := 0
	for _, f := range h {
		n += len(f.Key) + len(f.Value)
	}
	if n > maxBytes {
		return fmt.Errorf("%w: %d bytes of header names and values, limit %d", ErrInvalidHeaders, n, maxBytes)
	}
	return nil
}

// checkReserved refuses a header whose name starts with headers.ReservedPrefix
// ("_delaybridge_", in any case): the bridge keeps its internal metadata under such names
// next to a message's headers, so it could not carry the header unchanged, and dropping
// it would lose it silently. The error wraps [ErrInvalidHeaders] and names the header.
func checkReserved(h headers.List) error {
	for _, f := range h {
		if hasPrefixFold(f.Key, headers.ReservedPrefix) {
			return fmt.Errorf("%w: header %s: names starting %s (any case) are reserved for the bridge's internal metadata; rename it",
				ErrInvalidHeaders, quote(f.Key), quote(headers.ReservedPrefix))
		}
	}
	return nil
}

// parseHops reads x-delay-hops: 0 when absent; an error wrapping [ErrInvalidHeaders] when
// repeated or not a decimal count; an error wrapping [ErrTargetLoop] when it reached
// maxHops (the message went through bridges that often: a loop).
func parseHops(h headers.List, maxHops int) (int, error) {
	vs := h.Values(contract.HeaderHops)
	switch len(vs) {
	case 0:
		return 0, nil
	case 1:
	default:
		return 0, fmt.Errorf("%w: %s given %d times", ErrInvalidHeaders, contract.HeaderHops, len(vs))
	}
	if !isDigits(vs[0]) {
		return 0, fmt.Errorf("%w: %s %s is not a count", ErrInvalidHeaders, contract.HeaderHops, quote(vs[0]))
	}
	n, ok := parseUint(vs[0], uint64(maxHops))
	if !ok || int(n) >= maxHops {
		return 0, &hopsError{value: vs[0], max: maxHops}
	}
	return int(n), nil
}

// hopsError is an x-delay-hops count at or over the limit: the message went through a
// bridge that often (a loop), or its producer set the header. It wraps [ErrTargetLoop]
// and names the header and its value, not a target (the target may be fine).
type hopsError struct {
	value string
	max   int
}

func (e *hopsError) Error() string {
	return fmt.Sprintf("%s %s reached the limit of %d hops (BRIDGE_MAX_HOPS): the message went through a bridge that often, a loop; the bridge sets this header, a producer must not",
		contract.HeaderHops, quote(e.value), e.max)
}

func (e *hopsError) Unwrap() error { return ErrTargetLoop }

// isDropped reports whether an incoming header is not forwarded as given: control headers
// (x-delay-expires, x-delay-every, x-delay-misfire, x-delay-window and x-delay-max-wait among them: they are kept with the
// message, not delivered),
// the bridge's own output headers (x-delay-id, x-delay-due, x-delay-source, x-delay-error,
// x-delay-hops, which the bridge sets itself), the kafka-message-scheduler control headers
// (scheduler-epoch, scheduler-target-topic, scheduler-target-key), every Nats-* header
// (Nats-Schedule and Nats-Schedule-Target among them) (Nats-Msg-Id,
// Nats-Rollup, Nats-Expected-*, Nats-TTL...: a user must not steer the target stream), and
// the bridge's internal metadata keys (headers.ReservedPrefix, in any case), which must
// never reach the adapters from user input.
func isDropped(key string) bool {
	switch strings.ToLower(key) {
	case contract.HeaderDelay, contract.HeaderDeliverAt, contract.HeaderTarget, contract.HeaderID, contract.HeaderDue, contract.HeaderSource, contract.HeaderError, contract.HeaderHops,
		contract.HeaderExpires, contract.HeaderEvery, contract.HeaderMisfire, contract.HeaderWindow, contract.HeaderMaxWait, contract.HeaderOrderingKey, HeaderSchedulerEpoch, HeaderSchedulerTargetTopic, HeaderSchedulerTargetKey:
		return true
	}
	return hasPrefixFold(key, "nats-") || hasPrefixFold(key, headers.ReservedPrefix)
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// checkNATSHeaders rejects a header NATS cannot carry unchanged: a name that is not a
// NATS header name (printable ASCII without ":" and the separators nats.go refuses), or a
// value that is not UTF-8, contains CR or LF, or begins or ends with a blank (nats.go trims
// and replaces those). The error wraps [ErrInvalidHeaders].
func checkNATSHeaders(h headers.List) error {
	for _, f := range h {
		if !validNATSName(f.Key) {
			return fmt.Errorf("%w: header name %s is not valid on NATS", ErrInvalidHeaders, quote(f.Key))
		}
		if detail := natsValueProblem(f.Value); detail != "" {
			return fmt.Errorf("%w: header %s: value %s", ErrInvalidHeaders, quote(f.Key), detail)
		}
	}
	return nil
}

// natsValueProblem says why NATS would alter header value v, or "".
func natsValueProblem(v string) string {
	switch {
	case !utf8.ValidString(v):
		return "is not valid UTF-8"
	case strings.ContainsAny(v, "\r\n"):
		return "contains CR or LF"
	case v != "" && (isBlank(v[0]) || isBlank(v[len(v)-1])):
		return "begins or ends with a blank"
	}
	return ""
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// natsNameForbidden are the printable characters nats.go refuses in header names.
const natsNameForbidden = "\"()/,:;<=>?@[\\]{}"

// validNATSName reports whether nats.go accepts key as a header name.
func validNATSName(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 33 || c > 126 || strings.IndexByte(natsNameForbidden, c) >= 0 {
			return false
		}
	}
	return true
}
