//go:build !failpoints

package clock

import "time"

// Local returns the bridge's local clock: time.Now in a build without the failpoints tag
// (getenv is not read). It never fails there.
func Local(getenv func(string) string) (func() time.Time, error) { return time.Now, nil }
