package model

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestMain shares one real redis-server (and one Redis Cluster) among the
// tests of the package, each started lazily by the first redistest.Start
// (StartCluster) and stopped at the end.
func TestMain(m *testing.M) { redistest.Main(m, redistest.NoLeaks()) }

// t0 is the fixed Redis clock of the miniredis tests (redistest.T0).
var t0 = redistest.T0

// miniClock is a miniredis on a fixed clock (redistest.Mini).
type miniClock = redistest.Mini

// newMini starts a miniredis with its clock at t0 and a client for it.
func newMini(t testing.TB) (*miniClock, *redis.Client) { return redistest.StartMini(t, t0) }

// classes are the classes of work, for tests that draw one.
var classes = []Class{Background, Interactive}

// env is one Redis a test runs against (redistest.Env), backend opens one.
type (
	env     = redistest.Env
	backend = redistest.Backend
)

// backends are the Redis implementations a case runs on (redistest.Backends).
func backends(*testing.T) []backend { return redistest.Backends() }
