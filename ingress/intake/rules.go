package intake

import (
	"time"

	"github.com/delaybridge/delaybridge/internal/envconf"
)

// Rules are the validation settings shared by every way a message enters the bridge
// (broker subscriptions and the HTTP message API). The fields with an env tag are BRIDGE_*
// variables (package config embeds Rules and parses them; [Rules.Validate] checks them);
// Limits and Targets are set by the program that assembles the bridge.
type Rules struct {
	// MaxDelay is the longest accepted delay; it bounds x-deliver-at too.
	MaxDelay time.Duration `env:"MAX_DELAY" envDefault:"8760h" envDoc:"longest accepted delay (also bounds x-deliver-at), at most 100 years"`
	// MaxPayload is the largest accepted payload in bytes, the user's own cap; Limits
	// adds the target broker's.
	MaxPayload int `env:"MAX_PAYLOAD" envDefault:"1048576" envDoc:"largest accepted payload, bytes"`
	// MaxHeaders is the most headers a message may have, control headers included
	// (extension, not in the contract); 0 means [DefaultMaxHeaders].
	MaxHeaders int `env:"MAX_HEADERS" envDefault:"64" envDoc:"most headers an incoming message may have (extension)"`
	// MaxHeaderBytes bounds the sum of the lengths of all header names and values
	// (extension, not in the contract); 0 means [DefaultMaxHeaderBytes].
	MaxHeaderBytes int `env:"MAX_HEADER_BYTES" envDefault:"8192" envDoc:"largest total of header name and value bytes of an incoming message (extension)"`
	// MaxHops is the x-delay-hops count at which a message is rejected as a loop
	// (extension, not in the contract); 0 means [DefaultMaxHops].
	MaxHops int `env:"MAX_HOPS" envDefault:"8" envDoc:"x-delay-hops count at which a message is dead-lettered as a loop (extension)"`

	// Limits, when set, gives the largest message each target broker takes: a message
	// whose outgoing form (payload and the headers as egress will send them) exceeds it is
	// rejected with payload_too_large. nil: only MaxPayload is checked.
	Limits SizeLimits
	// Targets validates x-target.
	Targets TargetPolicy
}

// Defaults of the header limits in [Rules] (a zero field means its default); equal to
// the env tags (TestRulesDefaults).
const (
	// DefaultMaxHeaders is the default of Rules.MaxHeaders (BRIDGE_MAX_HEADERS).
	DefaultMaxHeaders = 64
	// DefaultMaxHeaderBytes is the default of Rules.MaxHeaderBytes (BRIDGE_MAX_HEADER_BYTES).
	DefaultMaxHeaderBytes = 8192
	// DefaultMaxHops is the default of Rules.MaxHops (BRIDGE_MAX_HOPS).
	DefaultMaxHops = 8
)

// Limits of the variables, checked by [Rules.Validate].
const (
	// MaxMaxDelay is the largest accepted BRIDGE_MAX_DELAY: 100 years of 365.25 days.
	MaxMaxDelay = 100 * 8766 * time.Hour
	// MaxMaxPayload is the largest accepted BRIDGE_MAX_PAYLOAD: Redis' limit on a value.
	MaxMaxPayload = 512 << 20
)

// Validate returns every problem of the fields set from BRIDGE_* variables, naming the
// variable.
func (r Rules) Validate() envconf.Problems {
	var ps envconf.Problems
	if ps.PositiveDuration("MAX_DELAY", r.MaxDelay, time.Millisecond) && r.MaxDelay > MaxMaxDelay {
		ps.Add("MAX_DELAY", "%s: must be at most %s (100 years)", envconf.Duration(r.MaxDelay), envconf.Duration(MaxMaxDelay))
	}
	if r.MaxPayload <= 0 {
		ps.Add("MAX_PAYLOAD", "%d: must be > 0", r.MaxPayload)
	} else if r.MaxPayload > MaxMaxPayload {
		ps.Add("MAX_PAYLOAD", "%d: must be at most %d (Redis' limit)", r.MaxPayload, MaxMaxPayload)
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"MAX_HEADERS", r.MaxHeaders}, {"MAX_HEADER_BYTES", r.MaxHeaderBytes}, {"MAX_HOPS", r.MaxHops}} {
		if v.n <= 0 {
			ps.Add(v.name, "%d: must be > 0", v.n)
		}
	}
	return ps
}
