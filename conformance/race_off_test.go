//go:build !race

package conformance

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = false
