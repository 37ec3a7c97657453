//go:build failpoints

package clock

import "time"

// Local returns the bridge's local clock: in a failpoints build, time.Now shifted by the
// OffsetEnv value getenv returns; a malformed value is an error.
func Local(getenv func(string) string) (func() time.Time, error) {
	d, err := ParseOffset(getenv(OffsetEnv))
	if err != nil {
		return nil, err
	}
	return Shifted(d), nil
}
