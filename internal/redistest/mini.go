package redistest

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Mini is a miniredis whose Redis TIME (SetTime) and key TTLs
// (FastForward) move together, as time does on a real server: the fast
// Redis of the unit tests, on a fixed clock.
type Mini struct {
	MR  *miniredis.Miniredis
	Now time.Time // Redis TIME
}

// StartMini starts a miniredis with its clock at t0 and a client for it;
// both end with the test.
func StartMini(t testing.TB, t0 time.Time) (*Mini, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(t0)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return &Mini{MR: mr, Now: t0}, rdb
}

// Advance moves Redis TIME and every TTL forward by d.
func (m *Mini) Advance(d time.Duration) {
	m.Now = m.Now.Add(d)
	m.MR.SetTime(m.Now)
	m.MR.FastForward(d)
}
