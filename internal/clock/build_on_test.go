//go:build failpoints

package clock

const failpointsBuild = true
