package quotagate

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// TestFailClosedTrustsNoCacheWhileStoreFails: on a SIGSTOPped redis-server,
// a fail-closed gate admits nothing from its open cache, whether it learns
// of the failure from a failed call (of another scope) or only from the
// silence (no answer within StoreTimeout, the proof of life's lifetime);
// once Redis answers again the cache works again. A fail-open gate keeps
// admitting from its cache. The gates' clock is injected: the cache's
// entries never age out on their own (OpenCache is an hour).
func TestFailClosedTrustsNoCacheWhileStoreFails(t *testing.T) {
	srv := redistest.StartPrivate(t)
	prefix := srv.Prefix(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	newGate := func(failClosed bool) *Gate {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		g := newWith(rdb, Config{Prefix: prefix, Tuning: Tuning{OpenCache: time.Hour, MaxHold: -1}, FailClosed: failClosed,
			StoreTimeout: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, hooks{now: clock})
		t.Cleanup(func() { g.Close() })
		return g
	}
	closed, open := newGate(true), newGate(false)
	ctx := context.Background()
	cached, other := Scope{Provider: "ups"}, Scope{Provider: "fedex"}
	warm := func(g *Gate) {
		t.Helper()
		eventually(t, "the scope is cached open", func() bool {
			if err := g.admit(ctx, cached, 1, false); err != nil {
				t.Fatalf("admit on a live Redis: %v", err)
			}
			return g.admitsUncached(scopeKeys(prefix, cached).Pause)
		})
	}
	storeDown := func(what string, err error) {
		t.Helper()
		var d *Deferral
		if !errors.As(err, &d) || d.Reason != ReasonStoreDown {
			t.Errorf("%s: %v, want a deferral because the store is down", what, err)
		}
	}

	// A failed call tells: the cached scope is not admitted on trust.
	warm(closed)
	warm(open)
	closed.open.Ask(scopeKeys(prefix, other).Pause) // a scope an entry named: it asks Redis
	srv.Suspend(t)
	storeDown("fail closed, another scope while Redis hangs", closed.admit(ctx, other, 1, false))
	storeDown("fail closed, the cached scope after a failed call", closed.admit(ctx, cached, 1, false))
	if err := open.admit(ctx, cached, 1, false); err != nil {
		t.Errorf("fail open, the cached scope while Redis hangs: %v, want admitted", err)
	}
	srv.Resume(t)
	warm(closed)

	// Silence tells: no answer within StoreTimeout, no trust, even though
	// no call has failed yet.
	srv.Suspend(t)
	now.Add(int64(closed.cfg.StoreTimeout))
	if closed.admitsUncached(scopeKeys(prefix, cached).Pause) {
		t.Error("fail closed: the cache is trusted a StoreTimeout after Redis last answered")
	}
	storeDown("fail closed, the cached scope after a silence", closed.admit(ctx, cached, 1, false))
	if err := open.admit(ctx, cached, 1, false); err != nil {
		t.Errorf("fail open, the cached scope after a silence: %v, want admitted", err)
	}
	srv.Resume(t)
	warm(closed)
}
