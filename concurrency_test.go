package quotagate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/quotagate/quotagate/internal/sim"
)

// TestConcurrentEndToEnd: real asynq servers (over miniredis, a
// redis-server and a Redis Cluster) with 12 workers poll a provider that
// accepts 3 requests in flight per credential and refuses beyond
// (internal/sim's concurrency limit, Retry-After: 1), configured as
// Concurrent(3). The handlers take every path a lease is released on: a
// request through the Transport (released when its response arrives),
// through a client of their own (released when the handler returns), an
// error after the request, and a panic. The provider refuses nothing (it
// never sees more than 3 in flight), every task completes, and no lease
// is left.
func TestConcurrentEndToEnd(t *testing.T) {
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		const n, tasks = 3, 40
		provider := sim.NewServer(sim.Config{Quota: sim.Quota{Shape: sim.Concurrency, Rate: n}, Dialect: mustDialect(t, "retry-after"),
			Credentials: []string{"secret"}, Latency: 20 * time.Millisecond})
		hs := httptest.NewServer(provider)
		defer hs.Close()
		s := Scope{Provider: "acme", Account: "a"}
		l := Concurrent(n)
		// A store call cut by StoreTimeout fails open: its task runs
		// unchecked, one more in flight. 5 s: a loaded machine's stalls
		// never cut one.
		g := e.gate(Config{Limits: map[string][]Limit{"acme": {l}}, StoreTimeout: 5 * time.Second})
		defer g.Close()
		gated := &http.Client{Transport: g.Transport(nil)}
		var inside, most atomic.Int64
		send := func(ctx context.Context, c *http.Client) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
			req.Header.Set("Authorization", "Bearer secret")
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("provider answered %d", resp.StatusCode)
			}
			return nil
		}
		var mu sync.Mutex
		done := map[string]bool{}
		var failedOnce sync.Map
		mux := asynq.NewServeMux()
		mux.Use(g.Middleware())
		mux.HandleFunc(mwTaskType, func(ctx context.Context, t *asynq.Task) error {
			in := inside.Add(1)
			defer inside.Add(-1)
			for m := most.Load(); in > m && !most.CompareAndSwap(m, in); m = most.Load() {
			}
			i, _ := strconv.Atoi(string(t.Payload()))
			c := gated
			if i%4 == 1 || i%4 == 3 {
				c = http.DefaultClient // its lease is the task's, released when it returns
			}
			if err := send(ctx, c); err != nil {
				return err
			}
			if _, again := failedOnce.LoadOrStore(i, true); !again {
				switch i % 8 {
				case 2:
					return errors.New("the handler fails after its request")
				case 3:
					panic("the handler panics after its request")
				}
			}
			mu.Lock()
			done[string(t.Payload())] = true
			mu.Unlock()
			return nil
		})
		srv := asynq.NewServer(e.b.asynqOpt(), asynq.Config{
			Concurrency:              12,
			Queues:                   map[string]int{e.queue: 1},
			IsFailure:                IsFailure,
			RetryDelayFunc:           g.RetryDelay(func(int, error, *asynq.Task) time.Duration { return 100 * time.Millisecond }),
			DelayedTaskCheckInterval: 100 * time.Millisecond,
			TaskCheckInterval:        20 * time.Millisecond,
			ShutdownTimeout:          3 * time.Second,
			LogLevel:                 asynq.FatalLevel,
		})
		for i := range tasks {
			e.enqueue(NewTask(mwTaskType, []byte(strconv.Itoa(i)), s), asynq.Retention(time.Minute))
		}
		if err := srv.Start(mux); err != nil {
			t.Fatalf("asynq server: %v", err)
		}
		defer srv.Shutdown()
		e.waitFor("every task done", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(done) == tasks
		})
		c := provider.Counts()
		if c.Refused > 0 {
			t.Errorf("the provider refused %d of %d requests: more than %d were in flight; the gate logged:\n%s", c.Refused, c.Requests, n, e.log.String())
		}
		if c.Accepted < tasks {
			t.Errorf("the provider accepted %d requests for %d tasks", c.Accepted, tasks)
		}
		if most.Load() < 2 {
			t.Errorf("at most %d handler ran at once: the limit let nothing run together", most.Load())
		}
		k := scopeKeys(e.b.prefix, s)
		e.waitFor("every lease released", func() bool {
			left, err := e.b.rdb.ZCard(context.Background(), limitKey(k, 0, l)).Result()
			return err == nil && left == 0
		})
	})
}

