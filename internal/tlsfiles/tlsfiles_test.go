package tlsfiles_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/internal/testcerts"
	"github.com/delaybridge/delaybridge/internal/tlsfiles"
)

func TestConfig(t *testing.T) {
	c := testcerts.Generate(t)
	conf, err := tlsfiles.Files{CA: c.CA, Cert: c.ClientCert, Key: c.ClientKey}.Config("")
	if err != nil {
		t.Fatal(err)
	}
	if conf.InsecureSkipVerify || conf.RootCAs == nil || conf.GetClientCertificate == nil {
		t.Fatalf("config %+v: want verification, the CA and a client certificate", conf)
	}
	first, err := conf.GetClientCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Rotation: new files under the same names are used at the next handshake.
	next := testcerts.Generate(t)
	for src, dst := range map[string]string{next.ClientCert: c.ClientCert, next.ClientKey: c.ClientKey} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	second, err := conf.GetClientCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first.Certificate[0], second.Certificate[0]) {
		t.Error("client certificate not re-read after rotation")
	}
}

func TestConfigErrors(t *testing.T) {
	c := testcerts.Generate(t)
	notPEM := filepath.Join(t.TempDir(), "x.pem")
	if err := os.WriteFile(notPEM, []byte("secret-not-a-cert"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]tlsfiles.Files{
		"missing CA":  {CA: filepath.Join(t.TempDir(), "nope.pem")},
		"CA not PEM":  {CA: notPEM},
		"cert alone":  {Cert: c.ClientCert},
		"key alone":   {Key: c.ClientKey},
		"key not PEM": {Cert: c.ClientCert, Key: notPEM},
	} {
		_, err := f.Config("")
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.Contains(err.Error(), "secret-not-a-cert") {
			t.Errorf("%s: error shows file content: %v", name, err)
		}
	}
}
