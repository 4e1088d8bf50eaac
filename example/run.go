package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/tracking"
)

// A mode is one way of running the same workload.
type mode struct {
	Name  string
	Gate  bool // quotagate Middleware + RetryDelay + IsFailure
	Limit bool // Config.Limits set at the carrier's real quota
}

// modes run in this order, each on fresh state.
var modes = []mode{
	// local is the pattern of asynq's wiki: the handler returns an error
	// carrying the hint, IsFailure says it is not a failure, and the
	// RetryDelayFunc delays that task only. Nothing is shared.
	{Name: "local"},
	// gate shares the refusal: the first 429 pauses the credential for all
	// workers, which defer (or briefly hold) instead of sending.
	{Name: "gate", Gate: true},
	// gate+limit also spends the known budget proactively (GCRA), so the
	// carrier is rarely refused at all.
	{Name: "gate+limit", Gate: true, Limit: true},
}

// The two carriers of the demo: acme enforces the quota, swift has none
// (its polls show that acme's pauses stay with acme).
const (
	constrained = "acme"
	free        = "swift"
	// The credentials live only in the carriers and the resolver; tasks
	// carry their fingerprints.
	acmeCredential  = "acme-demo-secret-key-never-logged"
	swiftCredential = "swift-demo-secret-key-never-logged"
)

// freeShare is the part of the polls that go to the free carrier, in percent.
const freeShare = 15

// poll is one tracking number of the workload.
type poll struct {
	Carrier string
	Number  string
}

// workload returns n polls, freeShare% of them at the free carrier, with
// numbers and order drawn from seed.
func workload(n int, seed uint64) []poll {
	rng := rand.New(rand.NewPCG(seed, 0x51ca7e))
	seen := map[string]bool{}
	polls := make([]poll, 0, n)
	for i := range n {
		c, prefix := constrained, "AC"
		if i < n*freeShare/100 {
			c, prefix = free, "SW"
		}
		for {
			num := fmt.Sprintf("%s%010d", prefix, rng.Uint64N(1e10))
			if !seen[num] {
				seen[num] = true
				polls = append(polls, poll{c, num})
				break
			}
		}
	}
	rng.Shuffle(len(polls), func(i, j int) { polls[i], polls[j] = polls[j], polls[i] })
	return polls
}

// env is what the modes share: one Redis and how each mode names its keys.
type env struct {
	opt    asynq.RedisConnOpt
	rdb    redis.UniversalClient
	names  func(m mode) (queue, prefix string) // distinct per mode: fresh state
	keep   bool                                // keep each mode's queue afterwards (for -ui)
	remove bool                                // delete each mode's queue afterwards (real Redis)
	onGate func(mode, *quotagate.Gate)         // -ui: show each mode's gate (ui.go); nil: nothing
}

// settings are the flags a run depends on.
type settings struct {
	quota   quotaSpec
	polls   int
	workers int
	seed    uint64
	latency time.Duration
	timeout time.Duration // per mode
	hold    time.Duration // quotagate Config.MaxHold (0: its default)
	holders int           // quotagate Config.MaxHolders (0: its default)
}

// runMode runs the workload in mode m on fresh state and returns its figures.
func runMode(ctx context.Context, e env, m mode, s settings, polls []poll, prog *progress) (figures, error) {
	queue, prefix := e.names(m)
	r := &run{mode: m, s: s, total: len(polls)}

	// Fresh carriers: fresh quota and counters.
	acme := newCarrier(constrained, &s.quota, s.latency, acmeCredential)
	defer acme.Close()
	swift := newCarrier(free, nil, s.latency, swiftCredential)
	defer swift.Close()

	// Enqueue everything first; the clock starts with the server.
	client := asynq.NewClient(e.opt)
	defer client.Close()
	carriers := map[string]tracking.Carrier{
		constrained: tracking.NewCarrier(constrained, acmeCredential),
		free:        tracking.NewCarrier(free, swiftCredential),
	}
	for _, p := range polls {
		if _, err := tracking.Enqueue(ctx, client, carriers[p.Carrier], p.Number, asynq.Queue(queue)); err != nil {
			return figures{}, err
		}
	}

	transport := &http.Transport{MaxIdleConnsPerHost: 2 * s.workers}
	defer transport.CloseIdleConnections()
	srv, mux := r.server(e, queue, prefix, newResolver(r, transport, acme, swift))
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		return figures{}, fmt.Errorf("start asynq server: %w", err)
	}
	err := r.wait(ctx, start, acme, swift, prog)
	srv.Shutdown()
	if e.remove && !e.keep {
		removeQueue(e, queue)
	}

	f := r.figures(start, acme, swift)
	prog.finish(f)
	return f, err
}

