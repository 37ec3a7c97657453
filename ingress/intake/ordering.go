package intake

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// ParseOrderingKey reads x-delay-ordering-key (name matched case-insensitively) from h:
// "" when absent; else its value, 1 to contract.MaxOrderingKey bytes as given. Repeated,
// empty, too long, not valid UTF-8, holding a control character (C0 with NUL, DEL, C1), or
// on a recurring message (recurring: the message has x-delay-every): an error wrapping
// [ErrInvalidOrderingKey]. The two byte rules go beyond the contract, as for x-delay-id:
// a key is shown in JSON (which replaces invalid UTF-8, so the key shown would not name
// the message in ?ordering_key=) and in logs, terminals and the console.
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
	case !utf8.ValidString(vs[0]):
		return "", fmt.Errorf("%w: %s %s is not valid UTF-8", ErrInvalidOrderingKey, contract.HeaderOrderingKey, quote(vs[0]))
	case strings.IndexFunc(vs[0], unicode.IsControl) >= 0:
		return "", fmt.Errorf("%w: %s %s contains a control character", ErrInvalidOrderingKey, contract.HeaderOrderingKey, quote(vs[0]))
	case recurring:
		return "", fmt.Errorf("%w: %s on a recurring message (%s): a recurring message has no order to keep",
			ErrInvalidOrderingKey, contract.HeaderOrderingKey, contract.HeaderEvery)
	}
	return vs[0], nil
}
