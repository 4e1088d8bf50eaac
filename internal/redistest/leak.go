package redistest

import "go.uber.org/goleak"

// NoLeaks returns a check for [Main]: after the tests have ended and the
// shared servers are stopped, no goroutine a test started may still run
// (go.uber.org/goleak; opts add goroutines to ignore). Goroutines that are
// ending are waited for a little: goleak retries before it reports.
func NoLeaks(opts ...goleak.Option) func() error {
	return func() error { return goleak.Find(opts...) }
}
