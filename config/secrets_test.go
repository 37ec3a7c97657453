package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeSecret(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSecretFiles(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	file := writeSecret(t, secret+"\n")
	for _, name := range secretVars {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{"BRIDGE_" + name + "_FILE": file}
			if name == "KAFKA_SASL_PASSWORD" {
				env["BRIDGE_KAFKA_SASL_MECHANISM"] = "plain"
				env["BRIDGE_KAFKA_SASL_USERNAME"] = "u"
			}
			c := mustLoad(t, env)
			got := map[string]string{"REDIS_PASSWORD": c.Redis.Password, "KAFKA_SASL_PASSWORD": c.Kafka.SASLPassword, "API_TOKEN": c.APIToken}[name]
			if got != secret {
				t.Fatalf("%s from file = %q, want %q (one trailing newline trimmed)", name, got, secret)
			}
			if r := c.Redacted()["BRIDGE_"+name]; r != "[redacted]" {
				t.Errorf("Redacted()[%s] = %q", name, r)
			}
			for k, v := range c.Redacted() {
				if strings.Contains(v, secret) {
					t.Errorf("Redacted()[%s] holds the secret", k)
				}
			}

			env["BRIDGE_"+name] = "other"
			_, err := Load(env)
			if got := problems(t, err); len(got) != 1 || got[0] != "BRIDGE_"+name+"_FILE" {
				t.Errorf("both set: problems %v, want [BRIDGE_%s_FILE]", got, name)
			}
		})
	}
}

func TestSecretFileProblemsNeverShowContent(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	for name, path := range map[string]string{
		"missing": filepath.Join(t.TempDir(), "nope"),
		"empty":   writeSecret(t, "\n"),
		"huge":    writeSecret(t, strings.Repeat(secret, 10000)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(map[string]string{"BRIDGE_API_TOKEN_FILE": path})
			if got := problems(t, err); len(got) != 1 || got[0] != "BRIDGE_API_TOKEN_FILE" {
				t.Fatalf("problems %v (%v)", got, err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error shows the content: %v", err)
			}
		})
	}
}

func TestSecurityValidation(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BRIDGE_REDIS_TLS_CERT_FILE": "c.pem"}, "BRIDGE_REDIS_TLS_KEY_FILE"},
		{map[string]string{"BRIDGE_NATS_TLS_KEY_FILE": "k.pem"}, "BRIDGE_NATS_TLS_CERT_FILE"},
		{map[string]string{"BRIDGE_KAFKA_TLS_CERT_FILE": "c.pem"}, "BRIDGE_KAFKA_TLS_KEY_FILE"},
		{map[string]string{"BRIDGE_NATS_CREDS_FILE": "a", "BRIDGE_NATS_NKEY_FILE": "b"}, "BRIDGE_NATS_NKEY_FILE"},
		{map[string]string{"BRIDGE_KAFKA_SASL_MECHANISM": "GSSAPI", "BRIDGE_KAFKA_SASL_USERNAME": "u", "BRIDGE_KAFKA_SASL_PASSWORD": "p"}, "BRIDGE_KAFKA_SASL_MECHANISM"},
		{map[string]string{"BRIDGE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "BRIDGE_KAFKA_SASL_PASSWORD": "p"}, "BRIDGE_KAFKA_SASL_USERNAME"},
		{map[string]string{"BRIDGE_KAFKA_SASL_MECHANISM": "scram-sha-256", "BRIDGE_KAFKA_SASL_USERNAME": "u"}, "BRIDGE_KAFKA_SASL_PASSWORD"},
		{map[string]string{"BRIDGE_KAFKA_SASL_USERNAME": "u"}, "BRIDGE_KAFKA_SASL_MECHANISM"},
	} {
		_, err := Load(tc.env)
		if got := problems(t, err); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%v: problems %v, want [%s]", tc.env, got, tc.want)
		}
	}
	c := mustLoad(t, map[string]string{"BRIDGE_KAFKA_SASL_MECHANISM": "scram-sha-256", "BRIDGE_KAFKA_SASL_USERNAME": "u", "BRIDGE_KAFKA_SASL_PASSWORD": "p"})
	if c.Kafka.SASLMechanism != "SCRAM-SHA-256" {
		t.Errorf("mechanism %q, want upper case", c.Kafka.SASLMechanism)
	}
}
