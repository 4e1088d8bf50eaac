package quotagate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/redistest"
)

// BenchmarkRedisCPU shows what one admission costs Redis in CPU, per kind
// of scope (issue 28: a scope with nothing configured and nothing learned
// costs at most 15 µs of Redis CPU per admission round trip). Each kind
// runs on a redis-server of its own (redistest.StartPrivate), so nothing
// but its admissions moves the server's counters, read before and after
// the b.N admissions that follow an uncounted warm-up:
//
//   - redis-µs/admission: INFO cpu, used_cpu_user + used_cpu_sys, all the
//     CPU the server spent (the scripts, parsing and socket I/O, its cron,
//     the INFO calls of the readings) per admission. Redis prints these
//     getrusage values to the microsecond; Linux samples their user/sys
//     split at its tick (1–10 ms) but keeps their sum to the precise run
//     time, so over thousands of admissions the sum is good to well under
//     a microsecond per admission.
//   - script-µs/call: INFO commandstats, usec over calls of the script
//     commands (EVALSHA, EVAL, FCALL and their _RO forms): the time Redis
//     spent running the scripts, the commands they call included, socket
//     I/O not. Redis times each call on its clock, to the microsecond: it
//     is elapsed time, so on a machine whose cores the benchmark's own
//     process keeps busy it also counts the moments Redis was not
//     scheduled, and may come close to redis-µs/admission.
//   - calls/admission: script calls per admission from the same counters
//     (a Transport response's observation is a call of its own; so is a
//     second look after an in-process hold).
//
// Admissions go through the public API only, Gate.Middleware's
// ProcessTask on tasks from NewTask (the handler makes one request through
// Gate.Transport in budget-transport), round-robin over many scopes of the
// kind. Each kind states the outcome every counted admission must have and
// fails if one differs, or if fewer script calls than admissions reached
// Redis, so a figure is always that of the path it names.
//
// The open cache (Tuning.OpenCache) answers for a scope without a limit
// that a round trip saw open, without asking Redis, until the feed
// announces a change of it: every kind but open-cached and open-rare
// disables it (OpenCache: -1), so each admission is a round trip,
// whatever the kind's cacheability; those two keep the default to measure
// what the cache saves, open-rare when a scope is seen less than once a
// second (the passes over its scopes paced by every).
//
// Run:
//
//	go test -run '^$' -bench BenchmarkRedisCPU -benchtime 3000x -count 3 .
func BenchmarkRedisCPU(b *testing.B) {
	for _, k := range cpuKinds {
		b.Run(k.name, func(b *testing.B) { runCPUKind(b, k) })
	}
}

// cpuOutcome is what an admission must come to in a kind.
type cpuOutcome int

const (
	ranHandler     cpuOutcome = iota // admitted: the handler ran
	deferredPaused                   // a *Deferral of ReasonPaused: the handler did not run
)

// cpuKind is one kind of scope of BenchmarkRedisCPU.
type cpuKind struct {
	name    string
	scopes  int                       // distinct scopes (Provider: the name), admitted round-robin
	config  func(*quotagate.Config)   // changes to cpuConfig's configuration; nil: none
	prepare func(*testing.B, *cpuEnv) // puts the scopes in their state, before the warm-up; nil: nothing
	// transport: the gate has a Transport, to a provider that advertises
	// a budget. (A gate with a Transport probes the scopes it knows
	// nothing about and starts them slowly: see Gate.Transport.)
	transport bool
	silent    bool // the provider advertises nothing (with transport)
	request   bool // the handler makes one request through the Transport
	want      cpuOutcome
	cached    bool // the open cache is on: fewer script calls than admissions is the point
	// every: each scope is admitted again no sooner than every after its
	// last admission (the counted round-robin passes are paced), as in a
	// fleet whose process sees a scope less than once a second; 0: not
	// paced
	every time.Duration
}

// learnedAdmissions is how many tasks of a learned scope are admitted
// before its refusal: the scope learns about as many per second (the
// cycle's admissions less one, in a window of the hint's second), far
// more than the round-robin over learnedScopes scopes gives one of them
// in a second, so the learned limit applies to every admission and never
// binds.
const (
	learnedAdmissions = 300
	learnedScopes     = 100
)