// server returns the mode's asynq server and handler chain: the bookkeeping
// middleware, then the gate (gate modes), then the tracking handler.
func (r *run) server(e env, queue, prefix string, res tracking.ClientResolver) (*asynq.Server, *asynq.ServeMux) {
	cfg := asynq.Config{
		Concurrency: r.s.workers,
		Queues:      map[string]int{queue: 1},
		// Retry times are whole seconds, and the forwarder moves due
		// retries to the queue every DelayedTaskCheckInterval: the default
		// 5 s would add up to 5 s to every 1-second pause. 100 ms keeps
		// the added delay small for one cheap Redis call per tick.
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		// How often an idle worker pool looks for new tasks (default 1 s).
		TaskCheckInterval: 50 * time.Millisecond,
		ErrorHandler:      asynq.ErrorHandlerFunc(r.onError),
		ShutdownTimeout:   3 * time.Second,
		LogLevel:          asynq.ErrorLevel, // asynq's own trouble only, on stderr
	}
	mux := asynq.NewServeMux()
	mux.Use(r.instrument)
	if r.mode.Gate {
		gcfg := quotagate.Config{
			Prefix: prefix,
			Logger: slog.New(slog.DiscardHandler),
			Rand:   lockedRand(r.s.seed),

			MaxHold:    r.s.hold,
			MaxHolders: r.s.holders,
		}
		if r.mode.Limit {
			gcfg.Limits = map[string]quotagate.Limit{constrained: r.s.quota.limit()}
		}
		g := quotagate.New(e.rdb, gcfg)
		defer g.Close()
		if e.onGate != nil {
			e.onGate(r.mode, g)
		}
		mux.Use(g.Middleware())
		cfg.IsFailure = quotagate.IsFailure
		cfg.RetryDelayFunc = g.RetryDelay(nil)
	} else {
		cfg.IsFailure = localIsFailure
		cfg.RetryDelayFunc = localRetryDelay
	}
	mux.Handle(tracking.TypePoll, &tracking.Handler{Resolver: res, Report: r.report})
	return asynq.NewServer(e.opt, cfg), mux
}

// newResolver returns the resolver of the two carriers' credentials. Their
// HTTP client stamps each request with when its task entered the chain.
func newResolver(r *run, transport http.RoundTripper, acme, swift *carrier) *resolver {
	hc := &http.Client{Transport: stampTransport{transport}, Timeout: 30 * time.Second}
	return &resolver{run: r, clients: map[string]tracking.CarrierClient{
		constrained + "/" + quotagate.Fingerprint(acmeCredential): &tracking.HTTPClient{BaseURL: acme.URL(), Credential: acmeCredential, HTTP: hc},
		free + "/" + quotagate.Fingerprint(swiftCredential):       &tracking.HTTPClient{BaseURL: swift.URL(), Credential: swiftCredential, HTTP: hc},
	}}
}

// removeQueue deletes what asynq kept of a queue of this run in a shared
// Redis: its tasks (Inspector.DeleteQueue) and its counters, which
// DeleteQueue leaves behind. Only keys under the queue's own name, which is
// unique to the run, are touched: never a flush.
func removeQueue(e env, queue string) {
	insp := asynq.NewInspector(e.opt)
	insp.DeleteQueue(queue, true)
	insp.Close()
	ctx := context.Background()
	iter := e.rdb.Scan(ctx, 0, "asynq:{"+queue+"}:*", 100).Iterator()
	for iter.Next(ctx) {
		e.rdb.Del(ctx, iter.Val())
	}
}

// wait returns when every poll completed or was archived, at the timeout,
// or when ctx ends, updating the progress line meanwhile.
func (r *run) wait(ctx context.Context, start time.Time, acme, swift *carrier, prog *progress) error {
	timeout := time.NewTimer(r.s.timeout)
	defer timeout.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		a, s := acme.snapshot(), swift.snapshot()
		done := int(r.done.Load())
		prog.update(r.mode.Name, done, r.total, a.Requests+s.Requests, a.Refused+s.Refused, time.Since(start))
		if done+int(r.archived.Load()) >= r.total {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return fmt.Errorf("mode %s: %d of %d polls done after %v", r.mode.Name, done, r.total, r.s.timeout)
		case <-tick.C:
		}
	}
}

// lockedRand returns a seeded source of uniform values in [0, 1) that is
// safe for the concurrent calls the gate makes from every worker.
func lockedRand(seed uint64) func() float64 {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 0x9a7e))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64()
	}
}

// localIsFailure is the wiki pattern's IsFailure: a rate-limit refusal is
// not a failure, so it never spends a retry.
func localIsFailure(err error) bool {
	var ref *quotagate.Refusal
	return !errors.As(err, &ref)
}

// localRetryDelay is the wiki pattern's RetryDelayFunc: retry the refused
// task itself after the provider's hint; other errors back off as usual.
func localRetryDelay(n int, err error, t *asynq.Task) time.Duration {
	var ref *quotagate.Refusal
	if errors.As(err, &ref) && ref.Hint > 0 {
		return ref.Hint
	}
	return asynq.DefaultRetryDelayFunc(n, err, t)
}

// limit is the gate's Limit at the carrier's real quota: a fixed window of N
// per W is N per W with burst 1 (never more than N in any window W), a
// token bucket is its rate per second with its burst.
func (q quotaSpec) limit() quotagate.Limit {
	if q.Model == "bucket" {
		return quotagate.PerSecond(q.Rate, q.Burst)
	}
	return quotagate.Limit{Rate: q.Rate, Period: q.Window, Burst: 1}
}
