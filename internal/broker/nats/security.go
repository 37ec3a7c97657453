package nats

import (
	"crypto/tls"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
)

// Security is how the bridge authenticates to NATS and protects the connection: a user
// credentials file (JWT + nkey seed) or an nkey seed file, and a TLS client
// configuration. The zero value adds nothing (the URL's user/password or token, if any,
// still apply).
type Security struct {
	// CredsFile is a .creds file (nats.UserCredentials); read at every (re)connect.
	CredsFile string
	// NKeyFile is a file holding a user nkey seed (SU...).
	NKeyFile string
	// TLS, when set, is used for the connection (and required of the server).
	TLS *tls.Config
}

// Options returns the nats.go options for s. The nkey seed file is read now, so a bad
// file fails at start; errors name files, never their content.
func (s Security) Options() ([]natsgo.Option, error) {
	var opts []natsgo.Option
	if s.CredsFile != "" {
		opts = append(opts, natsgo.UserCredentials(s.CredsFile))
	}
	if s.NKeyFile != "" {
		o, err := natsgo.NkeyOptionFromSeed(s.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey file %s: %w", s.NKeyFile, err)
		}
		opts = append(opts, o)
	}
	if s.TLS != nil {
		opts = append(opts, natsgo.Secure(s.TLS))
	}
	return opts, nil
}
