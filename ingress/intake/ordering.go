package intake

import (
	"fmt"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// ParseOrderingKey reads x-delay-ordering-key (name matched case-insensitively) from h:
// "" when absent; else its value, 1 to contract.MaxOrderingKey bytes as given. Repeated,
// empty, too long, or on a recurring message (recurring: the message has x-delay-every):
// an error wrapping [ErrInvalidOrderingKey].
func ParseOrderingKey(h headers.List, recurring bool) (string, error) {
	vs := h.Values(contract.HeaderOrderingKey)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", fmt.Errorf("%w: %s given %d times", ErrInvalidOrderingKey, contract.HeaderOrderingKey, len(vs))
	case vs[0] == "":
		return "", fmt.Errorf("%w: %s is empty", ErrInvalidOrderingKey, contract.HeaderOrderingKey)
	case len(vs[0]) > contract.MaxOrderingKey:
		return "", fmt.Errorf("%w: %s of %d bytes (at most %d)", ErrInvalidOrderingKey, contract.HeaderOrderingKey,
			len(vs[0]), contract.MaxOrderingKey)
	case recurring:
		return "", fmt.Errorf("%w: %s on a recurring message (%s): a recurring message has no order to keep",
			ErrInvalidOrderingKey, contract.HeaderOrderingKey, contract.HeaderEvery)
	}
	return vs[0], nil
}
