package connect

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testcerts"
)

func TestRedisSecurityApply(t *testing.T) {
	certs := testcerts.Generate(t)
	sec, err := newRedisSecurity(Redis{Username: "u2", Password: "p2",
		TLSCAFile: certs.CA, TLSCertFile: certs.ClientCert, TLSKeyFile: certs.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url      string
		insecure bool
	}{
		{"redis://u1:p1@db.example:6379/0", false},
		{"rediss://u1:p1@db.example:6379/0", false},
		{"rediss://u1:p1@db.example:6379/0?skip_verify=true", true},
	} {
		o, err := redis.ParseURL(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		sec.apply(&o.TLSConfig, &o.Username, &o.Password, slog.New(slog.NewTextHandler(&log, nil)))
		if o.Username != "u2" || o.Password != "p2" {
			t.Errorf("%s: user %q password %q, want the variables' values", tc.url, o.Username, o.Password)
		}
		if o.TLSConfig == nil || o.TLSConfig.RootCAs == nil || o.TLSConfig.GetClientCertificate == nil {
			t.Fatalf("%s: TLS not configured from the files", tc.url)
		}
		if strings.HasPrefix(tc.url, "rediss") && o.TLSConfig.ServerName != "db.example" {
			t.Errorf("%s: server name %q lost", tc.url, o.TLSConfig.ServerName)
		}
		if o.TLSConfig.InsecureSkipVerify != tc.insecure || strings.Contains(log.String(), "OFF") != tc.insecure {
			t.Errorf("%s: InsecureSkipVerify %v, warning %q", tc.url, o.TLSConfig.InsecureSkipVerify, log.String())
		}
		if strings.Contains(log.String(), "p2") {
			t.Errorf("log shows the password: %s", log.String())
		}
	}

	// Nothing configured: the URL's settings stay.
	o, _ := redis.ParseURL("redis://u1:p1@db.example:6379/0")
	redisSecurity{}.apply(&o.TLSConfig, &o.Username, &o.Password, slog.New(slog.DiscardHandler))
	if o.Username != "u1" || o.Password != "p1" || o.TLSConfig != nil {
		t.Errorf("empty security changed the options: %q %q %v", o.Username, o.Password, o.TLSConfig)
	}
	if _, err := newRedisSecurity(Redis{TLSCertFile: certs.ClientCert}); err == nil {
		t.Error("certificate without key: no error")
	}
}

func TestIsRedisAuthError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{redis.ErrClosed, false},
		{errors.New("WRONGPASS plain error, not from Redis"), false},
		{nil, false},
	} {
		if got := IsAuthError(tc.err); got != tc.want {
			t.Errorf("%v: %v", tc.err, got)
		}
	}
}
