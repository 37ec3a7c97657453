package egress

import (
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// FuzzDeadline: due + x-delay-expires never wraps: the deadline is the exact sum, or
// math.MaxInt64 (never expires) when the sum does not fit; never before the due time, so a
// message is never dead-lettered as expired before it was due + expires. Seeds: the int64
// limits and the largest expiry the grammar takes.
func FuzzDeadline(f *testing.F) {
	for _, s := range [][2]int64{{0, 1}, {1795273445000, int64(time.Hour)}, {math.MaxInt64, math.MaxInt64},
		{math.MaxInt64 - 1000, int64(time.Second)}, {1795273445000, math.MaxInt64}, {0, int64(time.Millisecond)}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, due, expiresNs int64) {
		if due < 0 || expiresNs < int64(time.Millisecond) {
			return // stored dues are >= 0; x-delay-expires is at least 1 ms
		}
		c := delaystore.Claimed{Due: due, Envelope: delaystore.Envelope{Expires: time.Duration(expiresNs)}}
		dl, ok := deadline(c)
		exact := new(big.Int).Add(big.NewInt(due), big.NewInt(c.Envelope.Expires.Milliseconds()))
		if !ok || dl < due || (exact.IsInt64() && dl != exact.Int64()) || (!exact.IsInt64() && dl != math.MaxInt64) {
			t.Fatalf("deadline(due %d, expires %s) = %d, %v; want %s", due, c.Envelope.Expires, dl, ok, exact)
		}
		if expiredAt(c, due) != nil {
			t.Fatalf("expired at its own due time (expires %s)", c.Envelope.Expires)
		}
	})
}
