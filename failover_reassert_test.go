package quotagate

// The bounded promise, for real: a pause is lost on purpose (its master's
// replica no longer receives writes when the refusals are recorded, then
// the master is killed and that replica promoted), and the gates that knew
// it must re-assert it before any request of its scope reaches the
// provider. Two fleets of two gates each run side by side through the same
// failover, each on a prefix of its own: one as shipped, one with the
// memory disabled (the gate as it was before re-assertion), against one
// fake provider that counts the requests it receives while it refuses.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

const (
	lossScopes  = 4                // lost pauses per fleet
	lossHint    = 15 * time.Second // the provider's window: longer than the failover and the load after it
	lossWorkers = 4                // per gate
	lossAfter   = 3 * time.Second  // the load goes on this long after the promotion
)

// lossTarget is a replicated Redis whose replica can be cut off.
type lossTarget struct {
	prefix   func(t *testing.T) string
	client   func(t *testing.T) redis.UniversalClient
	masterOf func(t *testing.T, s Scope) string
	// replica returns the replica of master, and a client that reads it.
	replica func(t *testing.T, master string) (*redistest.Server, *redis.Client)
	// node returns a client of the node at addr alone.
	node func(t *testing.T, addr string) *redis.Client
	kill func(t *testing.T, master string) string
}

func clusterLossTarget(t *testing.T) lossTarget {
	c := redistest.StartReplicatedCluster(t)
	probe := c.Client(t)
	return lossTarget{
		prefix: func(t *testing.T) string { return c.Prefix(t) },
		client: func(t *testing.T) redis.UniversalClient { return c.Client(t) },
		masterOf: func(t *testing.T, s Scope) string {
			m, err := probe.MasterForKey(context.Background(), scopeKeys("x", s).Pause)
			if err != nil {
				t.Fatal(err)
			}
			return m.Options().Addr
		},
		replica: func(t *testing.T, master string) (*redistest.Server, *redis.Client) {
			r := c.ReplicaOf(t, master)
			return c.Node(t, r), c.NodeClient(t, r, true)
		},
		node: func(t *testing.T, addr string) *redis.Client { return c.NodeClient(t, addr, false) },
		kill: func(t *testing.T, m string) string { return c.KillMaster(t, m) },
	}
}

func sentinelLossTarget(t *testing.T) lossTarget {
	s := redistest.StartSentinel(t)
	return lossTarget{
		prefix:   func(t *testing.T) string { return s.Prefix(t) },
		client:   func(t *testing.T) redis.UniversalClient { return s.Client(t) },
		masterOf: func(t *testing.T, _ Scope) string { return s.Master(t) },
		replica: func(t *testing.T, _ string) (*redistest.Server, *redis.Client) {
			r := s.Replica(t)
			return s.Node(t, r), s.NodeClient(t, r)
		},
		node: func(t *testing.T, addr string) *redis.Client { return s.NodeClient(t, addr) },
		kill: func(t *testing.T, _ string) string { return s.KillMaster(t) },
	}
}

func TestFailoverLostPauseCluster(t *testing.T) {
	t.Parallel()
	runLostPause(t, clusterLossTarget(t))
}

func TestFailoverLostPauseSentinel(t *testing.T) {
	t.Parallel()
	runLostPause(t, sentinelLossTarget(t))
}

// lossProvider refuses each scope from its first request for lossHint, and
// counts the requests it receives while it refuses.
type lossProvider struct {
	mu     sync.Mutex
	closed map[string]time.Time   // path → until when it refuses
	into   map[string][]time.Time // path's fleet → when it received each request while refusing
}

func (p *lossProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	p.mu.Lock()
	until, ok := p.closed[r.URL.Path]
	switch {
	case !ok && r.URL.Query().Get("refuse") == "1":
		until = now.Add(lossHint)
		p.closed[r.URL.Path] = until
	case ok && now.Before(until):
		fleet := strings.Split(r.URL.Path, "/")[1]
		p.into[fleet] = append(p.into[fleet], now)
	default:
		p.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	}
	p.mu.Unlock()
	w.Header().Set("Retry-After", strconv.Itoa(int(until.Sub(now)/time.Second)+1))
	w.WriteHeader(http.StatusTooManyRequests)
}

// lossFleet is two gates on one prefix, and the scopes whose pauses it
// loses.
type lossFleet struct {
	name   string
	memory bool // remembers pauses (as shipped)
	load   bool // its workers request its scopes through the failover
	prefix string
	gates  [2]*Gate
	http   [2]*http.Client
	scopes []Scope
}

