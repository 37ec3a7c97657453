package ingress

import (
	"fmt"
	"time"

	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// ParseExpires reads x-delay-expires (name matched case-insensitively) from h: how long
// after its due time the message may still be delivered, in the x-delay grammar
// ([ParseDelay]), whole milliseconds, at least 1 ms. Absent: 0 (never expires). Repeated,
// malformed, zero or below a millisecond: an error wrapping [ErrInvalidExpires].
func ParseExpires(h headers.List) (time.Duration, error) {
	vs := h.Values(contract.HeaderExpires)
	switch len(vs) {
	case 0:
		return 0, nil
	case 1:
	default:
		return 0, fmt.Errorf("%w: %s given %d times", ErrInvalidExpires, contract.HeaderExpires, len(vs))
	}
	d, err := ParseDelay(vs[0])
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrInvalidExpires, contract.HeaderExpires, err)
	}
	d = d.Truncate(time.Millisecond)
	if d <= 0 {
		return 0, fmt.Errorf("%w: %s %s: must be at least 1ms (omit it for a message that never expires)", ErrInvalidExpires, contract.HeaderExpires, quote(vs[0]))
	}
	return d, nil
}
