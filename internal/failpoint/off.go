//go:build !failpoints

package failpoint

import "time"

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Inject does nothing in a build without the failpoints tag.
func Inject(string) {}

// Now is time.Now in a build without the failpoints tag. The bridge reads the local clock
// through it wherever it makes a scheduling decision.
func Now() time.Time { return time.Now() }

// ClaimAll is false in a build without the failpoints tag.
func ClaimAll() bool { return false }
