package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"golang.org/x/text/secure/precis"
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
		return plain.Auth{User: user, Pass: password}.AsMechanism(), nil
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		// Prepared as SCRAM clients prepare them (SASLprep's successor, PRECIS
		// OpaqueString: RFC 8265); refused here, at start, when that fails.
		u, err1 := precis.OpaqueString.String(user)
		p, err2 := precis.OpaqueString.String(password)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("kafka sasl %s: user or password not valid for SCRAM (SASLprep)", strings.ToUpper(mechanism))
		}
		a := scram.Auth{User: u, Pass: p}
		if strings.ToUpper(mechanism) == "SCRAM-SHA-256" {
			return a.AsSha256Mechanism(), nil
		}
		return a.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("kafka sasl: unknown mechanism %q (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", mechanism)
}

// IsAuthError reports whether err is the brokers refusing the SASL credentials or
// mechanism: retrying does not fix it, so the bridge stops at start instead.
func IsAuthError(err error) bool {
	return errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, ErrSASLRefused) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.IllegalSaslState)
}