// mustDialect is the internal/sim dialect name.
func mustDialect(t *testing.T, name string) sim.Dialect {
	d, ok := sim.DialectNamed(name)
	if !ok {
		t.Fatalf("no dialect %q", name)
	}
	return d
}

// TestConcurrentState: a concurrency limit with every slot taken defers a
// task (holding disabled) as in flight, State and Pauses show the scope
// waiting for that reason, a release lets the next task in, and Resume
// drops every lease.
func TestConcurrentState(t *testing.T) {
	c, rdb := newMini(t)
	ctx := context.Background()
	s := Scope{Provider: "acme", Account: "a"}
	l := Concurrent(2)
	g := newWith(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"acme": {l}}, Tuning: Tuning{MaxHold: -1}},
		hooks{now: func() time.Time { return c.Now }})
	defer g.Close()
	k := scopeKeys("qgtest", s)
	var grants []grant
	for i := range 2 {
		gr, err := g.admission(ctx, s, k, 1, false, Background, false)
		if err != nil || gr.lease == "" {
			t.Fatalf("admission %d: %+v, %v; want admitted with a lease", i, gr, err)
		}
		grants = append(grants, gr)
	}
	_, err := g.admission(ctx, s, k, 1, false, Background, false)
	var d *Deferral
	if !errors.As(err, &d) || d.Reason != ReasonInFlight {
		t.Fatalf("a third with both slots taken: %v, want a deferral in flight", err)
	}
	st, err := g.State(ctx, s)
	if err != nil || st.Reason != ReasonInFlight || st.Until.IsZero() {
		t.Fatalf("State = %+v, %v; want waiting in flight", st, err)
	}
	ps, err := g.Pauses(ctx)
	if err != nil || len(ps) != 1 || ps[0].Scope != s || ps[0].Reason != ReasonInFlight {
		t.Fatalf("Pauses = %+v, %v; want the scope, in flight", ps, err)
	}
	g.release(ctx, s, k, grants[0], true)
	gr, err := g.admission(ctx, s, k, 1, false, Background, false)
	if err != nil || gr.lease == "" {
		t.Fatalf("after a release: %+v, %v; want admitted", gr, err)
	}
	if !c.MR.Exists(limitKey(k, 0, l)) {
		t.Fatal("no leases in Redis")
	}
	if err := g.Resume(ctx, s); err != nil {
		t.Fatal(err)
	}
	if c.MR.Exists(limitKey(k, 0, l)) {
		t.Fatal("Resume left the leases")
	}
	for i := range 2 {
		if _, err := g.admission(ctx, s, k, 1, false, Background, false); err != nil {
			t.Fatalf("after Resume, admission %d: %v", i, err)
		}
	}
	// A lease never released comes back a lease's life later.
	c.Advance(DefaultLease)
	if _, err := g.admission(ctx, s, k, 1, false, Background, false); err != nil {
		t.Fatalf("a lease's life later: %v, want admitted", err)
	}
}

// TestConcurrentPanics: Concurrent refuses a limit of no request in
// flight, with a message that says why.
func TestConcurrentPanics(t *testing.T) {
	for _, n := range []int{0, -3} {
		func() {
			defer func() {
				if r, _ := recover().(string); r == "" {
					t.Errorf("Concurrent(%d) did not panic", n)
				}
			}()
			Concurrent(n)
		}()
	}
	if got := Concurrent(5).String(); got != "5 in flight" {
		t.Errorf("String = %q", got)
	}
}
