package quotagate

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"
)

// BenchmarkAdmit measures one admission (one round trip to a real
// redis-server) for an open scope, a scope with a limit, and a paused scope.
func BenchmarkAdmit(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	for _, bc := range []struct {
		name  string
		limit Limit
		pause bool
	}{
		{"open", Limit{}, false},
		{"limit", PerSecond(1_000_000_000, 1_000_000), false},
		{"paused", Limit{}, true},
		{"paused+limit", PerSecond(1000, 1), true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g := New(rdb, Config{Prefix: srv.Prefix(b), Limits: map[string][]Limit{"p": {bc.limit}}})
			s := Scope{Provider: "p", Account: "a"}
			ctx := context.Background()
			if bc.pause {
				if _, err := g.Pause(ctx, s, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			k, ls := scopeKeys(g.cfg.Prefix, s), g.limitsOf(s)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.store.Admit(ctx, k, admitRequest(ls, 1, time.Second)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAdmitPausedScopes shows that admission costs the same with 1 or
// 10,000 paused scopes in Redis.
func BenchmarkAdmitPausedScopes(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	for _, n := range []int{1, 10_000} {
		b.Run(fmt.Sprintf("scopes=%d", n), func(b *testing.B) {
			g := New(rdb, Config{Prefix: srv.Prefix(b)})
			ctx := context.Background()
			scopes := make([]schema.Keys, n)
			for i := range scopes {
				s := Scope{Provider: "p", Account: strconv.Itoa(i)}
				if _, err := g.Pause(ctx, s, time.Hour); err != nil {
					b.Fatal(err)
				}
				scopes[i] = scopeKeys(g.cfg.Prefix, s)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := g.store.Admit(ctx, scopes[i%n], admitRequest(lims(Limit{}), 1, 0)); err != nil {
					b.Fatal(err)
				}
				i += 7919
			}
		})
	}
}

// BenchmarkServerThroughput runs the same no-op tasks through a real asynq
// server on a real redis-server without the Middleware, with it, and with it
// but Tuning.OpenCache disabled (one round trip per task), alternating in one
// run, and reports the throughput ratios to bare asynq (issue 30: at least
// 0.95), each the ratio of the modes' medians over rounds. Each round runs
// the three modes in an order rotated from the round before, so that none
// always runs first on a machine still warming or last on one busy with
// the previous mode's cleanup; a run is long enough (tasks no-op tasks, a
// second or more) that the workers' start is a small part of it.
func BenchmarkServerThroughput(b *testing.B) {
	srv := redistest.Start(b)
	const tasks, rounds = 10_000, 5
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	cached := New(rdb, Config{Prefix: srv.Prefix(b)})
	defer cached.Close()
	uncached := New(rdb, Config{Prefix: srv.Prefix(b), Tuning: Tuning{OpenCache: -1}})
	run := func(g *Gate) time.Duration {
		q := fmt.Sprintf("bench%d", time.Now().UnixNano())
		opt := asynq.RedisClientOpt{Addr: srv.Addr}
		client := asynq.NewClient(opt)
		defer client.Close()
		insp := asynq.NewInspector(opt)
		defer insp.Close()
		for i := range tasks {
			t := NewTask("noop", nil, Scope{Provider: "p", Account: strconv.Itoa(i % 8)})
			if _, err := client.Enqueue(t, asynq.Queue(q)); err != nil {
				b.Fatal(err)
			}
		}
		if err := insp.PauseQueue(q); err != nil {
			b.Fatal(err)
		}
		var done atomic.Int64
		finished := make(chan struct{})
		mux := asynq.NewServeMux()
		cfg := asynq.Config{
			Concurrency: 20, Queues: map[string]int{q: 1}, LogLevel: asynq.FatalLevel,
			TaskCheckInterval: 10 * time.Millisecond,
		}
		if g != nil {
			mux.Use(g.Middleware())
			cfg.IsFailure, cfg.RetryDelayFunc = IsFailure, g.RetryDelay(nil)
		}
		mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
			if done.Add(1) == tasks {
				close(finished)
			}
			return nil
		})
		s := asynq.NewServer(opt, cfg)
		if err := s.Start(mux); err != nil {
			b.Fatal(err)
		}
		defer s.Shutdown()
		time.Sleep(100 * time.Millisecond) // let the workers start polling
		start := time.Now()
		if err := insp.UnpauseQueue(q); err != nil {
			b.Fatal(err)
		}
		<-finished
		elapsed := time.Since(start)
		insp.DeleteQueue(q, true)
		return elapsed
	}
	var bare, gated, roundTrip []time.Duration
	for b.Loop() {
		for r := range rounds {
			for k := range 3 {
				switch (r + k) % 3 {
				case 0:
					bare = append(bare, run(nil))
				case 1:
					gated = append(gated, run(cached))
				default:
					roundTrip = append(roundTrip, run(uncached))
				}
			}
		}
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	mb, mg, mr := med(bare), med(gated), med(roundTrip)
	b.ReportMetric(float64(tasks)/mb.Seconds(), "bare-tasks/s")
	b.ReportMetric(mb.Seconds()/mg.Seconds(), "gated/bare")
	b.ReportMetric(mb.Seconds()/mr.Seconds(), "gated-nocache/bare")
}
