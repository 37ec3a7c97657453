package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Security is how the adapter protects and authenticates its broker connections. The
// zero value is plaintext without authentication.
type Security struct {
	// TLS, when set, is used for every broker connection.
	TLS *tls.Config
	// SASL, when set, authenticates every broker connection ([NewSASL]).
	SASL sasl.Mechanism
}

// NewSASL returns the SASL mechanism named mechanism ("PLAIN", "SCRAM-SHA-256" or
// "SCRAM-SHA-512", any case) for user and password. Errors never contain the password.
func NewSASL(mechanism, user, password string) (sasl.Mechanism, error) {
	switch strings.ToUpper(mechanism) {
	case "PLAIN":
		return plain.Mechanism{Username: user, Password: password}, nil
	case "SCRAM-SHA-256":
		return scramMechanism(scram.SHA256, user, password)
	case "SCRAM-SHA-512":
		return scramMechanism(scram.SHA512, user, password)
	}
	return nil, fmt.Errorf("kafka sasl: unknown mechanism %q (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", mechanism)
}

func scramMechanism(algo scram.Algorithm, user, password string) (sasl.Mechanism, error) {
	m, err := scram.Mechanism(algo, user, password)
	if err != nil {
		// SASLprep rejected the user or password; say which without echoing them.
		return nil, fmt.Errorf("kafka sasl %s: user or password not valid for SCRAM (SASLprep)", algo.Name())
	}
	return m, nil
}

// IsAuthError reports whether err is the brokers refusing the SASL credentials or
// mechanism: retrying does not fix it, so the bridge stops at start instead.
func IsAuthError(err error) bool {
	return errors.Is(err, kafkago.SASLAuthenticationFailed) ||
		errors.Is(err, kafkago.UnsupportedSASLMechanism) ||
		errors.Is(err, kafkago.IllegalSASLState)
}
