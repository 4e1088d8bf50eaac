package quotagate

// The gate on a 3-master Redis Cluster. Most of the suite already runs on
// the cluster through the backend harnesses (backends in main_test.go,
// mwOnBackends in middleware_test.go: the store, the pause, malformed
// records, the open cache, and the article's timeline on asynq servers
// using RedisClusterClientOpt). The tests here add what only a cluster has:
// scopes on different masters, and announcements published on one node and
// heard through a subscription on another.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

// newClientLike returns a new client of the same Redis as rdb (one server
// or a cluster), closed by t.Cleanup; adjust, if any, sets its pool size.
func newClientLike(t testing.TB, rdb redis.UniversalClient, poolSize ...int) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	switch r := rdb.(type) {
	case *redis.Client:
		o := *r.Options()
		o.PoolSize = append(poolSize, o.PoolSize)[0]
		c = redis.NewClient(&redis.Options{Addr: o.Addr, PoolSize: o.PoolSize})
	case *redis.ClusterClient:
		o := r.Options()
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: o.Addrs, PoolSize: append(poolSize, o.PoolSize)[0]})
	default:
		t.Fatalf("newClientLike: a %T", rdb)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// scanKeys returns the keys matching pattern, on every master of a cluster.
func scanKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	scan := func(ctx context.Context, c redis.Cmdable) ([]string, error) {
		var keys []string
		iter := c.Scan(ctx, 0, pattern, 100).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return keys, iter.Err()
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb)
	}
	keys := make(chan []string, redistest.ClusterMasters)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		k, err := scan(ctx, c)
		keys <- k
		return err
	})
	close(keys)
	var all []string
	for k := range keys {
		all = append(all, k...)
	}
	return all, err
}

// scopesOnEveryMaster returns one scope of provider per master of the
// cluster, by where its pause key lands, and the masters' addresses.
func scopesOnEveryMaster(t *testing.T, rdb *redis.ClusterClient, prefix, provider string) ([]Scope, []string) {
	t.Helper()
	byMaster := map[string]Scope{}
	var masters []string
	for i := 0; len(byMaster) < redistest.ClusterMasters; i++ {
		if i == 1000 {
			t.Fatalf("1000 scopes landed on %d masters only", len(byMaster))
		}
		s := Scope{Provider: provider, Account: "acct-" + strconv.Itoa(i)}
		m, err := rdb.MasterForKey(context.Background(), scopeKeys(prefix, s).Pause)
		if err != nil {
			t.Fatal(err)
		}
		if addr := m.Options().Addr; byMaster[addr] == (Scope{}) {
			byMaster[addr] = s
			masters = append(masters, addr)
		}
	}
	scopes := make([]Scope, len(masters))
	for i, m := range masters {
		scopes[i] = byMaster[m]
	}
	return scopes, masters
}

// TestClusterStoreAcrossMasters: Pause, State, Remaining and Resume on
// scopes whose keys live on different masters, each with its own deadline,
// and the monotonic max under concurrency on every master.
func TestClusterStoreAcrossMasters(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	prefix := c.Prefix(t)
	ctx := context.Background()
	scopes, masters := scopesOnEveryMaster(t, rdb, prefix, "ups")
	g := New(rdb, Config{Prefix: prefix})

	pauses := make([]Pause, len(scopes))
	for i, s := range scopes {
		d := time.Duration(10*(i+1)) * time.Second
		p, err := g.Pause(ctx, s, d)
		if err != nil || p.Remaining <= 0 || p.Remaining > d {
			t.Fatalf("Pause(%v, %v) on %s = %v, %v", s, d, masters[i], p, err)
		}
		checkExpireAt(t, rdb, scopeKeys(prefix, s).Pause, p.Until)
		pauses[i] = p
	}
	for i, s := range scopes {
		st, err := g.State(ctx, s)
		if err != nil || !st.Until.Equal(pauses[i].Until) || st.Remaining <= 0 || st.Remaining > pauses[i].Remaining {
			t.Errorf("State(%v) on %s = %v, %v; want until %v", s, masters[i], st, err, pauses[i].Until)
		}
		if p, err := g.Pause(ctx, s, time.Second); err != nil || !p.Until.Equal(pauses[i].Until) {
			t.Errorf("a shorter Pause of %v = %v, %v; want the deadline %v kept", s, p, err, pauses[i].Until)
		}
	}
	if err := g.Resume(ctx, scopes[0]); err != nil {
		t.Fatal(err)
	}
	for i, s := range scopes {
		rem, err := g.Remaining(ctx, s)
		if open := i == 0; err != nil || open != (rem == 0) {
			t.Errorf("after resuming %v only: Remaining(%v) on %s = %v, %v", scopes[0], s, masters[i], rem, err)
		}
	}

	gates := make([]*Gate, 32)
	for i := range gates {
		gates[i] = New(newClientLike(t, rdb, 1), Config{Prefix: prefix, StoreTimeout: time.Minute})
	}
	for _, s := range scopes {
		pauseRace(t, gates, prefix, Scope{Provider: "race", Account: s.Account})
	}
}

