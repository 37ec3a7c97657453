package nats

import (
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/delaybridge/delaybridge/internal/envconf"
	"github.com/delaybridge/delaybridge/internal/subject"
)

// Config is the NATS side of the bridge: the BRIDGE_NATS_* variables (env tags; package
// config embeds it and parses them; [Config.Validate] checks them).
type Config struct {
	// URL is the NATS server list, comma-separated URLs as nats.Connect takes it
	// (nats://, tls://, ws://, wss://, or host:port). Empty: NATS is off. It may carry
	// credentials (user:password@ or token@): never printed (config.Config.Redacted).
	URL string `env:"NATS_URL" envDoc:"NATS servers, comma-separated URLs; empty turns NATS off"`
	// Subject is the ingress subject (wildcards allowed).
	Subject string `env:"NATS_SUBJECT" envDefault:"delay.in" envDoc:"ingress subject"`
	// Queue is the queue group of the core subscriptions, so replicas share the work.
	Queue string `env:"NATS_QUEUE" envDefault:"delaybridge" envDoc:"queue group of the core subscription"`
	// Stream, when set, makes the bridge consume the ingress subject through this
	// JetStream stream (which must exist) instead of a core subscription.
	Stream string `env:"NATS_STREAM" envDoc:"consume the ingress subject through this JetStream stream; empty: core NATS"`
	// Consumer is the durable pull consumer on Stream.
	Consumer string `env:"NATS_CONSUMER" envDefault:"delaybridge" envDoc:"durable consumer name"`
	// AckWait is how long JetStream waits for the bridge's ack before redelivering a
	// message of the ingress stream (extension, not in the contract).
	AckWait time.Duration `env:"NATS_ACK_WAIT" envDefault:"30s" envDoc:"JetStream redelivery delay of unacked ingress messages (extension)"`
	// MaxProgress bounds how long an ingress message the bridge is still working on (its
	// park blocked on a slow or unreachable Redis) is kept from redelivery by in-progress
	// reports every AckWait/2: 0 means 5 x AckWait, at least 1m; negative turns the
	// reports off (extension, not in the contract).
	MaxProgress time.Duration `env:"NATS_MAX_PROGRESS" envDefault:"0s" envDoc:"how long JetStream is told an ingress message is still in progress while its park waits for Redis; 0: 5 x BRIDGE_NATS_ACK_WAIT, at least 1m; negative: off (extension)"`
	// CredsFile is a NATS user credentials file (JWT and nkey seed).
	CredsFile string `env:"NATS_CREDS_FILE" envDoc:"NATS .creds file (user JWT + nkey seed)"`
	// NKeyFile is a file holding a user nkey seed (SU...), for nkey authentication.
	NKeyFile string `env:"NATS_NKEY_FILE" envDoc:"file holding a NATS user nkey seed"`
	// TLSCAFile, TLSCertFile, TLSKeyFile: the CA bundle to trust and the client
	// certificate and key for NATS (mutual) TLS.
	TLSCAFile   string `env:"NATS_TLS_CA_FILE" envDoc:"PEM CA bundle for NATS TLS; turns TLS on"`
	TLSCertFile string `env:"NATS_TLS_CERT_FILE" envDoc:"PEM client certificate for NATS mutual TLS (with BRIDGE_NATS_TLS_KEY_FILE)"`
	TLSKeyFile  string `env:"NATS_TLS_KEY_FILE" envDoc:"PEM client key for NATS mutual TLS"`
}

// Validate returns every problem of the BRIDGE_NATS_* variables, naming the variable.
// The URL is checked only when set (empty: NATS off); the other names always, as they
// have valid defaults.
func (c Config) Validate() envconf.Problems {
	var ps envconf.Problems
	if c.URL != "" {
		for i, u := range strings.Split(c.URL, ",") {
			if p := checkURL(strings.TrimSpace(u)); p != "" {
				ps.Add("NATS_URL", "server %d: %s", i+1, p)
			}
		}
	}
	if p := subject.Check(c.Subject, true); p != "" {
		ps.Add("NATS_SUBJECT", "%s: %s", envconf.Quote(c.Subject), p)
	}
	if c.Queue == "" || envconf.HasSpaceOrControl(c.Queue) {
		ps.Add("NATS_QUEUE", "%s: must be non-empty, without whitespace", envconf.Quote(c.Queue))
	}
	if c.Stream != "" {
		if p := checkJSName(c.Stream); p != "" {
			ps.Add("NATS_STREAM", "%s: %s", envconf.Quote(c.Stream), p)
		}
	}
	if p := checkJSName(c.Consumer); p != "" {
		ps.Add("NATS_CONSUMER", "%s: %s", envconf.Quote(c.Consumer), p)
	}
	ps.TLSFiles("NATS", c.TLSCertFile, c.TLSKeyFile)
	if c.CredsFile != "" && c.NKeyFile != "" {
		ps.Add("NATS_NKEY_FILE", "set only one of BRIDGE_NATS_CREDS_FILE and BRIDGE_NATS_NKEY_FILE")
	}
	ps.PositiveDuration("NATS_ACK_WAIT", c.AckWait, time.Millisecond)
	return ps
}

// checkURL returns why one NATS server address is unusable, or "". It never echoes the
// address, which may hold credentials.
func checkURL(s string) string {
	if s == "" {
		return "empty"
	}
	if !strings.Contains(s, "://") {
		s = "nats://" + s // as nats.go does
	}
	u, err := url.Parse(s)
	if err != nil {
		return "not a valid URL"
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return "scheme must be nats://, tls://, ws:// or wss://"
	}
	if u.Hostname() == "" {
		return "missing host"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "port must be 1-65535"
		}
	}
	return ""
}

// checkJSName checks a JetStream stream or consumer name.
func checkJSName(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > 255 {
		return "longer than 255 bytes"
	}
	if !utf8.ValidString(s) || envconf.HasSpaceOrControl(s) || strings.ContainsAny(s, ".*>/\\") {
		return "must not contain whitespace, control characters or . * > / \\"
	}
	return ""
}
