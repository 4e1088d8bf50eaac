//go:build !race

package quotagate

// raceDetector reports whether the tests run under the race detector,
// which slows every worker several times over.
const raceDetector = false
