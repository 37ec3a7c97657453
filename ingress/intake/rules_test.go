package intake

import (
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
)

// TestRulesDefaults: the env tags' defaults are the defaults the code applies to a zero
// field, so that a Rules built in code and one parsed from the environment agree.
func TestRulesDefaults(t *testing.T) {
	r, err := env.ParseAsWithOptions[Rules](env.Options{Environment: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxHeaders != DefaultMaxHeaders || r.MaxHeaderBytes != DefaultMaxHeaderBytes || r.MaxHops != DefaultMaxHops {
		t.Errorf("tag defaults %d/%d/%d, code defaults %d/%d/%d", r.MaxHeaders, r.MaxHeaderBytes, r.MaxHops,
			DefaultMaxHeaders, DefaultMaxHeaderBytes, DefaultMaxHops)
	}
	if ps := r.Validate(); len(ps) != 0 {
		t.Errorf("the defaults are invalid: %v", ps)
	}
}

func TestRulesValidate(t *testing.T) {
	ok := Rules{MaxDelay: time.Hour, MaxPayload: 1, MaxHeaders: 1, MaxHeaderBytes: 1, MaxHops: 1}
	for _, tc := range []struct {
		change func(*Rules)
		want   string
	}{
		{func(r *Rules) { r.MaxDelay = 0 }, "MAX_DELAY: 0s: must be > 0"},
		{func(r *Rules) { r.MaxDelay = MaxMaxDelay + time.Hour }, "MAX_DELAY: 876601h: must be at most 876600h (100 years)"},
		{func(r *Rules) { r.MaxPayload = -1 }, "MAX_PAYLOAD: -1: must be > 0"},
		{func(r *Rules) { r.MaxPayload = MaxMaxPayload + 1 }, "MAX_PAYLOAD: 536870913: must be at most 536870912 (Redis' limit)"},
		{func(r *Rules) { r.MaxHeaders = 0 }, "MAX_HEADERS: 0: must be > 0"},
		{func(r *Rules) { r.MaxHeaderBytes = 0 }, "MAX_HEADER_BYTES: 0: must be > 0"},
		{func(r *Rules) { r.MaxHops = -2 }, "MAX_HOPS: -2: must be > 0"},
	} {
		r := ok
		tc.change(&r)
		ps := r.Validate()
		if len(ps) != 1 || ps[0].Error() != tc.want {
			t.Errorf("got %v, want %q", ps, tc.want)
		}
	}
	if ps := ok.Validate(); len(ps) != 0 {
		t.Errorf("valid rules: %v", ps)
	}
}
