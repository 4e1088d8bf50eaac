package quotagate

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// eventually fails the test when cond does not hold within 10 s
// (redistest.Eventually).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, what, cond)
}

// cachedGate returns a gate whose open-cache entries never age out (so only
// the feed's entries can end them) and a counter of its Redis round trips.
func cachedGate(t *testing.T, rdb redis.UniversalClient, prefix string, now func() time.Time) (*Gate, *atomic.Int64) {
	trips := new(roundTrips)
	c := newClientLike(t, rdb)
	c.AddHook(trips)
	g := newWith(c, Config{Prefix: prefix, Tuning: Tuning{OpenCache: time.Hour, MaxHold: -1}}, hooks{now: now})
	t.Cleanup(func() { g.Close() })
	return g, &trips.Int64
}

// A scope seen open is admitted without a round trip; a pause recorded by a
// peer (another gate, another process) ends that as soon as the feed
// brings it, on miniredis and on a real redis-server.
func TestOpenCachePeerPauseIsAnnounced(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			s := Scope{Provider: "ups", Account: "acct-1"}
			g, trips := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			eventually(t, "an admission without a round trip", func() bool {
				before := trips.Load()
				if err := g.admit(ctx, s, 1, false); err != nil {
					t.Fatal(err)
				}
				return trips.Load() == before
			})

			peer := New(e.Rdb, Config{Prefix: e.Prefix, Tuning: Tuning{OpenCache: -1}})
			if _, err := peer.Pause(ctx, s, time.Minute); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the peer's pause reaches the cached gate", func() bool {
				var d *Deferral
				return errors.As(g.admit(ctx, s, 1, false), &d) && d.Reason == ReasonPaused
			})
		})
	}
}

// The gate that records a pause stops admitting from its cache at once, and a
// scope with a limit is never admitted from the cache.
func TestOpenCacheOwnPauseAndLimits(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	g, trips := cachedGate(t, rdb, srv.Prefix(t), time.Now)
	s := Scope{Provider: "ups"}
	eventually(t, "an admission without a round trip", func() bool {
		before := trips.Load()
		g.admit(ctx, s, 1, false)
		return trips.Load() == before
	})
	if _, err := g.Pause(ctx, s, time.Minute); err != nil {
		t.Fatal(err)
	}
	var d *Deferral
	if err := g.admit(ctx, s, 1, false); !errors.As(err, &d) {
		t.Fatalf("right after its own Pause: %v, want a deferral", err)
	}

	g.cfg.Limits = map[string][]Limit{"fedex": {PerSecond(1000, 1000)}}
	f := Scope{Provider: "fedex"}
	for range 20 {
		before := trips.Load()
		if err := g.admit(ctx, f, 1, false); err != nil {
			t.Fatal(err)
		}
		if trips.Load() != before+1 {
			t.Fatal("a scope with a limit was admitted without a round trip")
		}
	}
}

// Entries age out after Tuning.OpenCache, and a feed that fails forgets
// everything until it caught up again from a snapshot.
func TestOpenCacheAgeAndFeedLoss(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	g := newWith(rdb, Config{StoreTimeout: time.Second, Tuning: Tuning{OpenCache: time.Second}}, hooks{now: clock})
	t.Cleanup(func() { g.Close() })
	ctx := context.Background()
	s := Scope{Provider: "ups"}
	k := scopeKeys(g.cfg.Prefix, s).Pause
	eventually(t, "the scope is remembered open", func() bool {
		g.admit(ctx, s, 1, false)
		return g.open.Fresh(k)
	})
	now.Add(int64(time.Second))
	if g.open.Fresh(k) {
		t.Fatal("an entry older than OpenCache is still trusted")
	}
	eventually(t, "a new round trip refreshes the entry", func() bool { // once the feed polled by the new time
		g.admit(ctx, s, 1, false)
		return g.open.Fresh(k)
	})

	mr.Close() // the feed's polls fail
	eventually(t, "the cache forgets everything when the feed fails", func() bool {
		return !g.open.Live() && !g.open.Fresh(k)
	})
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cache works again once the feed caught up", func() bool {
		g.admit(ctx, s, 1, false)
		return g.open.Fresh(k)
	})
}
