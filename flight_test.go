package quotagate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/quotagate/quotagate/internal/sim"
)

// TestLearnedConcurrencyEndToEnd: real asynq servers (on miniredis, a real
// redis-server and a Redis Cluster) with 12 workers and nothing
// configured poll, through the Transport, a provider that accepts 3
// requests in flight per credential and refuses beyond (internal/sim's
// concurrency limit, Retry-After: 1). The first refusals pause the scope
// and teach a learned window; the probation's probes beyond the window
// are answered, so the scope learns a concurrency limit (State shows it),
// and from then on the provider's refusals no longer pause it. Every task
// completes, and every lease is released.
//
// It does not run under the race detector: slowed several times over, the
// 120 tasks end before the probation's n + 1 probes come back within one
// learned window (docs/design.md, Known limits: a probation longer than
// the work), and the scope rightly has no verdict yet.
func TestLearnedConcurrencyEndToEnd(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector slows the work below the probation's length (docs/design.md, Known limits: a probation longer than the work)")
	}
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		const n, tasks = 3, 120
		provider := sim.NewServer(sim.Config{Quota: sim.Quota{Shape: sim.Concurrency, Rate: n}, Dialect: mustDialect(t, "retry-after"),
			Credentials: []string{"secret"}, Latency: 20 * time.Millisecond})
		hs := httptest.NewServer(provider)
		defer hs.Close()
		s := Scope{Provider: "acme", Account: "a"}
		g := e.gate(Config{StoreTimeout: 5 * time.Second})
		defer g.Close()
		gated := &http.Client{Transport: g.Transport(nil)}
		var mu sync.Mutex
		done := map[string]bool{}
		mux := asynq.NewServeMux()
		mux.Use(g.Middleware())
		mux.HandleFunc(mwTaskType, func(ctx context.Context, t *asynq.Task) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
			req.Header.Set("Authorization", "Bearer secret")
			resp, err := gated.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return &Refusal{Err: fmt.Errorf("provider answered %d", resp.StatusCode)}
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
			e.enqueue(NewTask(mwTaskType, []byte(strconv.Itoa(i)), s, asynq.MaxRetry(50)), asynq.Retention(time.Minute))
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
		p, err := g.State(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		if p.LearnedInFlight < 1 || p.LearnedInFlight > n {
			t.Errorf("State: learned %d in flight, want 1 to %d (the provider's %d); the gate logged:\n%s", p.LearnedInFlight, n, n, e.log.String())
		}
		c := provider.Counts()
		t.Logf("the provider got %d requests, refused %d; the scope learned %d in flight", c.Requests, c.Refused, p.LearnedInFlight)
		if c.Accepted < tasks {
			t.Errorf("the provider accepted %d requests for %d tasks", c.Accepted, tasks)
		}
		k := scopeKeys(e.b.prefix, s)
		e.waitFor("every lease released", func() bool {
			left, err := e.b.rdb.ZCard(context.Background(), k.FlightConc).Result()
			return err == nil && left == 0
		})
	})
}

// TestRefusedLevelCountsTheProcess: a refused task's level counts every
// task of its scope this process has in flight, those of a first contact
// that no script counted among them (admitted without a round trip), not
// only those the scope's records count. Ten tasks of a scope never seen
// hold in their handlers; an eleventh's response, through the Transport,
// says its provider advertises nothing; a twelfth, admitted in the slow
// start that then begins, is the first the records count in flight
// (level 1 by them), and is refused: the learned concurrency limit's
// probation begins, c at least 2, where level 1 alone would have said
// rate-limited, and a c one below a level of 2 would leave the scope one
// request at a time. On miniredis, redis-server and the Cluster.
func TestRefusedLevelCountsTheProcess(t *testing.T) {
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refused" {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer provider.Close()
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			g, trips := cachedGate(t, e.Rdb, e.Prefix, time.Now)
			cacheOpen(t, g, trips, Scope{Provider: "warm"})               // the feed live
			g.cfg.Tuning.MaxHold = Config{}.withDefaults().Tuning.MaxHold // a first contact's probe: its answer tells the provider silent
			s := Scope{Provider: "acme", Account: "level"}
			var entered sync.WaitGroup
			release := make(chan struct{})
			var client *http.Client // the Transport, made after the first contact: a gate that observes responses asks about every scope
			h := g.Middleware()(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
				path := string(task.Payload())
				if path == "" {
					entered.Done()
					<-release
					return nil
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, provider.URL+path, nil)
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return &Refusal{Err: fmt.Errorf("provider answered %d", resp.StatusCode)}
				}
				return nil
			}))
			before := trips.Load()
			var done sync.WaitGroup
			for range 10 {
				entered.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					if err := h.ProcessTask(ctx, NewTask("poll", nil, s)); err != nil {
						t.Error(err)
					}
				}()
			}
			entered.Wait()
			defer done.Wait()
			defer close(release)
			if n := trips.Load() - before; n != 0 {
				t.Fatalf("the first contact's ten admissions cost %d round trips, want none", n)
			}
			client = &http.Client{Transport: g.Transport(nil)}
			if err := h.ProcessTask(ctx, NewTask("poll", []byte("/silent"), s)); err != nil {
				t.Fatal(err)
			}
			if err := h.ProcessTask(ctx, NewTask("poll", []byte("/refused"), s)); !errors.As(err, new(*Refusal)) {
				t.Fatalf("the refusal: %v", err)
			}
			f, err := e.Rdb.HGetAll(ctx, scopeKeys(e.Prefix, s).Flight).Result()
			if err != nil {
				t.Fatal(err)
			}
			if c, _ := strconv.Atoi(f["limit"]); f["phase"] != "1" || c < 2 {
				t.Errorf("the learned concurrency limit after a refusal with ten in flight: %v, want its probation (phase 1) with c of at least 2", f)
			}
		})
	}
}
