package quotagate

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"
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
			cacheOpen(t, g, trips, s)

			peer := New(e.Rdb, Config{Prefix: e.Prefix, Tuning: Tuning{OpenCache: -1}})
			if _, err := peer.Pause(ctx, s, time.Minute); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the peer's pause reaches the cached gate", func() bool { return deferredPaused(g, s) })
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

// A seen scope's entry ages out after Tuning.OpenCache (for a gate that
// observes responses, which asks about every scope it has not seen), and
// a feed that fails forgets everything until it caught up again from a
// snapshot.
func TestOpenCacheAgeAndFeedLoss(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	g := newWith(rdb, Config{StoreTimeout: time.Second, Tuning: Tuning{OpenCache: time.Second, MaxHold: -1}}, hooks{now: clock})
	t.Cleanup(func() { g.Close() })
	g.observed.Store(true) // responses observed (no probe without MaxHold)
	ctx := context.Background()
	s := Scope{Provider: "ups"}
	k := scopeKeys(g.cfg.Prefix, s).Pause
	eventually(t, "the scope is remembered open", func() bool {
		g.admit(ctx, s, 1, false)
		return g.admitsUncached(k)
	})
	now.Add(int64(time.Second))
	if g.admitsUncached(k) {
		t.Fatal("an entry older than OpenCache is still trusted")
	}
	eventually(t, "a new round trip refreshes the entry", func() bool { // once the feed polled by the new time
		g.admit(ctx, s, 1, false)
		return g.admitsUncached(k)
	})

	mr.Close() // the feed's polls fail
	eventually(t, "the cache forgets everything when the feed fails", func() bool {
		return !g.open.Live() && !g.admitsUncached(k)
	})
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cache works again once the feed caught up", func() bool {
		g.admit(ctx, s, 1, false)
		return g.admitsUncached(k)
	})
}

// A pause whose announcement was lost (its process died between the
// script and the append) is announced again by the first refusal of a
// request a cached gate sent into it, so every cached gate stops within
// the feed's interval, not within Tuning.OpenCache.
func TestOpenCacheLostAnnouncementHealed(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			s := Scope{Provider: "ups", Account: "acct-1"}
			k := scopeKeys(e.Prefix, s)
			g1, trips1 := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			g2, trips2 := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			cacheOpen(t, g1, trips1, s)
			cacheOpen(t, g2, trips2, s)

			// The pause is in Redis, unannounced: both gates still admit.
			until := time.Now().Add(time.Minute).UnixMilli()
			if err := e.Rdb.Set(ctx, k.Pause, until, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if err := g2.admit(ctx, s, 1, false); err != nil {
				t.Fatalf("before any refusal: %v, want the cached admission", err)
			}

			if err := refusing(g1, time.Minute).ProcessTask(ctx, NewTask("poll", nil, s)); !errors.As(err, new(*Refusal)) {
				t.Fatalf("the cached admission's refusal: %v", err)
			}
			eventually(t, "the refusal's announcement reaches the other cached gate", func() bool { return deferredPaused(g2, s) })
		})
	}
}

// The admissions a cached gate let through before the feed brought the
// scope's pause are reported at once, so the limit the refusal taught
// counts them while the pause lasts (before the gate's next round trip,
// after it, would count them in the next cycle): the limit learned is the
// cycle's admissions of both gates less one.
func TestOpenCacheCountsReportedWithThePause(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			s := Scope{Provider: "ups", Account: "acct-1"}
			g1, trips1 := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			g2, trips2 := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			admitted := cacheOpen(t, g1, trips1, s) + cacheOpen(t, g2, trips2, s)
			for range 5 {
				if err := g2.admit(ctx, s, 1, false); err != nil {
					t.Fatal(err)
				}
				admitted++
			}
			if !e.Real() {
				e.Clock.Advance(time.Second) // the cycle began before the refusal: it teaches
			}
			if err := refusing(g1, 3*time.Second).ProcessTask(ctx, NewTask("poll", nil, s)); !errors.As(err, new(*Refusal)) {
				t.Fatalf("the refusal: %v", err)
			}
			admitted++ // the refused request
			eventually(t, "the other gate's admissions are counted in the limit learned", func() bool {
				p, err := g1.State(ctx, s)
				return err == nil && p.Learned.Rate == admitted-1
			})
			if n := g2.uncounted.Take(scopeKeys(e.Prefix, s).Pause).N; n != 0 {
				t.Fatalf("%d admissions still wait to be counted", n)
			}
		})
	}
}

// deferredPaused reports whether g defers a task of s for its pause.
func deferredPaused(g *Gate, s Scope) bool {
	var d *Deferral
	return errors.As(g.admit(context.Background(), s, 1, false), &d) && d.Reason == ReasonPaused
}

// cacheOpen admits tasks of s through g until one is admitted without a
// round trip, and returns how many were admitted.
func cacheOpen(t *testing.T, g *Gate, trips *atomic.Int64, s Scope) int {
	t.Helper()
	n := 0
	eventually(t, "an admission without a round trip", func() bool {
		before := trips.Load()
		if err := g.admit(context.Background(), s, 1, false); err != nil {
			t.Fatal(err)
		}
		n++
		return trips.Load() == before
	})
	return n
}

