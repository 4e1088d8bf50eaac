package quotagate

import (
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// hooks are a test's worker clock and jitter randomness for a gate; nil
// fields keep the defaults of New.
type hooks struct {
	now  func() time.Time
	rand func() float64
}

// newWith is New with the test's hooks.
func newWith(rdb redis.UniversalClient, cfg Config, h hooks) *Gate {
	if h.now == nil {
		h.now = time.Now
	}
	if h.rand == nil {
		h.rand = rand.Float64
	}
	return newGate(rdb, cfg, h.now, h.rand)
}

// lims is the limits of a scope with the one limit l (none when l is zero).
func lims(l Limit) []Limit {
	if l.IsZero() {
		return nil
	}
	return []Limit{l}
}
