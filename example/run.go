package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/sim"
	"github.com/quotagate/quotagate/tracking"
)

// A mode is one way of running the same workload.
type mode struct {
	Name  string
	Gate  bool // quotagate Middleware + RetryDelay + IsFailure
	Limit bool // Config.Limits set at the carrier's real quota
	Pause bool // the plain shared pause (pause.go) instead of the gate
}

// modes run in this order, each on fresh state.
var modes = []mode{
	// local is the pattern of asynq's wiki: the handler returns an error
	// carrying the hint, IsFailure says it is not a failure, and the
	// RetryDelayFunc delays that task only. Nothing is shared.
	{Name: "local"},
	// pause is the reference article's algorithm alone (pause.go): a
	// shared deadline in Redis, checked before the handler; nothing
	// learned or observed. The floor quotagate must never fall below.
	{Name: "pause", Pause: true},
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

// poll is one tracking number of the workload.
type poll struct {
	Carrier string
	Number  string
}

// workload returns n polls, freePct percent of them at the free carrier,
// with numbers and order drawn from seed.
func workload(n, freePct int, seed uint64) []poll {
	rng := rand.New(rand.NewPCG(seed, 0x51ca7e))
	seen := map[string]bool{}
	polls := make([]poll, 0, n)
	for i := range n {
		c, prefix := constrained, "AC"
		if i < n*freePct/100 {
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
	names  func(label string) (queue, prefix string) // distinct per label: fresh state
	keep   bool                                      // keep each mode's queue afterwards (for -ui)
	remove bool                                      // delete each mode's queue afterwards (real Redis)
	onGate func(mode, *quotagate.Gate)               // -ui: show each mode's gate (ui.go); nil: nothing
	// onRecord receives each run's recording (-timeline), for which the
	// gated modes also sample their gate's holds; nil: nothing.
	onRecord func(scenario string, n int, rec recording)
}

// settings are the flags a run depends on.
type settings struct {
	quota   sim.Quota
	dialect sim.Dialect // how the constrained carrier speaks (-dialect, -headers)
	polls   int
	free    int // percent of the polls at the carrier without quota
	workers int
	seed    uint64
	latency time.Duration
	timeout time.Duration // per mode
	hold    time.Duration // quotagate Tuning.MaxHold (0: its default)
	holders int           // quotagate Tuning.MaxHolders (0: its default)
	// delayedCheck is asynq's DelayedTaskCheckInterval: how often its
	// forwarder moves due retries back to the queue.
	delayedCheck time.Duration
}

// runMode runs the workload in mode m on fresh state, under names made from
// label (unique per run of a mode), and returns its figures.
func runMode(ctx context.Context, e env, label string, m mode, s settings, polls []poll, prog *progress) (figures, error) {
	f, _, err := recordMode(ctx, e, label, m, s, polls, prog)
	return f, err
}

// recordMode is runMode, and also returns the run's recording: what the
// constrained carrier received and the pauses in force.
func recordMode(ctx context.Context, e env, label string, m mode, s settings, polls []poll, prog *progress) (figures, recording, error) {
	queue, prefix := e.names(label)
	r := &run{mode: m, s: s, total: len(polls)}

	// Enqueue everything first.
	client := asynq.NewClient(e.opt)
	defer client.Close()
	carriers := map[string]tracking.Carrier{
		constrained: tracking.NewCarrier(constrained, acmeCredential),
		free:        tracking.NewCarrier(free, swiftCredential),
	}
	for _, p := range polls {
		if _, err := tracking.Enqueue(ctx, client, carriers[p.Carrier], p.Number, asynq.Queue(queue)); err != nil {
			return figures{}, recording{}, err
		}
	}

	// The run starts on the next whole second, and the constrained
	// carrier's windows with it, as a provider's windows follow the clock.
	// Fresh carriers: fresh quota and counters.
	start := time.Now().Truncate(time.Second).Add(time.Second)
	acme := newCarrier(constrained, carrierOptions{quota: &s.quota, dialect: s.dialect, latency: s.latency, origin: start}, acmeCredential)
	defer acme.Close()
	swift := newCarrier(free, carrierOptions{latency: s.latency}, swiftCredential)
	defer swift.Close()

	transport := &http.Transport{MaxIdleConnsPerHost: 2 * s.workers}
	defer transport.CloseIdleConnections()
	srv, mux, closeGate := r.server(e, queue, prefix, func(rt http.RoundTripper) tracking.ClientResolver {
		return newResolver(r, rt, acme, swift)
	}, transport)
	defer closeGate()
	if err := sleepUntil(ctx, start); err != nil {
		return figures{}, recording{}, err
	}
	if err := srv.Start(mux); err != nil {
		return figures{}, recording{}, fmt.Errorf("start asynq server: %w", err)
	}
	stopSampling := func() {}
	if r.gate != nil && e.onRecord != nil {
		// Only for a timeline: what the gate holds, every 50 ms.
		stopSampling = r.sampleHolds(carriers[constrained].Scope(), 50*time.Millisecond)
	}
	err := r.wait(ctx, start, acme, swift, prog)
	stopSampling()
	srv.Shutdown()
	if e.remove && !e.keep {
		removeQueue(e, queue)
		removeKeys(e, prefix)
	}

	f := r.figures(start, acme, swift)
	prog.finish(f)
	return f, r.recording(start, acme, f), err
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// server returns the mode's asynq server and handler chain: the bookkeeping
// middleware, then the gate (gate modes), then the tracking handler whose
// clients resolve asks for, over base (gate modes: through the gate's
// Transport, the quick start's way, which also reads the budget the carrier
// advertises); and the function that closes the gate once the server is
// shut down.
func (r *run) server(e env, queue, prefix string, resolve func(http.RoundTripper) tracking.ClientResolver, base http.RoundTripper) (*asynq.Server, *asynq.ServeMux, func()) {
	rt := base
	closeGate := func() {}
	cfg := asynq.Config{
		Concurrency: r.s.workers,
		Queues:      map[string]int{queue: 1},
		// Retry times are whole seconds, and the forwarder moves due
		// retries to the queue every DelayedTaskCheckInterval (-delayed-check).
		DelayedTaskCheckInterval: r.s.delayedCheck,
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
			Tuning: quotagate.Tuning{MaxHold: r.s.hold, MaxHolders: r.s.holders},
		}
		if ls := configuredLimits(r.s.quota); len(ls) > 0 && r.mode.Limit {
			gcfg.Limits = map[string][]quotagate.Limit{constrained: ls}
		}
		g := quotagate.New(e.rdb, gcfg)
		closeGate = func() { g.Close() }
		r.gate = g // before the server starts: instrument reads it
		if e.onGate != nil {
			e.onGate(r.mode, g)
		}
		mux.Use(g.Middleware())
		rt = g.Transport(base)
		cfg.IsFailure = quotagate.IsFailure
		cfg.RetryDelayFunc = g.RetryDelay(nil)
	} else if r.mode.Pause {
		p := plainPause{rdb: e.rdb, prefix: prefix}
		mux.Use(p.middleware)
		cfg.IsFailure = pauseIsFailure
		cfg.RetryDelayFunc = pauseRetryDelay
	} else {
		cfg.IsFailure = localIsFailure
		cfg.RetryDelayFunc = localRetryDelay
	}
	var res tracking.ClientResolver
	if resolve != nil {
		res = resolve(rt)
	}
	mux.Handle(tracking.TypePoll, &tracking.Handler{Resolver: res, Report: r.report})
	return asynq.NewServer(e.opt, cfg), mux, closeGate
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

// removeKeys deletes the gate's keys of a run in a shared Redis: only those
// under its prefix, which is unique to the run.
func removeKeys(e env, prefix string) {
	ctx := context.Background()
	iter := e.rdb.Scan(ctx, 0, prefix+":*", 100).Iterator()
	for iter.Next(ctx) {
		e.rdb.Del(ctx, iter.Val())
	}
}

// errTimedOut is the error of a mode that did not finish within -timeout.
var errTimedOut = errors.New("timed out")

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
			return fmt.Errorf("mode %s: %d of %d polls done after %v: %w", r.mode.Name, done, r.total, r.s.timeout, errTimedOut)
		case <-tick.C:
		}
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