// refusing is g's Middleware around a handler whose provider refuses,
// hinting to wait hint.
func refusing(g *Gate, hint time.Duration) asynq.Handler {
	return g.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		return &Refusal{Hint: hint}
	}))
}

// admitsUncached reports whether g admits a task of the scope of pause
// key k without a round trip (local.OpenCache.Fresh, as Gate.admission
// asks it).
func (g *Gate) admitsUncached(k string) bool { return g.open.Fresh(k, !g.observed.Load()) }

// A gate that observes no responses admits a scope it never asked about
// without a round trip once its feed is live; a scope the feed's snapshot
// names (an entry named it: here a Resume) is asked about once by a gate
// that starts after, then admitted without a round trip; a gate that
// observes responses asks about every scope it has not seen. And a scope
// no script ever saw learns from its first refusal: the cycle begins at
// the gate's first uncounted admission. On miniredis, redis-server and
// the Cluster.
func TestOpenCacheUnseenScopes(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			g1, trips1 := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			cacheOpen(t, g1, trips1, Scope{Provider: "warm"}) // the feed live
			before := trips1.Load()
			for i := range 50 {
				if err := g1.admit(ctx, Scope{Provider: "ups", Account: fmt.Sprint("unseen-", i)}, 1, false); err != nil {
					t.Fatal(err)
				}
			}
			if n := trips1.Load() - before; n != 0 {
				t.Errorf("50 scopes never seen cost %d round trips, want 0", n)
			}

			named := Scope{Provider: "ups", Account: "named"}
			if err := g1.Resume(ctx, named); err != nil {
				t.Fatal(err)
			}
			g2, trips2 := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			cacheOpen(t, g2, trips2, Scope{Provider: "warm"})
			for i := range 3 { // a round trip (or two, a script loaded on a Cluster's node), then none
				before = trips2.Load()
				if err := g2.admit(ctx, named, 1, false); err != nil {
					t.Fatal(err)
				}
				if n := trips2.Load() - before; (n > 0) != (i == 0) {
					t.Errorf("a scope the snapshot names, admission %d: %d round trips", i, n)
				}
			}

			g3, trips3 := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			g3.observed.Store(true)
			g3.cfg.Tuning.MaxHold = -1 // no first contact's probe: the scope is open once seen
			cacheOpen(t, g3, trips3, Scope{Provider: "warm"})
			before = trips3.Load()
			if err := g3.admit(ctx, Scope{Provider: "ups", Account: "unseen-0"}, 1, false); err != nil {
				t.Fatal(err)
			}
			if trips3.Load() == before {
				t.Error("a gate that observes responses admitted a scope it never saw without a round trip")
			}

			learns := Scope{Provider: "ups", Account: "learns"}
			admitted := 0
			for range 5 {
				if err := g1.admit(ctx, learns, 1, false); err != nil {
					t.Fatal(err)
				}
				admitted++
			}
			time.Sleep(time.Millisecond) // the first admission is a while before the refusal
			if err := refusing(g1, 3*time.Second).ProcessTask(ctx, NewTask("poll", nil, learns)); !errors.As(err, new(*Refusal)) {
				t.Fatalf("the refusal: %v", err)
			}
			admitted++ // the refused request
			if p, err := g1.State(ctx, learns); err != nil || p.Learned.Rate != admitted-1 {
				t.Errorf("learned %+v (%v) from a first cycle no script saw, want a rate of %d", p.Learned, err, admitted-1)
			}
		})
	}
}

// A pause whose feed entry was lost with a failed master (its scope's own
// key intact, on another master) is announced again by a gate that
// remembers it, at its feed's next snapshot (which a master's change
// makes: Resync): a gate started meanwhile, which admitted the scope
// without a round trip, then defers it.
func TestFeedLostEntryAnnouncedAgain(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			s := Scope{Provider: "ups", Account: "acct-1"}
			k := scopeKeys(e.Prefix, s)
			a, _ := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			a.open.Begin()
			eventually(t, "the first gate's feed is live", a.open.Live)
			if _, err := a.Pause(ctx, s, time.Minute); err != nil {
				t.Fatal(err)
			}
			log, snap, asks := schema.FeedKeys(e.Prefix, schema.FeedGroup(k.Pause, feed.Groups(e.Rdb)))
			if err := e.Rdb.Del(ctx, log, snap, asks).Err(); err != nil { // the group's entries, lost
				t.Fatal(err)
			}
			c, _ := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			c.open.Begin()
			eventually(t, "the later gate's feed is live", c.open.Live)
			if !c.admitsUncached(k.Pause) {
				t.Fatal("the later gate asks about the scope: the feed still names it")
			}
			a.feed.Resync()
			eventually(t, "the pause announced again reaches the later gate", func() bool { return !c.admitsUncached(k.Pause) })
			if !deferredPaused(c, s) {
				t.Error("the later gate admits a task of the paused scope")
			}
		})
	}
}
