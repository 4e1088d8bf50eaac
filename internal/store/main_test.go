package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"
)

// TestMain shares one real redis-server (and one Redis Cluster) among the
// tests of the package, each started lazily by the first redistest.Start
// (StartCluster) and stopped at the end; then no goroutine may be left.
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

// backends are the Redis implementations a case runs on (redistest.Backends).
func backends(*testing.T) []backend { return redistest.Backends() }

// realRedis returns a client of the shared real redis-server and a fresh
// key prefix.
func realRedis(t *testing.T) (*redistest.Server, *redis.Client, string) {
	t.Helper()
	srv := redistest.Start(t)
	return srv, srv.Client(t), srv.Prefix(t)
}

// testStore is a store with a generous timeout: these tests are about
// what Redis answers, not how fast (see TestStoreTimeout for the bound).
func testStore(rdb redis.UniversalClient, prefix string) *Store {
	return New(Config{Client: rdb, Prefix: prefix, Timeout: 30 * time.Second, MaxPause: 12 * time.Hour})
}

// scopeKeys are the keys of the scope of provider (and account, if any)
// under prefix.
func scopeKeys(prefix, provider string, account ...string) schema.Keys {
	a := ""
	if len(account) > 0 {
		a = account[0]
	}
	return schema.ScopeKeys(prefix, provider, a)
}

// The limits of the tests, as quotagate's constructors (PerSecond,
// PerMinute, FixedWindow) give them to the model.
func perSecond(rate, burst int) model.LimitSpec {
	return model.Spec(schema.GCRA, rate, time.Second, burst)
}
func perMinute(rate, burst int) model.LimitSpec {
	return model.Spec(schema.GCRA, rate, time.Minute, burst)
}
func fixedWindow(rate int, period time.Duration) model.LimitSpec {
	return model.Spec(schema.Fixed, rate, period, 1)
}

// admitRequest is an admission of cost under the limits ls, reserving a
// slot up to hold ahead, as the gate asks it (the peers of a learned
// window's probe wait a hold and asynq's one-second tick).
func admitRequest(cost int, hold time.Duration, ls ...model.LimitSpec) AdmitRequest {
	return AdmitRequest{Limits: ls, Cost: cost, Hold: hold, Answer: hold + time.Second}
}

// state reads what the gate knows of a scope whose configured limits are
// ls: a dry admission, as interactive work sees the scope (the whole of
// its capacity, no reserve left for another class).
func state(ctx context.Context, st *Store, k schema.Keys, ls ...model.LimitSpec) (Admission, error) {
	r := admitRequest(1, 0, ls...)
	r.Dry, r.Class = true, model.Interactive
	return st.Admit(ctx, k, r)
}

// The instants of an admission's answer as times: its wait, the deadline
// in force (zero when none) and its Redis TIME.
func waitOf(a Admission) time.Duration { return time.Duration(a.Wait) * time.Microsecond }
func nowOf(a Admission) time.Time      { return time.UnixMicro(a.Now) }
func untilOf(a Admission) time.Time {
	if a.Until == 0 {
		return time.Time{}
	}
	return time.UnixMilli(a.Until)
}

// exactPause records a pause of exactly the length asked: an operator's
// (Gate.Pause), which teaches nothing. A hintless refusal's pause is its
// episode's (internal/model/fallback.go), a second the first time.
var exactPause = Refusal{Operator: true}

// eventually fails the test when cond does not hold within d
// (redistest.Eventually).
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, d, what, cond)
}