var cpuKinds = []cpuKind{
	// Nothing configured, nothing learned, a thousand scopes.
	{name: "open", scopes: 1000},
	// The same with the open cache on (see BenchmarkRedisCPU).
	{name: "open-cached", scopes: 1000, cached: true,
		config: func(c *quotagate.Config) { c.Tuning.OpenCache = 0 }},
	// The same, each scope seen less than once a second.
	{name: "open-rare", scopes: 1000, cached: true, every: 1100 * time.Millisecond,
		config: func(c *quotagate.Config) { c.Tuning.OpenCache = 0 }},
	// Paused for an hour by Gate.Pause: every admission is deferred.
	{name: "paused", scopes: 1000, prepare: pauseScopes, want: deferredPaused},
	// A GCRA limit and a fixed window, neither ever binding. An unaligned
	// fixed window admits only in its head, Tuning.MaxHold (at most half
	// its period: see FixedWindow), so MaxHold is raised past any run's
	// length; every admission must still run its handler.
	{name: "configured", scopes: 1000, config: func(c *quotagate.Config) {
		c.Limits = map[string][]quotagate.Limit{"configured": {
			quotagate.PerSecond(1_000_000_000, 1_000_000), quotagate.FixedWindow(1_000_000_000, 24*time.Hour)}}
		c.Tuning.MaxHold = time.Hour
	}},
	// Responses advertised a budget (through Gate.Transport) a million
	// requests deep with its reset an hour ahead; then admissions alone.
	{name: "budget", scopes: 1000, prepare: adviseBudgets, transport: true},
	// The same, each task's handler making its request through the
	// Transport: the admission and the response's observation.
	{name: "budget-transport", scopes: 1000, prepare: adviseBudgets, transport: true, request: true},
	// A provider that advertises nothing, each task's handler making its
	// request through the Transport: every scope's first contact is a
	// probe, then it starts slowly (its first 32 answers each tell Redis:
	// internal/model/start.go), the answers sent with the scope's next
	// admission or flushed together (internal/store/answers.go).
	{name: "silent-transport", scopes: 1000, transport: true, silent: true, request: true},
	// Refused with a hint after learnedAdmissions admissions: a limit
	// learned, in force once the pause is over.
	{name: "learned", scopes: learnedScopes, prepare: learnLimits},
}

// cpuEnv is one kind's redis-server, gate and scopes.
type cpuEnv struct {
	kind   cpuKind
	srv    *redistest.Server
	rdb    *redis.Client
	cfg    quotagate.Config
	gate   *quotagate.Gate
	mw     asynq.Handler
	tasks  []*asynq.Task // one per scope
	scopes []quotagate.Scope
	url    string       // the provider's
	http   *http.Client // through the gate's Transport
	ran    int          // handler runs
}

// cpuConfig is the configuration of every kind's gate before its changes:
// the open cache off, logs discarded.
func cpuConfig(prefix string) quotagate.Config {
	return quotagate.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler), Tuning: quotagate.Tuning{OpenCache: -1}}
}

// newCPUEnv starts the kind's own redis-server, gate and provider.
func newCPUEnv(b *testing.B, k cpuKind) *cpuEnv {
	b.Helper()
	srv := redistest.StartPrivate(b)
	e := &cpuEnv{kind: k, srv: srv, rdb: srv.Client(b), cfg: cpuConfig(srv.Prefix(b))}
	if k.config != nil {
		k.config(&e.cfg)
	}
	e.gate = quotagate.New(e.rdb, e.cfg)
	b.Cleanup(func() { e.gate.Close() })
	if k.transport {
		answer := advertiseBudget
		if k.silent {
			answer = func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
		}
		provider := httptest.NewServer(http.HandlerFunc(answer))
		b.Cleanup(provider.Close)
		e.url, e.http = provider.URL, &http.Client{Transport: e.gate.Transport(provider.Client().Transport)}
	}
	e.mw = e.gate.Middleware()(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		e.ran++
		if e.kind.request {
			return e.get(ctx, e.url)
		}
		return nil
	}))
	for i := range k.scopes {
		s := quotagate.Scope{Provider: k.name, Account: "acct" + strconv.Itoa(i)}
		e.scopes = append(e.scopes, s)
		e.tasks = append(e.tasks, quotagate.NewTask("poll", nil, s))
	}
	return e
}

// advertiseBudget is the provider: every answer advertises a budget of a
// million requests, nearly whole, reset an hour from now (epoch seconds,
// as GitHub writes it).
func advertiseBudget(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("X-RateLimit-Limit", "1000000")
	h.Set("X-RateLimit-Remaining", "999999")
	h.Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
	w.WriteHeader(http.StatusOK)
}

// get makes one request to url through the gate's Transport, in ctx (which
// carries the scope).
func (e *cpuEnv) get(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("provider answered %s", resp.Status)
	}
	return nil
}

