package egress

import (
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
)

// TestConfigDefaults: the env tags' defaults are the defaults New applies to a zero
// field, so that a Config built in code and one parsed from the environment agree.
func TestConfigDefaults(t *testing.T) {
	parsed, err := env.ParseAsWithOptions[Config](env.Options{Environment: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	var zero Config
	zero.defaults()
	if parsed.MaxAttempts != zero.MaxAttempts || parsed.BackoffMin != zero.BackoffMin || parsed.BackoffMax != zero.BackoffMax ||
		parsed.TargetInflight != zero.TargetInflight || parsed.OwnershipTTL != zero.OwnershipTTL {
		t.Errorf("tag defaults %+v\ndiffer from code defaults %+v", parsed, zero)
	}
	if ps := parsed.Validate(); len(ps) != 0 {
		t.Errorf("the defaults are invalid: %v", ps)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{MaxAttempts: 1, BackoffMin: time.Second, BackoffMax: time.Second, TargetInflight: 1, OwnershipTTL: time.Second}
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.MaxAttempts = 0 }, "MAX_ATTEMPTS: 0: must be >= 1"},
		{func(c *Config) { c.BackoffMin = 2 * time.Second }, "RETRY_BACKOFF: 2s: must be at most BRIDGE_RETRY_BACKOFF_MAX (1s), the cap of the doubling"},
		{func(c *Config) { c.BackoffMin = time.Microsecond }, "RETRY_BACKOFF: 1µs: must be at least 1ms"},
		{func(c *Config) { c.OwnershipTTL = 2 * time.Minute }, "OWNERSHIP_TTL: 2m0s: must be between 300ms and 1m"},
		{func(c *Config) { c.TargetInflight = 0 }, "TARGET_INFLIGHT: 0: must be >= 1"},
	} {
		c := ok
		tc.change(&c)
		ps := c.Validate()
		if len(ps) != 1 || ps[0].Error() != tc.want {
			t.Errorf("got %v, want %q", ps, tc.want)
		}
	}
	if ps := ok.Validate(); len(ps) != 0 {
		t.Errorf("valid config: %v", ps)
	}
}
