package kafka

import (
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/internal/envconf"
)

// MaxMessageBytesLimit is the largest accepted BRIDGE_KAFKA_MAX_MESSAGE_BYTES (Kafka
// sizes are int32; a gibibyte is far beyond any sane broker setting).
const MaxMessageBytesLimit = 1 << 30

// MinMissingTopicInterval and MaxMissingTopicInterval bound
// BRIDGE_KAFKA_MISSING_TOPIC_INTERVAL.
const (
	MinMissingTopicInterval = 100 * time.Millisecond
	MaxMissingTopicInterval = time.Hour
)

// CancelGroup is the consumer group of the cancel topic for the ingress group group.
func CancelGroup(group string) string { return group + "-cancel" }

// Config is the Kafka side of the bridge: the BRIDGE_KAFKA_* variables (env tags;
// package config embeds it and parses them; [Config.Validate] checks them).
type Config struct {
	// Brokers are the bootstrap brokers (host:port). Empty: Kafka is off. Items are
	// trimmed; empty items are dropped.
	Brokers []string `env:"KAFKA_BROKERS" envDoc:"comma-separated host:port bootstrap brokers; empty turns Kafka off"`
	// Topic is the ingress topic.
	Topic string `env:"KAFKA_TOPIC" envDefault:"delay.in" envDoc:"ingress topic"`
	// Group is the consumer group of the ingress topic; the cancel topic is read by the
	// group Group + "-cancel" (its rebalances never pause the ingress topic).
	Group string `env:"KAFKA_GROUP" envDefault:"delaybridge" envDoc:"consumer group of the ingress topic (the cancel topic is read by <group>-cancel)"`
	// MissingTopicInterval is how often a missing cancel topic is looked for again (Kafka
	// cancels wait until it exists; ingress goes on).
	MissingTopicInterval time.Duration `env:"KAFKA_MISSING_TOPIC_INTERVAL" envDefault:"1m" envDoc:"how often a missing Kafka cancel topic is looked for again; cancels wait until it exists (extension)"`
	// SASLMechanism is "", PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (given in any case,
	// stored upper case).
	SASLMechanism string `env:"KAFKA_SASL_MECHANISM" envDoc:"Kafka SASL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty: none"`
	// SASLUsername and SASLPassword are the SASL credentials. The password is secret.
	SASLUsername     string `env:"KAFKA_SASL_USERNAME" envDoc:"Kafka SASL user"`
	SASLPassword     string `env:"KAFKA_SASL_PASSWORD" envDoc:"Kafka SASL password (secret)"`
	SASLPasswordFile string `env:"KAFKA_SASL_PASSWORD_FILE" envDoc:"file holding BRIDGE_KAFKA_SASL_PASSWORD"`
	// MaxMessageBytes is the largest record the target brokers take (their
	// message.max.bytes, or a topic's max.message.bytes if lower), key and headers
	// included; the publisher's batch limit too (extension, not in the contract).
	MaxMessageBytes int `env:"KAFKA_MAX_MESSAGE_BYTES" envDefault:"1048576" envDoc:"largest Kafka record the brokers take (message.max.bytes), key and headers included; larger messages are refused at ingress (extension)"`
	// KafkaTLS turns TLS on with the system CAs; the TLS file variables turn it on too.
	KafkaTLS bool `env:"KAFKA_TLS" envDefault:"false" envDoc:"connect to Kafka over TLS (the TLS file variables imply it)"`
	// TLSCAFile, TLSCertFile, TLSKeyFile: CA bundle, client certificate and key.
	TLSCAFile   string `env:"KAFKA_TLS_CA_FILE" envDoc:"PEM CA bundle for Kafka TLS"`
	TLSCertFile string `env:"KAFKA_TLS_CERT_FILE" envDoc:"PEM client certificate for Kafka mutual TLS (with BRIDGE_KAFKA_TLS_KEY_FILE)"`
	TLSKeyFile  string `env:"KAFKA_TLS_KEY_FILE" envDoc:"PEM client key for Kafka mutual TLS"`
}

// Normalize trims the broker list's items (dropping empty ones) and upper-cases the SASL
// mechanism; package config calls it after parsing.
func (c *Config) Normalize() {
	var brokers []string
	for _, b := range c.Brokers {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	c.Brokers = brokers
	c.SASLMechanism = strings.ToUpper(c.SASLMechanism)
}

// Validate returns every problem of the BRIDGE_KAFKA_* variables (normalized), naming
// the variable.
func (c Config) Validate() envconf.Problems {
	var ps envconf.Problems
	ps.TLSFiles("KAFKA", c.TLSCertFile, c.TLSKeyFile)
	switch c.SASLMechanism {
	case "":
		if c.SASLUsername != "" || c.SASLPassword != "" {
			ps.Add("KAFKA_SASL_MECHANISM", "empty, but a SASL user or password is set: choose PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if c.SASLUsername == "" {
			ps.Add("KAFKA_SASL_USERNAME", "required with BRIDGE_KAFKA_SASL_MECHANISM")
		}
		if c.SASLPassword == "" {
			ps.Add("KAFKA_SASL_PASSWORD", "required with BRIDGE_KAFKA_SASL_MECHANISM (or BRIDGE_KAFKA_SASL_PASSWORD_FILE)")
		}
	default:
		ps.Add("KAFKA_SASL_MECHANISM", "%s: must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", envconf.Quote(c.SASLMechanism))
	}
	for _, b := range c.Brokers {
		if p := envconf.DialAddr(b); p != "" {
			ps.Add("KAFKA_BROKERS", "%s: %s", envconf.Quote(b), p)
		}
	}
	if n := c.MaxMessageBytes; n < 1024 || n > MaxMessageBytesLimit {
		ps.Add("KAFKA_MAX_MESSAGE_BYTES", "%d: must be 1024 to %d", n, MaxMessageBytesLimit)
	}
	if p := CheckTopic(c.Topic); p != "" {
		ps.Add("KAFKA_TOPIC", "%s: %s", envconf.Quote(c.Topic), p)
	}
	if d := c.MissingTopicInterval; d < MinMissingTopicInterval || d > MaxMissingTopicInterval {
		ps.Add("KAFKA_MISSING_TOPIC_INTERVAL", "%s: must be between %s and %s", d, envconf.Duration(MinMissingTopicInterval), envconf.Duration(MaxMissingTopicInterval))
	}
	if c.Group == "" || envconf.HasSpaceOrControl(c.Group) || len(c.Group) > 255 {
		ps.Add("KAFKA_GROUP", "%s: must be 1-255 bytes, without whitespace", envconf.Quote(c.Group))
	}
	return ps
}

// CheckTopic returns why s is not a valid Kafka topic name, or "".
func CheckTopic(s string) string {
	if s == "" || len(s) > 249 {
		return "topic must be 1-249 characters"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "topic may contain only a-z A-Z 0-9 . _ -"
		}
	}
	if s == "." || s == ".." {
		return "topic may not be . or .."
	}
	return ""
}

// defaultTo sets *v to d when *v is the zero value (a config field left unset).
func defaultTo[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}
