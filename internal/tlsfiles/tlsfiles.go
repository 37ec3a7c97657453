// Package tlsfiles builds client TLS configurations from PEM files: a CA bundle to trust
// and an optional client certificate and key (mutual TLS).
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files names the PEM files of one TLS client. Paths are not secret and may appear in
// errors; the contents never do.
type Files struct {
	// CA is a PEM bundle of the certificate authorities to trust; empty: the system pool.
	CA string
	// Cert and Key are the client certificate and its private key (both or neither).
	Cert, Key string
}

// Set reports whether any file is named.
func (f Files) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Config returns a client *tls.Config (TLS 1.2 or later, server certificates always
// verified). The files are read now, so that a missing or invalid file fails at start;
// the client certificate is read again at every handshake, so that a rotated certificate
// is used on the next reconnect. serverName may be empty (taken from the dialled address).
func (f Files) Config(serverName string) (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca %s: no PEM certificate found", f.CA)
		}
		conf.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("tls: set both the client certificate and key files, or neither")
	}
	if f.Cert != "" {
		if _, err := f.loadPair(); err != nil {
			return nil, err
		}
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return f.loadPair()
		}
	}
	return conf, nil
}

func (f Files) loadPair() (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		// tls.LoadX509KeyPair's errors name no key material.
		return nil, fmt.Errorf("tls client certificate %s / key %s: %w", f.Cert, f.Key, err)
	}
	return &c, nil
}