// admit runs the task of scope i through the Middleware and checks that it
// came to the kind's outcome.
func (e *cpuEnv) admit(ctx context.Context, i int) error {
	ran := e.ran
	err := e.mw.ProcessTask(ctx, e.tasks[i%len(e.tasks)])
	var d *quotagate.Deferral
	switch {
	case e.kind.want == ranHandler && err == nil && e.ran == ran+1:
		return nil
	case e.kind.want == deferredPaused && errors.As(err, &d) && d.Reason == quotagate.ReasonPaused && e.ran == ran:
		return nil
	}
	return fmt.Errorf("admission of %v: handler ran %d times, error %v; want outcome %d", e.scopes[i%len(e.scopes)], e.ran-ran, err, e.kind.want)
}

// pauseScopes pauses every scope for an hour.
func pauseScopes(b *testing.B, e *cpuEnv) {
	for _, s := range e.scopes {
		if _, err := e.gate.Pause(context.Background(), s, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// adviseBudgets makes one request of every scope through the Transport, so
// that each has the budget its response advertised.
func adviseBudgets(b *testing.B, e *cpuEnv) {
	ctx := context.Background()
	for _, s := range e.scopes {
		if err := e.get(quotagate.WithScope(ctx, s), e.url); err != nil {
			b.Fatal(err)
		}
		if p, err := e.gate.State(ctx, s); err != nil || p.Budget == nil {
			b.Fatalf("%v has no budget after its response advertised one: %v %v", s, p, err)
		}
	}
}

// learnLimits teaches every scope a limit: a gate of its own (the default
// configuration) admits learnedAdmissions tasks of the scope, then one
// whose handler returns a refusal hinted a second; once the pauses are
// over, every scope must have learned a limit.
func learnLimits(b *testing.B, e *cpuEnv) {
	ctx := context.Background()
	cfg := cpuConfig(e.cfg.Prefix)
	cfg.Tuning = quotagate.Tuning{}
	teacher := quotagate.New(e.rdb, cfg)
	defer teacher.Close()
	refuse := false
	mw := teacher.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if refuse {
			return &quotagate.Refusal{Hint: time.Second}
		}
		return nil
	}))
	for i, t := range e.tasks {
		for range learnedAdmissions {
			if err := mw.ProcessTask(ctx, t); err != nil {
				b.Fatalf("teaching %v: %v", e.scopes[i], err)
			}
		}
		refuse = true
		var r *quotagate.Refusal
		if err := mw.ProcessTask(ctx, t); !errors.As(err, &r) {
			b.Fatalf("teaching %v: the refusal was not returned: %v", e.scopes[i], err)
		}
		refuse = false
	}
	for _, s := range e.scopes {
		awaitLearned(b, e.gate, s)
	}
}

// awaitLearned waits until s is open again, and fails unless it learned a
// limit.
func awaitLearned(b *testing.B, g *quotagate.Gate, s quotagate.Scope) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p, err := g.State(context.Background(), s)
		if err != nil {
			b.Fatal(err)
		}
		if p.Learned.IsZero() {
			b.Fatalf("%v learned no limit from its refusal: %v", s, p)
		}
		if p.Until.IsZero() {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%v still waits after its refusal's pause: %v", s, p)
		}
	}
}

