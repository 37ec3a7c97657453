//go:build !failpoints

package clock

const failpointsBuild = false