// TestClusterLimit: a limit's budget is shared by the gates of two
// processes on every master: the burst is admitted once in all, the next
// task is deferred as limited.
func TestClusterLimit(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	prefix := c.Prefix(t)
	scopes, masters := scopesOnEveryMaster(t, c.Client(t), prefix, "ups")
	cfg := Config{Prefix: prefix, Tuning: Tuning{MaxHold: -1}, Limits: map[string][]Limit{"ups": {PerSecond(1, 3)}}}
	a, b := New(c.Client(t), cfg), New(c.Client(t), cfg)
	ctx := context.Background()
	for i, s := range scopes {
		for j, g := range []*Gate{a, b, a} {
			if err := g.admit(ctx, s, 1, false); err != nil {
				t.Fatalf("%v on %s: admission %d of the burst of 3: %v", s, masters[i], j+1, err)
			}
		}
		var d *Deferral
		if err := b.admit(ctx, s, 1, false); !errors.As(err, &d) || d.Reason != ReasonLimited || d.Delay <= 0 || d.Delay > time.Second {
			t.Errorf("%v on %s: the 4th admission = %v, want a deferral as limited within 1s", s, masters[i], err)
		}
	}
}

// TestClusterAnnouncementsAcrossNodes: a pause recorded through one gate
// reaches the open cache of another gate, whichever master holds the scope:
// the pause script runs on the scope's master, its entry goes to the log
// of the scope's feed group on that group's master, and every gate reads
// every group's log, one pipelined round trip per master.
func TestClusterAnnouncementsAcrossNodes(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	prefix := c.Prefix(t)
	ctx := context.Background()
	scopes, masters := scopesOnEveryMaster(t, rdb, prefix, "ups")
	listener, trips := cachedGate(t, rdb, prefix, time.Now)
	recorder := New(c.Client(t), Config{Prefix: prefix, Tuning: Tuning{OpenCache: -1}})
	for i, s := range scopes {
		eventually(t, fmt.Sprintf("%v admitted without a round trip", s), func() bool {
			before := trips.Load()
			if err := listener.admit(ctx, s, 1, false); err != nil {
				t.Fatal(err)
			}
			return trips.Load() == before
		})
		if _, err := recorder.Pause(ctx, s, time.Minute); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		eventually(t, fmt.Sprintf("the pause of %v (on %s) reaches the other gate", s, masters[i]), func() bool {
			var d *Deferral
			return errors.As(listener.admit(ctx, s, 1, false), &d) && d.Reason == ReasonPaused
		})
		t.Logf("pause on %s seen through the feed after %v", masters[i], time.Since(start).Round(time.Millisecond))
	}
}

// TestClusterTransport: the transport records a refusal on the scope's
// master, and another process's transport sends nothing while it lasts.
func TestClusterTransport(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	prefix := c.Prefix(t)
	scopes, masters := scopesOnEveryMaster(t, c.Client(t), prefix, "ups")
	cfg := Config{Prefix: prefix, Tuning: Tuning{MaxHold: -1}}
	a, b := New(c.Client(t), cfg), New(c.Client(t), cfg)
	t.Cleanup(func() { a.Close(); b.Close() })
	p := newProvider(t, http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}}, "")
	ca, cb := &http.Client{Transport: a.Transport(nil)}, &http.Client{Transport: b.Transport(nil)}
	for i, s := range scopes {
		hits := p.hits.Load()
		resp, err := get(t, ca, WithScope(context.Background(), s), p.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		rem, err := b.Remaining(context.Background(), s)
		if err != nil || rem <= 6*time.Second || rem > 7*time.Second {
			t.Errorf("%v on %s: Remaining = %v, %v; want the Retry-After of 7s", s, masters[i], rem, err)
		}
		_, err = get(t, cb, WithScope(context.Background(), s), p.srv.URL)
		var d *Deferral
		if !errors.As(err, &d) || d.Reason != ReasonPaused || d.Scope != s {
			t.Errorf("%v on %s: the other process's request: %v, want a deferral", s, masters[i], err)
		}
		if n := p.hits.Load() - hits; n != 1 {
			t.Errorf("%v on %s: the provider saw %d requests, want 1", s, masters[i], n)
		}
	}
}

// TestClusterPauses: Gate.Pauses lists the pauses of every master (SCAN
// on each), decoded back to their scopes, an account with ':' '{' '}' '%'
// included.
func TestClusterPauses(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	prefix := c.Prefix(t)
	ctx := context.Background()
	scopes, masters := scopesOnEveryMaster(t, rdb, prefix, "ups")
	scopes = append(scopes, Scope{Provider: "acme", Account: "team:{eu}%1"})
	g := New(rdb, Config{Prefix: prefix})
	for _, s := range scopes {
		if _, err := g.Pause(ctx, s, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	listed, err := g.Pauses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[Scope]bool{}
	for _, p := range listed {
		if p.Remaining <= 0 || p.Until.IsZero() {
			t.Errorf("listed %v with no time left", p)
		}
		got[p.Scope] = true
	}
	for _, s := range scopes {
		if !got[s] {
			t.Errorf("Pauses on %d masters (%v) misses %v; listed %v", len(masters), masters, s, listed)
		}
	}
	if len(listed) != len(scopes) {
		t.Errorf("listed %d pauses, want %d", len(listed), len(scopes))
	}
}
