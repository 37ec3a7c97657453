package intake

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/glob"
	"github.com/delaybridge/delaybridge/internal/subject"
)

// Broker names, as used in target prefixes ("nats:orders.timeout") and in
// [TargetPolicy.Brokers].
const (
	BrokerNATS  = "nats"
	BrokerKafka = "kafka"
)

// Name limits of targets.
const (
	// MaxSubjectLen is the longest accepted NATS target subject, in bytes. NATS itself has
	// no fixed limit (only the 4 KiB protocol line); 255 keeps targets sane and
	// comparable to Kafka's limit.
	MaxSubjectLen = 255
	// MaxTopicLen is Kafka's limit on topic names.
	MaxTopicLen = 249
)

// Target is a validated destination of a delayed message.
type Target struct {
	// Broker is BrokerNATS or BrokerKafka.
	Broker string
	// Name is the subject (NATS) or topic (Kafka).
	Name string
}

// String returns "broker:name", the normalized form stored with the message.
func (t Target) String() string { return t.Broker + ":" + t.Name }

// TargetPolicy decides which targets are valid. The zero value accepts nothing. It is
// read-only once built and safe for concurrent use.
type TargetPolicy struct {
	// Brokers are the configured brokers: BrokerNATS and/or BrokerKafka mapped to true.
	Brokers map[string]bool
	// Allow are the BRIDGE_TARGET_ALLOW glob patterns: "*" matches any run of characters
	// (dots included), "?" one character, "[...]" a class and "\" escapes, with path.Match
	// syntax. A pattern containing ":" is matched against "broker:name" (broker in lower
	// case), any other against the bare name. An empty list allows nothing (config
	// defaults to ["*"]); a malformed pattern matches nothing.
	Allow []string
	// Own are, per broker, the bridge's own subjects/topics (ingress, cancel, DLQ), which
	// are never valid targets. NATS entries may contain wildcards ("delay.>"); a target
	// overlapping them is rejected.
	Own map[string][]string
}

// targetError is a target rejection; it wraps ErrInvalidTarget and, when set, kind.
type targetError struct {
	kind   error // nil or a more specific sentinel
	value  string
	detail string
}

func (e *targetError) Error() string {
	if e.kind == ErrMissingTarget {
		return "missing target: " + e.detail
	}
	return "invalid target " + quote(e.value) + ": " + e.detail
}

func (e *targetError) Unwrap() []error {
	if e.kind == nil {
		return []error{ErrInvalidTarget}
	}
	return []error{ErrInvalidTarget, e.kind}
}

// ParseTarget validates an x-target value (also the HTTP API's "target") and returns it
// normalized. Forms: "name" (on sourceBroker), "nats:name", "kafka:name"; the prefix is
// matched case-insensitively and the first ":" always ends it, so an unprefixed NATS
// subject cannot contain ":" (write "nats:a:b"). sourceBroker is the broker the message
// came from; "" (the HTTP API) means NATS when NATS is configured, else Kafka.
//
// Rejected, with an error wrapping [ErrInvalidTarget]: an empty value (also
// [ErrMissingTarget]); an unknown prefix; a broker that is not configured (also
// [ErrBrokerNotConfigured]); a NATS subject that is longer than [MaxSubjectLen], not
// UTF-8, has whitespace or control characters, an empty token, "*" or ">" anywhere, or is
// reserved ("$..." such as $JS.API/$SYS/$KV, or starting "_INBOX"); a Kafka topic not
// matching [a-zA-Z0-9._-]{1,249}, "." or "..", or starting "__"; a target overlapping
// one of the bridge's own subjects/topics of the same broker (also [ErrTargetLoop]); a
// target matching no Allow pattern (also [ErrTargetNotAllowed]).
func (p TargetPolicy) ParseTarget(value string, sourceBroker string) (Target, error) {
	if value == "" {
		return Target{}, &targetError{kind: ErrMissingTarget, detail: contract.HeaderTarget + " is empty"}
	}
	var t Target
	if i := strings.IndexByte(value, ':'); i >= 0 {
		t.Broker, t.Name = strings.ToLower(value[:i]), value[i+1:]
		if t.Broker != BrokerNATS && t.Broker != BrokerKafka {
			return Target{}, &targetError{value: value, detail: "unknown broker prefix " + quote(value[:i]) + " (want nats: or kafka:)"}
		}
		if t.Name == "" {
			return Target{}, &targetError{value: value, detail: "empty name after the broker prefix"}
		}
	} else {
		t.Name = value
		switch sourceBroker {
		case BrokerNATS, BrokerKafka:
			t.Broker = sourceBroker
		case "":
			t.Broker = BrokerNATS
			if !p.Brokers[BrokerNATS] && p.Brokers[BrokerKafka] {
				t.Broker = BrokerKafka
			}
		default:
			return Target{}, &targetError{value: value, detail: "unknown source broker " + quote(sourceBroker)}
		}
	}
	if !p.Brokers[t.Broker] {
		return Target{}, &targetError{kind: ErrBrokerNotConfigured, value: value, detail: "broker " + t.Broker + " is not configured"}
	}
	if t.Broker == BrokerNATS {
		if detail := checkSubject(t.Name); detail != "" {
			return Target{}, &targetError{value: value, detail: detail}
		}
		for _, own := range p.Own[BrokerNATS] {
			if subject.Overlap(t.Name, own) {
				return Target{}, &targetError{kind: ErrTargetLoop, value: value, detail: "overlaps the bridge's own subject " + quote(own)}
			}
		}
	} else {
		if detail := checkTopic(t.Name); detail != "" {
			return Target{}, &targetError{value: value, detail: detail}
		}
		for _, own := range p.Own[BrokerKafka] {
			if t.Name == own {
				return Target{}, &targetError{kind: ErrTargetLoop, value: value, detail: "is the bridge's own topic " + quote(own)}
			}
		}
	}
	if !p.allowed(t) {
		return Target{}, &targetError{kind: ErrTargetNotAllowed, value: value, detail: "matches no allowed pattern"}
	}
	return t, nil
}

// allowed reports whether t matches an Allow pattern.
func (p TargetPolicy) allowed(t Target) bool {
	full := t.String()
	for _, pat := range p.Allow {
		if glob.MatchTarget(pat, full) {
			return true
		}
	}
	return false
}

// checkSubject returns why s is not a valid literal NATS target subject, or "".
func checkSubject(s string) string {
	switch {
	case len(s) > MaxSubjectLen:
		return fmt.Sprintf("subject longer than %d bytes", MaxSubjectLen)
	case !utf8.ValidString(s):
		return "subject is not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return "subject contains whitespace or a control character"
		}
	}
	if strings.ContainsAny(s, "*>") {
		return "subject contains a wildcard (* or >)"
	}
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return "subject has an empty token"
	}
	switch {
	case s[0] == '$':
		return "reserved subject ($...: JetStream, system and KV API)"
	case strings.HasPrefix(s, "_INBOX"):
		return "reserved subject (_INBOX...: request replies)"
	}
	return ""
}

// checkTopic returns why s is not a valid Kafka target topic, or "".
func checkTopic(s string) string {
	if len(s) > MaxTopicLen {
		return fmt.Sprintf("topic longer than %d bytes", MaxTopicLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "topic may contain only a-z A-Z 0-9 . _ -"
		}
	}
	switch {
	case s == "." || s == "..":
		return "topic may not be . or .."
	case strings.HasPrefix(s, "__"):
		return "reserved topic (__...: Kafka internal)"
	}
	return ""
}
