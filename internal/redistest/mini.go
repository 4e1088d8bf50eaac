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

// T0 is the fixed Redis clock the miniredis tests start at: a whole
// second, so ms and µs values computed from it are exact.
var T0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// Env is one Redis a test runs against.
type Env struct {
	Rdb    redis.UniversalClient
	Prefix string // a key prefix of the test's own
	Clock  *Mini  // the miniredis's clock; nil on a real redis-server
}

// Real reports whether e is a real redis-server (or Cluster).
func (e Env) Real() bool { return e.Clock == nil }

// Backend opens an Env for a (sub)test.
type Backend struct {
	Name string
	Open func(t *testing.T) Env
}

// Backends returns the Redis implementations a case runs on where they
// matter: miniredis (its clock at T0), a real redis-server and a
// 3-master Redis Cluster, each isolated by a fresh key prefix (skipped,
// or failed under QUOTAGATE_REQUIRE_REDIS, when redis-server or redis-cli
// is not installed). Run each as a subtest:
//
//	for _, b := range redistest.Backends() {
//		t.Run(b.Name, func(t *testing.T) { e := b.Open(t); ... })
//	}
func Backends() []Backend {
	return []Backend{
		{"miniredis", func(t *testing.T) Env {
			c, rdb := StartMini(t, T0)
			return Env{Rdb: rdb, Prefix: "qgtest", Clock: c}
		}},
		{"redis", func(t *testing.T) Env {
			srv := Start(t)
			return Env{Rdb: srv.Client(t), Prefix: srv.Prefix(t)}
		}},
		{"cluster", func(t *testing.T) Env {
			c := StartCluster(t)
			return Env{Rdb: c.Client(t), Prefix: c.Prefix(t)}
		}},
	}
}

// Eventually polls cond every 10 ms until it holds, and fails the test
// (naming what it waited for) when it has not after d.
func Eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	for end := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(end) {
			tb.Fatalf("gave up after %v waiting for %s", d, what)
		}
	}
}
