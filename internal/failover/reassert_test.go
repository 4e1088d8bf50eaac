package failover

import (
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"
	"github.com/quotagate/quotagate/internal/store"
)

// fixture is a Memory on a store of a miniredis whose clock is the
// memory's too.
type fixture struct {
	t     *testing.T
	c     *redistest.Mini
	st    *store.Store
	m     *Memory
	moved atomic.Int64 // pauses Moved heard of
}

func newFixture(t *testing.T) *fixture {
	c, rdb := redistest.StartMini(t, time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	f := &fixture{t: t, c: c, st: store.New(store.Config{Client: rdb, Prefix: "qg", Timeout: 250 * time.Millisecond, MaxPause: 12 * time.Hour})}
	f.m = New(Config{Store: f.st, Now: func() time.Time { return c.Now }, Slack: 250 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Moved: func(string) { f.moved.Add(1) }})
	t.Cleanup(f.m.Close)
	return f
}

// pause records an operator's 30 s pause of account as a gate does, and
// remembers it; it returns the scope's keys and the deadline (ms).
func (f *fixture) pause(account string) (schema.Keys, int64) {
	f.t.Helper()
	k := schema.ScopeKeys("qg", "ups", account)
	rec, err := f.st.Pause(f.t.Context(), k, 30*time.Second, store.Refusal{Operator: true})
	until, rem := rec.Until, rec.Remaining
	if err != nil {
		f.t.Fatal(err)
	}
	u := until.UnixMilli()
	f.m.Note(k.Pause, u, u-rem.Milliseconds(), f.c.Now, true)
	return k, u
}

// is checks that the pause of k in Redis is want.
func (f *fixture) is(k schema.Keys, want int64, what string) {
	f.t.Helper()
	if got, _ := f.c.MR.Get(k.Pause); got != strconv.FormatInt(want, 10) {
		f.t.Errorf("%s: the pause is %q, want %d", what, got, want)
	}
}

// open is an admission's answer that the scope is open, now.
func (f *fixture) open() Answer { return Reply(model.Admitted, f.c.Now.UnixMicro(), 0, f.c.Now) }

// TestReassertRecovered (miniredis): every remembered pause the store
// lost is back once the store recovers, without a gate and whether or not
// a task of its scope comes by.
func TestReassertRecovered(t *testing.T) {
	f := newFixture(t)
	k1, u1 := f.pause("a")
	k2, u2 := f.pause("b")
	f.c.MR.Del(k1.Pause)
	f.c.MR.Del(k2.Pause)
	f.m.Recovered()
	deadline := time.Now().Add(5 * time.Second)
	for f.m.Reasserted() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	f.is(k1, u1, "after the recovery")
	f.is(k2, u2, "after the recovery")
	if n := f.moved.Load(); n != 2 {
		t.Errorf("Moved heard %d pauses, want 2", n)
	}
}

// TestRecheck (miniredis): an answer that holds the scope until the
// remembered deadline changes nothing; one that finds it open re-asserts
// it (ask again); a resumed scope is not re-asserted, and is forgotten.
func TestRecheck(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	k1, u1 := f.pause("a")
	k2, _ := f.pause("b")
	if again, err := f.m.Recheck(ctx, k1.Pause, Reply(model.Paused, f.c.Now.UnixMicro(), 30*time.Second, f.c.Now)); again || err != nil {
		t.Errorf("the pause in force: Recheck = %v, %v; want false, nil", again, err)
	}
	f.c.MR.Del(k1.Pause)
	if again, err := f.m.Recheck(ctx, k1.Pause, f.open()); !again || err != nil {
		t.Errorf("the pause lost: Recheck = %v, %v; want true, nil", again, err)
	}
	f.is(k1, u1, "rechecked")

	if err := f.st.Resume(ctx, k2); err != nil {
		t.Fatal(err)
	}
	if again, err := f.m.Recheck(ctx, k2.Pause, f.open()); again || err != nil {
		t.Errorf("the scope resumed: Recheck = %v, %v; want false, nil", again, err)
	}
	if f.c.MR.Exists(k2.Pause) {
		t.Error("the resumed pause was re-asserted")
	}
	if _, ok := f.m.Get(k2.Pause, f.c.Now); ok {
		t.Error("the resumed pause is still remembered")
	}
	if n := f.m.Reasserted(); n != 1 || f.moved.Load() != 1 {
		t.Errorf("%d re-assertions moved a deadline (Moved heard %d), want 1", n, f.moved.Load())
	}
}
