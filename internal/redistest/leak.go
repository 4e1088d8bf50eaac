package redistest

import (
	"time"

	"go.uber.org/goleak"
)

// leakPatience is how long NoLeaks waits for goroutines that are ending.
const leakPatience = 3 * time.Second

// NoLeaks returns a check for [Main]: after the tests have ended and the
// shared servers are stopped, no goroutine a test started may still run
// (go.uber.org/goleak; opts add goroutines to ignore). Goroutines that are
// ending are waited for up to leakPatience: a go-redis pool whose server
// was killed for good (a failed-over master) re-dials it once a second
// until the pool is closed, so its last probe ends up to a second after
// the client's Close, longer than goleak's own retries wait.
func NoLeaks(opts ...goleak.Option) func() error {
	return func() error {
		end := time.Now().Add(leakPatience)
		for {
			err := goleak.Find(opts...)
			if err == nil || time.Now().After(end) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
