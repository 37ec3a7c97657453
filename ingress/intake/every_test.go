package intake

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/schedule"
)

// TestEveryErrorReadsOnce: a refused x-delay-every says "invalid" once, with its value
// and why ("invalid_every: invalid every \"sometimes\": want a Go duration ..."), not
// "invalid_every: invalid every: x-delay-every: invalid schedule ...", and still wraps
// both sentinels.
func TestEveryErrorReadsOnce(t *testing.T) {
	for value, start := range map[string]string{
		"sometimes":               `invalid_every: invalid every "sometimes": want a Go duration`,
		"CRON_TZ=Local 0 9 * * *": `invalid_every: invalid every "CRON_TZ=Local 0 9 * * *": CRON_TZ=Local is the zone of the machine`,
	} {
		_, err := ParseEvery(headers.List{{Key: "x-delay-every", Value: value}}, 24*time.Hour, time.Now())
		text := ErrorText(err)
		if !errors.Is(err, ErrInvalidEvery) || !errors.Is(err, schedule.ErrInvalid) {
			t.Fatalf("%v wraps neither ErrInvalidEvery nor schedule.ErrInvalid", err)
		}
		if !strings.HasPrefix(text, start) || strings.Count(text, "invalid") != 2 {
			t.Fatalf("error text %q", text)
		}
	}
}