func runLostPause(t *testing.T, target lossTarget) {
	ctx := context.Background()
	provider := &lossProvider{closed: map[string]time.Time{}, into: map[string][]time.Time{}}
	srv := httptest.NewServer(provider)
	defer srv.Close()

	// reassert: as shipped, under load; idle: as shipped, with no task of
	// its scopes (only the re-assertion of everything brings its pauses
	// back); none: no memory, under load.
	fleets := []*lossFleet{{name: "reassert", memory: true, load: true}, {name: "idle", memory: true}, {name: "none", load: true}}
	victim := ""
	for _, f := range fleets {
		f.prefix = target.prefix(t)
		for i := range f.gates {
			g := New(target.client(t), Config{Prefix: f.prefix, StoreTimeout: foStoreTimeout, Tuning: Tuning{MaxHold: -1}})
			if !f.memory {
				g.mem = nil // as before re-assertion: nothing remembered
			}
			t.Cleanup(func() { g.Close() })
			f.gates[i], f.http[i] = g, &http.Client{Transport: g.Transport(nil)}
		}
		for i := 0; len(f.scopes) < lossScopes; i++ {
			s := Scope{Provider: "lost", Account: f.name + strconv.Itoa(i)}
			if victim == "" {
				victim = target.masterOf(t, s)
			}
			if target.masterOf(t, s) == victim {
				f.scopes = append(f.scopes, s)
			}
			if i == 2000 {
				t.Fatalf("no %d scopes on %s", lossScopes, victim)
			}
		}
	}
	get := func(f *lossFleet, gate int, s Scope, refuse bool) (*http.Response, error) {
		url := srv.URL + "/" + f.name + "/" + s.Account
		if refuse {
			url += "?refuse=1"
		}
		req, _ := http.NewRequestWithContext(WithScope(ctx, s), http.MethodGet, url, nil)
		resp, err := f.http[gate].Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}

	// Every gate subscribed to the announcements (its first admission
	// starts the subscription).
	for _, f := range fleets {
		for i, g := range f.gates {
			if _, err := get(f, i, Scope{Provider: "warm", Account: f.name}, false); err != nil {
				t.Fatal(err)
			}
			eventuallyWithin(t, foWait, "the gate's feed is live", g.open.Live)
		}
	}

	// The victim's replica misses every write from now on; then the
	// provider refuses each scope once, through gate 0.
	replica, readReplica := target.replica(t, victim)
	replica.CutReplication(t, victim)
	recorded := map[string]int64{} // pause key → deadline, ms
	for _, f := range fleets {
		for _, s := range f.scopes {
			resp, err := get(f, 0, s, true)
			if err != nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("the refusal of %v: %v, %v", s, resp, err)
			}
			st, err := f.gates[0].State(ctx, s)
			if err != nil || st.Until.IsZero() {
				t.Fatalf("State(%v) after the refusal = %v, %v; want paused", s, st, err)
			}
			recorded[scopeKeys(f.prefix, s).Pause] = st.Until.UnixMilli()
		}
	}
	// Gate 1 of the fleets that remember heard every pause announced.
	for _, f := range fleets[:2] {
		eventuallyWithin(t, foWait, "gate 1 heard the pauses announced", func() bool {
			for _, s := range f.scopes {
				if e, ok := f.gates[1].mem.Get(scopeKeys(f.prefix, s).Pause, time.Now()); !ok || e.UntilMs != recorded[scopeKeys(f.prefix, s).Pause] {
					return false
				}
			}
			return true
		})
	}
	lost := 0
	for key := range recorded {
		if n, err := readReplica.Exists(ctx, key).Result(); err != nil {
			t.Fatal(err)
		} else if n == 0 {
			lost++
		}
	}
	if lost != len(recorded) {
		t.Fatalf("%d of %d pauses absent on the cut replica, want all: the test loses nothing", lost, len(recorded))
	}

	// The load: workers of every gate request every scope, through the
	// failover and lossAfter past it; a deferred request is tried again
	// 20 ms later (a queue of many tasks).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent, deferred, failed atomic.Int64
	for _, f := range fleets {
		if !f.load {
			continue
		}
		for gi := range f.gates {
			for w := range lossWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						_, err := get(f, gi, f.scopes[i%len(f.scopes)], false)
						var d *Deferral
						switch {
						case errors.As(err, &d):
							deferred.Add(1)
							time.Sleep(20 * time.Millisecond)
						case err != nil:
							failed.Add(1)
							time.Sleep(20 * time.Millisecond)
						default:
							sent.Add(1)
						}
					}
				}()
			}
		}
	}

	downAt := time.Now()
	newMaster := target.kill(t, victim)
	promotedAt := time.Now()
	// How long each fleet's pauses are missing on the new master.
	nm := target.node(t, newMaster)
	back := map[string]time.Duration{}
	for end := promotedAt.Add(lossAfter); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		for key := range recorded {
			if _, ok := back[key]; ok {
				continue
			}
			if v, err := nm.Get(ctx, key).Int64(); err == nil && v > 0 {
				back[key] = time.Since(promotedAt)
			}
		}
	}
	close(stop)
	wg.Wait()

	provider.mu.Lock()
	into := provider.into
	provider.mu.Unlock()
	t.Logf("killed %s, promoted %s %v later; load: %d requests sent, %d deferred, %d failed",
		victim, newMaster, promotedAt.Sub(downAt).Round(time.Millisecond), sent.Load(), deferred.Load(), failed.Load())
	for _, f := range fleets {
		var worst time.Duration
		missing := 0
		for _, s := range f.scopes {
			key := scopeKeys(f.prefix, s).Pause
			d, ok := back[key]
			if !ok {
				missing++
				continue
			}
			worst = max(worst, d)
			if f.memory {
				v, err := nm.Get(ctx, key).Int64()
				if err != nil || v < recorded[key] {
					t.Errorf("fleet %s: %s on the new master = %d, %v; want at least the recorded %d", f.name, key, v, err, recorded[key])
				}
			}
		}
		during, after := 0, 0
		for _, at := range into[f.name] {
			if at.Before(promotedAt) {
				during++
			} else {
				after++
			}
		}
		t.Logf("fleet %s: %d of %d pauses lost; back on the new master at most %v after the promotion (%d not back within %v); requests into a closed window: %d during the failover, %d after the promotion",
			f.name, lossScopes, lossScopes, worst.Round(time.Millisecond), missing, lossAfter, during, after)
		if f.memory {
			if len(into[f.name]) != 0 {
				t.Errorf("fleet %s: %d requests reached the provider while it refused: the lost pauses were not re-asserted before requests were sent", f.name, len(into[f.name]))
			}
			if missing != 0 {
				t.Errorf("fleet %s: %d of the lost pauses not back on the new master %v after the promotion", f.name, missing, lossAfter)
			}
		}
	}
	if len(into["none"]) == 0 {
		t.Error("without re-assertion no request went into a closed window: the pauses were not lost, the test tests nothing")
	}
}
