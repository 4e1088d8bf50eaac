package quotagate

import (
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestMain shares one real redis-server (and one Redis Cluster) among the
// tests of the package; each is started lazily by the first redistest.Start
// (StartCluster) and stopped at the end, then no goroutine may be left.
func TestMain(m *testing.M) { redistest.Main(m, redistest.NoLeaks()) }

// t0 is the fixed Redis clock of the miniredis tests (redistest.T0).
var t0 = redistest.T0

// miniClock is a miniredis on a fixed clock (redistest.Mini).
type miniClock = redistest.Mini

// newMini starts a miniredis with its clock at t0 and a client for it.
func newMini(t testing.TB) (*miniClock, *redis.Client) { return redistest.StartMini(t, t0) }

// env is one Redis a test runs against (redistest.Env), backend opens one.
type (
	env     = redistest.Env
	backend = redistest.Backend
)

// backends returns the Redis implementations a case runs on where they
// matter (redistest.Backends): miniredis, a real redis-server and a
// 3-master Redis Cluster. Run each as a subtest:
//
//	for _, b := range backends(t) {
//		t.Run(b.Name, func(t *testing.T) { e := b.Open(t); ... })
//	}
func backends(*testing.T) []backend { return redistest.Backends() }

// realRedis returns a client of the shared real redis-server and a fresh
// key prefix.
func realRedis(t *testing.T) (*redistest.Server, *redis.Client, string) {
	t.Helper()
	srv := redistest.Start(t)
	return srv, srv.Client(t), srv.Prefix(t)
}

// hangingRedis is redistest.Hanging: a client of a server that never
// answers, and the release of its calls.
func hangingRedis(t *testing.T, opts ...func(*redis.Options)) (*redis.Client, func()) {
	return redistest.Hanging(t, opts...)
}

// hangingStore is hangingRedis for a test that only needs a store that
// never answers.
func hangingStore(t *testing.T) *redis.Client {
	rdb, _ := redistest.Hanging(t)
	return rdb
}

// refusingRedis is redistest.Refusing: a client of a port nobody listens
// on.
func refusingRedis(t *testing.T) *redis.Client { return redistest.Refusing(t) }

// checkExpireAt is redistest.CheckExpireAt: key expires at until, within
// 1 ms.
func checkExpireAt(t *testing.T, rdb redis.UniversalClient, key string, until time.Time) {
	t.Helper()
	redistest.CheckExpireAt(t, rdb, key, until)
}

// testLogBuffer is a concurrency-safe log sink for Config.Logger.
type testLogBuffer struct{ redistest.Buffer }

func (b *testLogBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
