package quotagate

import (
	"context"
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