// runCPUKind measures kind k: its scopes prepared, two rounds of them
// admitted uncounted (each scope's first admission writes what it keeps),
// then the counted admissions between two readings of the counters.
func runCPUKind(b *testing.B, k cpuKind) {
	e := newCPUEnv(b, k)
	if k.prepare != nil {
		k.prepare(b, e)
	}
	ctx := context.Background()
	for i := range 2 * len(e.tasks) {
		if err := e.admit(ctx, i); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
	}
	trips := roundTrips(b, e.gate)
	before := readRedisCounters(b, e.rdb)
	n := 0
	pass := time.Now()
	for b.Loop() {
		if k.every > 0 && n%len(e.tasks) == 0 {
			time.Sleep(time.Until(pass.Add(k.every)))
			pass = time.Now()
		}
		if err := e.admit(ctx, n); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.StopTimer()
	e.gate.Close() // the answers still kept go now
	after := readRedisCounters(b, e.rdb)
	b.ReportMetric(float64(roundTrips(b, e.gate)-trips)/float64(n), "trips/admission")
	reportRedisCPU(b, k, n, after.minus(before))
}

// roundTrips is how many round trips to Redis g has made for its tasks
// and responses (the samples of quotagate_store_duration_seconds; a
// pipeline is one): the reads of a scrape (state, scan), which Gather
// itself makes, are left out.
func roundTrips(b *testing.B, g *quotagate.Gate) uint64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(g.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != "quotagate_store_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if op := m.GetLabel()[0].GetValue(); op != "state" && op != "scan" {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// reportRedisCPU reports the counters' movement d over n admissions, and
// fails when they did not move as the kind says they must.
func reportRedisCPU(b *testing.B, k cpuKind, n int, d redisCounters) {
	if d.cpu <= 0 {
		b.Fatalf("used_cpu did not move over %d admissions", n)
	}
	if !k.cached && d.calls < int64(n) {
		b.Fatalf("%d script calls for %d admissions: each must reach Redis", d.calls, n)
	}
	perCall := 0.0 // no call at all: the open cache answered every admission
	if d.calls > 0 {
		perCall = float64(d.usec) / float64(d.calls)
	}
	b.ReportMetric(float64(d.cpu.Nanoseconds())/1e3/float64(n), "redis-µs/admission")
	b.ReportMetric(perCall, "script-µs/call")
	b.ReportMetric(float64(d.calls)/float64(n), "calls/admission")
}

// redisCounters is what INFO says of the server's work so far.
type redisCounters struct {
	cpu   time.Duration // used_cpu_user + used_cpu_sys
	calls int64         // calls of the script commands
	usec  int64         // µs spent in them
}

func (c redisCounters) minus(o redisCounters) redisCounters {
	return redisCounters{cpu: c.cpu - o.cpu, calls: c.calls - o.calls, usec: c.usec - o.usec}
}

// scriptCommands are the commandstats entries of the commands that run a
// script.
var scriptCommands = []string{"cmdstat_eval", "cmdstat_evalsha", "cmdstat_eval_ro", "cmdstat_evalsha_ro", "cmdstat_fcall", "cmdstat_fcall_ro"}

// readRedisCounters reads INFO cpu and INFO commandstats (two calls: Redis
// before 7 takes one section per INFO).
func readRedisCounters(b *testing.B, rdb *redis.Client) redisCounters {
	b.Helper()
	ctx := context.Background()
	c := redisCounters{cpu: redistest.CPU(b, rdb)}
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	fields := redistest.ParseInfo(stats)
	for _, cmd := range scriptCommands {
		calls, usec, err := commandStat(fields[cmd])
		if err != nil {
			b.Fatalf("INFO commandstats %s: %v", cmd, err)
		}
		c.calls += calls
		c.usec += usec
	}
	return c
}

// commandStat reads calls and usec from a commandstats value,
// "calls=3,usec=250,usec_per_call=83.33,rejected_calls=0,failed_calls=0";
// an empty one (the command never ran) is zero.
func commandStat(v string) (calls, usec int64, err error) {
	if v == "" {
		return 0, 0, nil
	}
	found := 0
	for kv := range strings.SplitSeq(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		var p *int64
		switch k {
		case "calls":
			p = &calls
		case "usec":
			p = &usec
		default:
			continue
		}
		if *p, err = strconv.ParseInt(val, 10, 64); err != nil {
			return 0, 0, err
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("no calls and usec in %q", v)
	}
	return calls, usec, nil
}

// BenchmarkRedisCPUFloor is what any round trip costs Redis on this
// machine, beside which BenchmarkRedisCPU's figures are read: Redis's CPU
// (INFO cpu) per PING, and per call of a script that only returns, sent
// with the admission's twelve keys and twelve arguments. Whatever an
// admission's script does, its round trip costs at least the latter.
//
//	go test -run '^$' -bench BenchmarkRedisCPUFloor -benchtime 20000x .
func BenchmarkRedisCPUFloor(b *testing.B) {
	trivial := redis.NewScript("return 1")
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = "floor:{s}:" + strconv.Itoa(i)
	}
	args := []any{1, 0, 43_200_000, 0, 0, 0, 0, 0, 0, 0, "", 0}
	for _, c := range []struct {
		name string
		call func(context.Context, *redis.Client) error
	}{
		{"ping", func(ctx context.Context, rdb *redis.Client) error { return rdb.Ping(ctx).Err() }},
		{"script", func(ctx context.Context, rdb *redis.Client) error { return trivial.Run(ctx, rdb, keys, args...).Err() }},
	} {
		b.Run(c.name, func(b *testing.B) {
			rdb := redistest.StartPrivate(b).Client(b)
			ctx := context.Background()
			for range 1000 { // warm-up: the connection, the script's cache
				if err := c.call(ctx, rdb); err != nil {
					b.Fatal(err)
				}
			}
			before, n := redistest.CPU(b, rdb), 0
			for b.Loop() {
				if err := c.call(ctx, rdb); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.StopTimer()
			b.ReportMetric(float64((redistest.CPU(b, rdb)-before).Nanoseconds())/1e3/float64(n), "redis-µs/call")
		})
	}
}
