package model

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestMain shares one real redis-server (and one Redis Cluster) among the
// tests of the package, each started lazily by the first redistest.Start
// (StartCluster) and stopped at the end.
func TestMain(m *testing.M) { redistest.Main(m, redistest.NoLeaks()) }

// t0 is the fixed Redis clock of the miniredis tests: a whole second, so
// ms and µs values computed from it are exact.
var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// miniClock is a miniredis on a fixed clock (redistest.Mini).
type miniClock = redistest.Mini

// newMini starts a miniredis with its clock at t0 and a client for it.
func newMini(t testing.TB) (*miniClock, *redis.Client) { return redistest.StartMini(t, t0) }

// classes are the classes of work, for tests that draw one.
var classes = []Class{Background, Interactive}

// env is one Redis a test runs against.
type env struct {
	rdb    redis.UniversalClient
	prefix string
	clock  *miniClock // nil on a real redis-server
}

func (e env) real() bool { return e.clock == nil }

// backend opens an env for a (sub)test.
type backend struct {
	name string
	open func(t *testing.T) env
}

// backends returns the Redis implementations a case runs on: miniredis
// (fixed clock at t0), a real redis-server and a 3-master Redis Cluster
// (each isolated by a fresh key prefix; skipped, or failed under
// QUOTAGATE_REQUIRE_REDIS, when redis-server or redis-cli is not
// installed).
func backends(t *testing.T) []backend {
	t.Helper()
	return []backend{
		{"miniredis", func(t *testing.T) env {
			c, rdb := newMini(t)
			return env{rdb: rdb, prefix: "qgtest", clock: c}
		}},
		{"redis", func(t *testing.T) env {
			srv := redistest.Start(t)
			return env{rdb: srv.Client(t), prefix: srv.Prefix(t)}
		}},
		{"cluster", func(t *testing.T) env {
			c := redistest.StartCluster(t)
			return env{rdb: c.Client(t), prefix: c.Prefix(t)}
		}},
	}
}
