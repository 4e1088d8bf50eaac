package quotagate

// The article's timeline, and the asynq traps around it, run against real
// asynq servers (Server, Client, Inspector) on two backends each: miniredis
// (embedded) and a real redis-server started by internal/redistest.
//
// Every test uses its own asynq queue and gate prefix, so the tests run in
// parallel on one shared redis-server without touching each other's keys;
// nothing is ever flushed. Waits are polling loops bounded by mwWait, and
// every time assertion is an inequality derived from values read back from
// Redis (pause deadlines from Redis TIME, asynq's whole-second retry times)
// and from instants taken before and after the action under test, never a
// guess at how long something takes.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/hint"
	"github.com/quotagate/quotagate/internal/redistest"
)

const (
	// mwWait bounds every polling loop: generous, a noisy machine only
	// makes a test slower, never wrong.
	mwWait = 30 * time.Second
	// mwPoll is the polling period of the loops.
	mwPoll = 10 * time.Millisecond

	mwTaskType = "tracking:poll"
	// mwSecret is the credential of the "ups" account. The tests use its
	// Fingerprint as Scope.Account and check that the secret itself shows
	// up nowhere: task errors, logs, Redis keys and values.
	mwSecret = "ups-live-7f3a9c1e5b2d4f60-SECRET"
)

var (
	mwUPS   = Scope{Provider: "ups", Account: Fingerprint(mwSecret)}
	mwFedEx = Scope{Provider: "fedex", Account: Fingerprint(mwSecret)}
	// mwUPSOther is another credential of the same provider: its own quota.
	mwUPSOther = Scope{Provider: "ups", Account: Fingerprint("ups-live-other-credential")}

	mwQueueSeq atomic.Uint64
)

// mwBackend is the Redis one subtest runs on.
type mwBackend struct {
	name   string
	addr   string                // for asynq
	conn   asynq.RedisConnOpt    // for asynq instead of addr, when set (a cluster)
	rdb    redis.UniversalClient // for the gate and raw reads
	prefix string                // Config.Prefix of the gate
}

// asynqOpt is how asynq connects to the backend.
func (b *mwBackend) asynqOpt() asynq.RedisConnOpt {
	if b.conn != nil {
		return b.conn
	}
	return asynq.RedisClientOpt{Addr: b.addr}
}

// mwOnBackends runs f on miniredis, on a real redis-server and on a Redis
// Cluster (asynq on RedisClusterClientOpt; skipped when redis-server or
// redis-cli is missing, unless QUOTAGATE_REQUIRE_REDIS=1), in parallel.
func mwOnBackends(t *testing.T, f func(t *testing.T, e *mwEnv)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { rdb.Close() })
		f(t, mwNewEnv(t, &mwBackend{name: "miniredis", addr: mr.Addr(), rdb: rdb, prefix: "qgmw"}))
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		s := redistest.Start(t)
		f(t, mwNewEnv(t, &mwBackend{name: "redis-server", addr: s.Addr, rdb: s.Client(t), prefix: s.Prefix(t)}))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.StartCluster(t)
		f(t, mwNewEnv(t, &mwBackend{name: "cluster", conn: asynq.RedisClusterClientOpt{Addrs: c.Addrs}, rdb: c.Client(t), prefix: c.Prefix(t)}))
	})
}

// mwEnv is one test's asynq world: a queue of its own, a client, an
// inspector and a log that captures what the gate logs.
type mwEnv struct {
	t      *testing.T
	b      *mwBackend
	queue  string
	client *asynq.Client
	insp   *asynq.Inspector
	log    *testLogBuffer
}

func mwNewEnv(t *testing.T, b *mwBackend) *mwEnv {
	name := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, t.Name())
	e := &mwEnv{
		t:      t,
		b:      b,
		queue:  fmt.Sprintf("qgmw-%d-%s", mwQueueSeq.Add(1), name),
		client: asynq.NewClient(b.asynqOpt()),
		insp:   asynq.NewInspector(b.asynqOpt()),
		log:    new(testLogBuffer),
	}
	t.Cleanup(func() {
		e.client.Close()
		e.insp.Close()
		e.checkNoSecret()
	})
	return e
}

// gate returns a gate on the backend with the test's prefix and log.
func (e *mwEnv) gate(cfg Config) *Gate {
	cfg.Prefix = e.b.prefix
	cfg.Logger = e.log.logger()
	return New(e.b.rdb, cfg)
}

// gateWith is gate with the test's hooks.
func (e *mwEnv) gateWith(cfg Config, h hooks) *Gate {
	cfg.Prefix = e.b.prefix
	cfg.Logger = e.log.logger()
	return newWith(e.b.rdb, cfg, h)
}

// mwServerOpt adjusts the asynq configuration of one test.
type mwServerOpt func(*asynq.Config)

func mwConcurrency(n int) mwServerOpt { return func(c *asynq.Config) { c.Concurrency = n } }

func mwRetryDelay(f asynq.RetryDelayFunc) mwServerOpt {
	return func(c *asynq.Config) { c.RetryDelayFunc = f }
}

// serve starts an asynq server on the test's queue with the gate registered
// as the README says (Middleware, RetryDelay, IsFailure), and h as the
// handler of mwTaskType. The returned recorder sits outside the gate's
// middleware and keeps what it returned for every task. The server is shut
// down by t.Cleanup.
func (e *mwEnv) serve(g *Gate, h asynq.HandlerFunc, opts ...mwServerOpt) *mwRecorder {
	e.t.Helper()
	cfg := asynq.Config{
		Concurrency:              4,
		Queues:                   map[string]int{e.queue: 1},
		IsFailure:                IsFailure,
		RetryDelayFunc:           g.RetryDelay(nil),
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        20 * time.Millisecond,
		ShutdownTimeout:          3 * time.Second,
		LogLevel:                 asynq.FatalLevel,
	}
	for _, o := range opts {
		o(&cfg)
	}
	rec := &mwRecorder{byID: map[string]*mwOutcome{}}
	mux := asynq.NewServeMux()
	mux.Use(rec.middleware, g.Middleware())
	mux.Handle(mwTaskType, h)
	srv := asynq.NewServer(e.b.asynqOpt(), cfg)
	if err := srv.Start(mux); err != nil {
		e.t.Fatalf("asynq server: %v", err)
	}
	e.t.Cleanup(srv.Shutdown)
	return rec
}

// enqueue enqueues t on the test's queue and returns its ID.
func (e *mwEnv) enqueue(t *asynq.Task, opts ...asynq.Option) string {
	e.t.Helper()
	info, err := e.client.Enqueue(t, append([]asynq.Option{asynq.Queue(e.queue)}, opts...)...)
	if err != nil {
		e.t.Fatalf("enqueue: %v", err)
	}
	return info.ID
}

// info returns the task's state as the Inspector (and asynqmon) sees it.
func (e *mwEnv) info(id string) *asynq.TaskInfo {
	e.t.Helper()
	ti, err := e.insp.GetTaskInfo(e.queue, id)
	if err != nil {
		e.t.Fatalf("GetTaskInfo(%s): %v", id, err)
	}
	return ti
}

// waitFor polls cond until it holds, failing the test after mwWait.
func (e *mwEnv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(mwWait)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("gave up after %v waiting for %s", mwWait, what)
		}
		time.Sleep(mwPoll)
	}
}

// waitState waits until the task is in state and returns its info.
func (e *mwEnv) waitState(id string, state asynq.TaskState) *asynq.TaskInfo {
	e.t.Helper()
	var ti *asynq.TaskInfo
	e.waitFor(fmt.Sprintf("task %s in state %v", id, state), func() bool {
		var err error
		ti, err = e.insp.GetTaskInfo(e.queue, id)
		return err == nil && ti.State == state
	})
	return ti
}

// copies returns how many times id appears in each state of the test's
// queue, read in one MULTI/EXEC so the snapshot is atomic. The Inspector's
// List*Tasks calls are one round trip per state: a task that moves from
// retry to pending to active during a scan would be seen twice or not at
// all, which says nothing about asynq. asynq's state changes are Lua
// scripts, so a transaction sees each of them whole. (Key layout of asynq
// v0.26: asynq:{<queue>}:<state>, lists of IDs or sorted sets of IDs.)
func (e *mwEnv) copies(ctx context.Context, id string) (map[string]int, error) {
	p := "asynq:{" + e.queue + "}:"
	pipe := e.b.rdb.TxPipeline()
	lists := map[string]*redis.StringSliceCmd{}
	for _, s := range []string{"pending", "active"} {
		lists[s] = pipe.LRange(ctx, p+s, 0, -1)
	}
	for _, s := range []string{"scheduled", "retry", "archived", "completed"} {
		lists[s] = pipe.ZRange(ctx, p+s, 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	n := map[string]int{}
	for s, cmd := range lists {
		for _, v := range cmd.Val() {
			if v == id {
				n[s]++
			}
		}
	}
	return n, nil
}

// checkNoSecret checks that the credential is nowhere the gate writes: its
// log, and the keys and string values under its prefix.
func (e *mwEnv) checkNoSecret() {
	if strings.Contains(e.log.String(), mwSecret) {
		e.t.Errorf("the gate logged the credential secret:\n%s", e.log)
	}
	ctx := context.Background()
	keys, err := scanKeys(ctx, e.b.rdb, e.b.prefix+":*")
	if err != nil {
		e.t.Errorf("SCAN %s:*: %v", e.b.prefix, err)
	}
	for _, k := range keys {
		v, _ := e.b.rdb.Get(ctx, k).Result()
		if strings.Contains(k, mwSecret) || strings.Contains(v, mwSecret) {
			e.t.Errorf("Redis key %q (value %q) holds the credential secret", k, v)
		}
	}
}

// mwRecorder is a middleware registered outside the gate's: it sees the
// errors the gate's middleware hands to asynq, per task ID.
type mwRecorder struct {
	mu   sync.Mutex
	byID map[string]*mwOutcome
}

type mwOutcome struct {
	deferrals []Deferral
	refusals  []Pause // the pause in force the middleware wrapped each model.Refusal with
	errs      []string
}

func (r *mwRecorder) middleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		err := next.ProcessTask(ctx, t)
		id, _ := asynq.GetTaskID(ctx)
		r.mu.Lock()
		defer r.mu.Unlock()
		o := r.byID[id]
		if o == nil {
			o = new(mwOutcome)
			r.byID[id] = o
		}
		var d *Deferral
		var rec *recorded
		switch {
		case errors.As(err, &d):
			o.deferrals = append(o.deferrals, *d)
		case errors.As(err, &rec):
			o.refusals = append(o.refusals, rec.pause)
		}
		if err != nil {
			o.errs = append(o.errs, err.Error())
		}
		return err
	})
}

// outcome returns a copy of what the gate returned for task id.
func (r *mwRecorder) outcome(id string) mwOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o := r.byID[id]; o != nil {
		return mwOutcome{slices.Clone(o.deferrals), slices.Clone(o.refusals), slices.Clone(o.errs)}
	}
	return mwOutcome{}
}

// mwCalls counts a handler's calls per task ID, and the calls of the
// provider client resolver inside it.
type mwCalls struct {
	mu       sync.Mutex
	byID     map[string]int
	starts   []time.Time
	resolves atomic.Int64
}

func mwNewCalls() *mwCalls { return &mwCalls{byID: map[string]int{}} }

// enter records one call of the handler and resolves the provider client,
// as the article's job does before it sends its request.
func (c *mwCalls) enter(ctx context.Context) {
	now := time.Now()
	id, _ := asynq.GetTaskID(ctx)
	c.mu.Lock()
	c.byID[id]++
	c.starts = append(c.starts, now)
	c.mu.Unlock()
	c.resolves.Add(1)
}

func (c *mwCalls) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id]
}

func (c *mwCalls) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.starts)
}

func (c *mwCalls) startTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.starts)
}

// mwBetween fails unless lo ≤ got ≤ hi.
func mwBetween(t *testing.T, what string, got, lo, hi time.Time) {
	t.Helper()
	if got.Before(lo) || got.After(hi) {
		t.Errorf("%s = %s, want within [%s, %s] (%v after the lower bound)", what,
			got.Format(time.RFC3339Nano), lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano), got.Sub(lo))
	}
}

// mwState reads the pause of s and fails the test on a store error.
func mwState(t *testing.T, g *Gate, s Scope) Pause {
	t.Helper()
	p, err := g.State(context.Background(), s)
	if err != nil {
		t.Fatalf("State(%s): %v", s, err)
	}
	return p
}

func mwPause(t *testing.T, g *Gate, s Scope, d time.Duration) Pause {
	t.Helper()
	p, err := g.Pause(context.Background(), s, d)
	if err != nil {
		t.Fatalf("Pause(%s, %v): %v", s, d, err)
	}
	return p
}

// mwMS truncates to the millisecond, the resolution of stored deadlines.
func mwMS(t time.Time) time.Time { return t.Truncate(time.Millisecond) }

// 1. A provider-specific 429 with a fifteen-second hint records a pause and
// releases the refused job for fifteen seconds.
func TestTimeline1RefusalWith15sHintPausesScopeAndRetriesAfterIt(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{Tuning: Tuning{MaxHold: -1}})
		calls := mwNewCalls()
		rec := e.serve(g, func(ctx context.Context, task *asynq.Task) error {
			calls.enter(ctx)
			// The provider of the article puts its hint in a text field of
			// a JSON body.
			resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Content-Type": {"application/json"}}}
			body := []byte(`{"error":{"code":"RATE_LIMITED","message":"Rate limit exceeded. Please try again in 15 seconds."}}`)
			hint, ok := hint.From(resp, body)
			if !ok || hint != 15*time.Second {
				return fmt.Errorf("hint.From = %v, %v; want 15s, true", hint, ok)
			}
			return &Refusal{Hint: hint, Err: errors.New("ups: HTTP 429")}
		})

		before := time.Now()
		id := e.enqueue(NewTask(mwTaskType, []byte(`{"number":"1Z999"}`), mwUPS))
		ti := e.waitState(id, asynq.TaskStateRetry)
		after := time.Now()

		p := mwState(t, g, mwUPS)
		// The deadline was computed from Redis TIME between before and
		// after: now+15s, to the millisecond.
		mwBetween(t, "pause deadline", p.Until, mwMS(before).Add(15*time.Second), after.Add(15*time.Second))
		if p.Remaining <= 0 || p.Remaining > 15*time.Second {
			t.Errorf("Remaining = %v, want in (0, 15s]", p.Remaining)
		}
		// The refused task waits no less than the shared deadline (whole
		// seconds, rounded up) and at most its hint plus that rounding.
		if ti.NextProcessAt.Before(p.Until) {
			t.Errorf("NextProcessAt %s is before the pause deadline %s", ti.NextProcessAt, p.Until)
		}
		mwBetween(t, "NextProcessAt", ti.NextProcessAt, mwMS(before).Add(15*time.Second), after.Add(16*time.Second))
		if ti.Retried != 1 {
			t.Errorf("Retried = %d, want 1: a refusal is a failure and spends a retry", ti.Retried)
		}
		if ti.MaxRetry != 26 {
			t.Errorf("MaxRetry = %d, want 26 (asynq's 25 plus NewTask's reserve)", ti.MaxRetry)
		}
		for _, want := range []string{"provider refused", "retry hint 15s", "scope paused until", "ups: HTTP 429"} {
			if !strings.Contains(ti.LastErr, want) {
				t.Errorf("LastErr %q does not mention %q", ti.LastErr, want)
			}
		}
		if n := calls.of(id); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
		o := rec.outcome(id)
		if len(o.refusals) != 1 || !o.refusals[0].Until.Equal(p.Until) {
			t.Errorf("the middleware returned refusals %+v, want one carrying the deadline %s", o.refusals, p.Until)
		}
		if !strings.Contains(e.log.String(), "scope paused") {
			t.Errorf("the recorded pause was not logged; log:\n%s", e.log)
		}
		t.Logf("%s: remaining %v, retry at %s (deadline %s)", e.b.name, p.Remaining, ti.NextProcessAt.Format(time.RFC3339), p.Until.Format(time.RFC3339Nano))
	})
}

// mwBackRE extracts the instant a deferral's message says the task comes back.
var mwBackRE = regexp.MustCompile(`; back at (\S+), no retry spent`)

// 2. A peer arriving during a nine-second pause is released without
// resolving the provider client.
func TestTimeline2PeerDuringPauseIsDeferredWithoutResolvingClient(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{Tuning: Tuning{MaxHold: -1}})
		calls := mwNewCalls()
		rec := e.serve(g, func(ctx context.Context, task *asynq.Task) error {
			calls.enter(ctx) // resolves the client: must never happen here
			return nil
		})

		p := mwPause(t, g, mwUPS, 9*time.Second)
		before := time.Now()
		id := e.enqueue(NewTask(mwTaskType, []byte(`{"number":"1Z998"}`), mwUPS, asynq.TaskID("poll:ups:1Z998")))
		ti := e.waitState(id, asynq.TaskStateRetry)
		after := time.Now()

		if n, r := calls.total(), calls.resolves.Load(); n != 0 || r != 0 {
			t.Errorf("handler ran %d times and resolved the client %d times during the pause, want 0 and 0", n, r)
		}
		if ti.Retried != 0 {
			t.Errorf("Retried = %d, want 0: a deferral is not a failure", ti.Retried)
		}
		// Never before the deadline; at most the reopening jitter (1s by
		// default) plus asynq's whole-second rounding after it, plus
		// however long the deferral took to be written.
		if ti.NextProcessAt.Before(p.Until) {
			t.Errorf("NextProcessAt %s is before the pause deadline %s: the task would wake early", ti.NextProcessAt, p.Until)
		}
		mwBetween(t, "NextProcessAt", ti.NextProcessAt, p.Until, p.Until.Add(2*time.Second+after.Sub(before)+time.Millisecond))
		if q := mwState(t, g, mwUPS); !q.Until.Equal(p.Until) {
			t.Errorf("State's Until = %s, want the deadline %s Pause returned", q.Until, p.Until)
		}

		o := rec.outcome(id)
		if len(o.deferrals) != 1 || o.deferrals[0].Scope != mwUPS || o.deferrals[0].Reason != ReasonPaused {
			t.Fatalf("the middleware returned deferrals %+v, want one for %s, paused", o.deferrals, mwUPS)
		}
		// What asynqmon shows: which scope, how long, until when.
		msg := ti.LastErr
		if msg != o.deferrals[0].Error() {
			t.Errorf("LastErr = %q, want the deferral's message %q", msg, o.deferrals[0].Error())
		}
		// The scope paused by hand (Gate.Pause): an operator, said first.
		if !strings.Contains(msg, "(scope "+mwUPS.String()+", background)") || !strings.HasPrefix(msg, "quotagate: ups paused by an operator;") || !strings.Contains(msg, "no retry spent") {
			t.Errorf("LastErr %q does not name the paused scope %s, who paused it and that no retry was spent", msg, mwUPS)
		}
		m := mwBackRE.FindStringSubmatch(msg)
		if m == nil {
			t.Fatalf("LastErr %q does not say when the task comes back", msg)
		}
		back, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || back.Nanosecond() != 0 {
			t.Fatalf("LastErr back at %q: %v; want an instant on asynq's whole second", m[1], err)
		}
		// It wakes MaxHold + 1 s before the deadline, to hold the rest, or,
		// without a place to hold, at the deadline plus a jitter of at most
		// ReopenJitter (1 s): on asynq's next whole second either way.
		mwBetween(t, "LastErr's back at", back, p.Until.Add(-3*time.Second), p.Until.Add(2*time.Second))
		if strings.Contains(msg, mwSecret) {
			t.Errorf("LastErr %q contains the credential secret", msg)
		}
		t.Logf("%s: LastErr = %s", e.b.name, msg)

		// A duplicate of the same tracking number is still refused by
		// asynq while the first one is deferred: uniqueness is asynq's.
		if _, err := e.client.Enqueue(NewTask(mwTaskType, nil, mwUPS, asynq.TaskID("poll:ups:1Z998")), asynq.Queue(e.queue)); !errors.Is(err, asynq.ErrTaskIDConflict) {
			t.Errorf("enqueue of the same TaskID while deferred: err = %v, want ErrTaskIDConflict", err)
		}
	})
}

// 3. An unrelated provider ignores that pause, and so does another
// credential of the same provider (the key follows the accounting boundary).
func TestTimeline3UnrelatedProviderIgnoresPause(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{Tuning: Tuning{MaxHold: -1}})
		calls := mwNewCalls()
		e.serve(g, func(ctx context.Context, task *asynq.Task) error {
			calls.enter(ctx)
			return nil
		})

		p := mwPause(t, g, mwUPS, 9*time.Second)
		fedex := e.enqueue(NewTask(mwTaskType, nil, mwFedEx), asynq.Retention(time.Hour))
		other := e.enqueue(NewTask(mwTaskType, nil, mwUPSOther), asynq.Retention(time.Hour))
		for _, id := range []string{fedex, other} {
			ti := e.waitState(id, asynq.TaskStateCompleted)
			if n := calls.of(id); n != 1 {
				t.Errorf("task %s: handler ran %d times, want 1", ti.ID, n)
			}
			if ti.Retried != 0 || ti.LastErr != "" {
				t.Errorf("task %s: Retried %d, LastErr %q; want 0 and none", ti.ID, ti.Retried, ti.LastErr)
			}
		}
		// The pause of ups is untouched.
		if q := mwState(t, g, mwUPS); !q.Until.Equal(p.Until) {
			t.Errorf("ups deadline = %s, want %s", q.Until, p.Until)
		}
		for _, s := range []Scope{mwFedEx, mwUPSOther} {
			if r := mwState(t, g, s); r.Remaining != 0 || !r.Until.IsZero() {
				t.Errorf("%s: %+v, want open", s, r)
			}
		}
	})
}

// 4. A malformed hint is no permission to go on: the scope still pauses,
// for its hintless episode's pause (1 s, then twice as long each time the
// provider refuses the request that asks again, capped by FallbackPause),
// and the refused task comes back when the scope reopens, as its probe.
func TestTimeline4UnparsableHintFallsBackAndStillPausesScope(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{FallbackPause: time.Minute, Tuning: Tuning{MaxHold: -1}})
		calls := mwNewCalls()
		e.serve(g, func(ctx context.Context, task *asynq.Task) error {
			calls.enter(ctx)
			body := []byte(`{"error":"Too many requests, please slow down"}`)
			hint, ok := hint.From(&http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}, body)
			if ok {
				return fmt.Errorf("hint.From = %v, true; want no hint", hint)
			}
			return &Refusal{Hint: hint} // 0: none
		})

		id := e.enqueue(NewTask(mwTaskType, nil, mwUPS, asynq.TaskID("poll:ups:1Z997")))
		before := time.Now()
		for attempt, level := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
			attempt++
			var ti *asynq.TaskInfo
			e.waitFor(fmt.Sprintf("refusal %d recorded by asynq", attempt), func() bool {
				ti = e.info(id)
				return ti.State == asynq.TaskStateRetry && ti.Retried == attempt
			})
			after := time.Now()

			p := mwState(t, g, mwUPS)
			mwBetween(t, fmt.Sprintf("attempt %d: pause deadline (the episode's pause)", attempt), p.Until,
				mwMS(before).Add(level), after.Add(level))
			mwBetween(t, fmt.Sprintf("attempt %d: NextProcessAt (the scope's pause)", attempt), ti.NextProcessAt,
				p.Until.Truncate(time.Second), p.Until.Add(time.Second))
			if !strings.Contains(ti.LastErr, "no readable retry hint") {
				t.Errorf("LastErr %q does not say the hint was unreadable", ti.LastErr)
			}
			before = after
		}
		if n := calls.of(id); n != 3 {
			t.Errorf("the provider saw %d requests of the task, want 3", n)
		}
	})
}

// 5. Concurrent longer and shorter hints retain the later deadline.
func TestTimeline5ConcurrentRefusalsKeepTheLaterDeadline(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{Tuning: Tuning{MaxHold: -1}})
		var (
			mu      sync.Mutex
			arrived = 0
			all     = make(chan struct{})
			gates   = map[string]chan struct{}{} // per payload: when to return
		)
		const n = 4
		hints := map[string]time.Duration{"long-a": 30 * time.Second, "short-a": 5 * time.Second, "long-b": 30 * time.Second, "short-b": 5 * time.Second}
		for k := range hints {
			gates[k] = make(chan struct{})
		}
		rec := e.serve(g, func(ctx context.Context, task *asynq.Task) error {
			k := string(task.Payload())
			mu.Lock()
			arrived++
			if arrived == n {
				close(all)
			}
			mu.Unlock()
			for _, c := range []chan struct{}{all, gates[k]} {
				select { // every handler is in flight, then returns when told
				case <-c:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return &Refusal{Hint: hints[k]}
		}, mwConcurrency(n))

		before := time.Now()
		ids := map[string]string{}
		for k := range hints {
			ids[k] = e.enqueue(NewTask(mwTaskType, []byte(k), mwUPS))
		}
		select {
		case <-all:
		case <-time.After(mwWait):
			t.Fatal("the four handlers never ran together")
		}
		// Pair a: both return at once, in whatever order the scheduler
		// picks. Pair b: the shorter hint is recorded while the longer one
		// is in force, whichever pair a left.
		close(gates["long-a"])
		close(gates["short-a"])
		e.waitFor("pair a in retry", func() bool {
			return e.info(ids["long-a"]).State == asynq.TaskStateRetry && e.info(ids["short-a"]).State == asynq.TaskStateRetry
		})
		close(gates["long-b"])
		e.waitFor("long-b in retry", func() bool { return e.info(ids["long-b"]).State == asynq.TaskStateRetry })
		close(gates["short-b"])
		e.waitFor("short-b in retry", func() bool { return e.info(ids["short-b"]).State == asynq.TaskStateRetry })
		after := time.Now()

		p := mwState(t, g, mwUPS)
		longB := rec.outcome(ids["long-b"]).refusals
		if len(longB) != 1 {
			t.Fatalf("long-b: refusals %+v", longB)
		}
		if !p.Until.Equal(longB[0].Until) {
			t.Errorf("deadline %s, want long-b's %s: the last 30s refusal sets it and the 5s one after it must not shorten it", p.Until, longB[0].Until)
		}
		mwBetween(t, "pause deadline", p.Until, mwMS(before).Add(30*time.Second), after.Add(30*time.Second))
		if p.Remaining <= 5*time.Second {
			t.Errorf("Remaining = %v: a shorter hint shortened the pause", p.Remaining)
		}
		for k, id := range ids {
			ti := e.info(id)
			refs := rec.outcome(id).refusals
			if len(refs) != 1 {
				t.Fatalf("%s: refusals %+v, want 1", k, refs)
			}
			r := refs[0]
			// A refusal's own delay is never shorter than the shared
			// deadline in force after recording it, nor than its hint.
			if ti.NextProcessAt.Before(r.Until) {
				t.Errorf("%s: NextProcessAt %s is before the deadline %s in force after its refusal", k, ti.NextProcessAt, r.Until)
			}
			if r.Remaining < hints[k] {
				t.Errorf("%s: remaining %v after recording is shorter than its own hint %v", k, r.Remaining, hints[k])
			}
			if ti.Retried != 1 {
				t.Errorf("%s: Retried = %d, want 1", k, ti.Retried)
			}
		}
		// The shorter hint recorded under the longer pause waits for it.
		if ti := e.info(ids["short-b"]); ti.NextProcessAt.Before(p.Until) {
			t.Errorf("short-b retries at %s, before the shared deadline %s", ti.NextProcessAt, p.Until)
		}
		// In the race of pair a, the max won whatever the order.
		la, sa := rec.outcome(ids["long-a"]).refusals[0], rec.outcome(ids["short-a"]).refusals[0]
		if sa.Until.After(la.Until) {
			t.Errorf("pair a: short's deadline %s after long's %s", sa.Until, la.Until)
		}
		t.Logf("%s: pair a deadlines long %s short %s (short first: %v)", e.b.name,
			la.Until.Format(time.RFC3339Nano), sa.Until.Format(time.RFC3339Nano), sa.Until.Before(la.Until))
	})
}

// The last-attempt trap: asynq archives any error of a task whose Retried
// has reached MaxRetry, whatever IsFailure says. A MaxRetry(0) task made by
// NewTask carries a reserve for deferrals: deferred twice, it then runs its
// handler exactly once, is never archived, and never exists twice.
func TestMiddlewareLastAttemptTaskDeferredTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{Tuning: Tuning{MaxHold: -1, ReopenJitter: -1}})
		calls := mwNewCalls()
		rec := e.serve(g, func(ctx context.Context, task *asynq.Task) error {
			calls.enter(ctx)
			return nil
		})
		const id = "poll:ups:1Z1"
		ctx := context.Background()

		p1 := mwPause(t, g, mwUPS, 2*time.Second)
		e.enqueue(NewTask(mwTaskType, nil, mwUPS, asynq.MaxRetry(0), asynq.TaskID(id)), asynq.Retention(time.Hour))

		// Sample, until the end, that the task exists at most once and
		// that nothing is ever archived.
		var (
			stop      = make(chan struct{})
			sampled   = make(chan struct{})
			samples   int
			sampleErr error // the first problem seen
			seen      = map[string]bool{}
		)
		sample := func() {
			samples++
			n, err := e.copies(ctx, id)
			if err == nil {
				var arch []*asynq.TaskInfo
				arch, err = e.insp.ListArchivedTasks(e.queue)
				if err == nil && len(arch) > 0 {
					err = fmt.Errorf("archived: %s (%s)", arch[0].ID, arch[0].LastErr)
				}
			}
			total := 0
			for st, c := range n {
				total += c
				seen[st] = true
			}
			if err == nil && total > 1 {
				err = fmt.Errorf("task %s exists %d times at once: %v", id, total, n)
			}
			if sampleErr == nil {
				sampleErr = err
			}
		}
		go func() {
			defer close(sampled)
			for {
				sample()
				select {
				case <-stop:
					sample() // once more, after the end
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
		defer func() {
			close(stop)
			<-sampled
			if sampleErr != nil {
				t.Errorf("sampling: %v", sampleErr)
			}
			if !seen["retry"] || !seen["completed"] {
				t.Errorf("the samples saw the task in %v, want retry and completed among them", seen)
			}
			t.Logf("%s: %d atomic samples of all task states, task seen in %v", e.b.name, samples, seen)
		}()

		// First deferral; while the task sleeps in the retry set, the
		// provider refuses someone else and the scope is paused again. The
		// task cannot wake before the first deadline (2s after it was
		// set), and the second one (4s after the first deferral) is later
		// than that deadline plus asynq's rounding: the margins leave the
		// test almost 2s to observe the deferral and pause again.
		e.waitFor("the first deferral", func() bool { return len(rec.outcome(id).deferrals) == 1 })
		p2 := mwPause(t, g, mwUPS, 4*time.Second)
		ti := e.waitState(id, asynq.TaskStateRetry)
		if ti.Retried != 0 || ti.MaxRetry != 1 {
			t.Errorf("after deferral 1: Retried %d MaxRetry %d, want 0 and 1 (the user's 0 plus the reserve)", ti.Retried, ti.MaxRetry)
		}
		if ti.NextProcessAt.Before(p1.Until) || !ti.NextProcessAt.Before(p2.Until) {
			t.Errorf("after deferral 1: NextProcessAt %s, want from the first deadline %s, before the second %s", ti.NextProcessAt, p1.Until, p2.Until)
		}
		if _, err := e.client.Enqueue(NewTask(mwTaskType, nil, mwUPS, asynq.MaxRetry(0), asynq.TaskID(id)), asynq.Queue(e.queue)); !errors.Is(err, asynq.ErrTaskIDConflict) {
			t.Errorf("enqueue of %s while deferred: err = %v, want ErrTaskIDConflict", id, err)
		}

		e.waitFor("the second deferral", func() bool { return len(rec.outcome(id).deferrals) == 2 })
		ti = e.waitState(id, asynq.TaskStateRetry)
		if ti.Retried != 0 {
			t.Errorf("after deferral 2: Retried %d, want 0", ti.Retried)
		}
		if ti.NextProcessAt.Before(p2.Until) {
			t.Errorf("after deferral 2: NextProcessAt %s, before the deadline %s", ti.NextProcessAt, p2.Until)
		}
		if _, err := e.client.Enqueue(NewTask(mwTaskType, nil, mwUPS, asynq.MaxRetry(0), asynq.TaskID(id)), asynq.Queue(e.queue)); !errors.Is(err, asynq.ErrTaskIDConflict) {
			t.Errorf("enqueue of %s while deferred again: err = %v, want ErrTaskIDConflict", id, err)
		}

		ti = e.waitState(id, asynq.TaskStateCompleted)
		if n := calls.of(id); n != 1 {
			t.Errorf("handler ran %d times, want exactly 1", n)
		}
		if d := len(rec.outcome(id).deferrals); d != 2 {
			t.Errorf("deferred %d times, want 2", d)
		}
		if ti.Retried != 0 {
			t.Errorf("completed with Retried %d, want 0: deferrals never spend a retry", ti.Retried)
		}
		if at := calls.startTimes(); len(at) == 1 && at[0].Before(p2.Until) {
			t.Errorf("handler ran at %s, before the deadline %s", at[0].Format(time.RFC3339Nano), p2.Until.Format(time.RFC3339Nano))
		}
	})
}

// The reserve keeps the user's budget for real failures: MaxRetry(0) runs
// once and is archived, MaxRetry(2) is archived after three runs.
func TestMiddlewareRealFailuresKeepTheUsersMaxRetry(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{Tuning: Tuning{MaxHold: -1}})
		calls := mwNewCalls()
		e.serve(g, func(ctx context.Context, task *asynq.Task) error {
			calls.enter(ctx)
			return errors.New("carrier API: HTTP 500")
		}, mwRetryDelay(g.RetryDelay(func(int, error, *asynq.Task) time.Duration { return 0 })))

		for _, tc := range []struct {
			maxRetry, runs int
		}{{0, 1}, {2, 3}} {
			id := e.enqueue(NewTask(mwTaskType, nil, mwUPS, asynq.MaxRetry(tc.maxRetry)))
			ti := e.waitState(id, asynq.TaskStateArchived)
			if n := calls.of(id); n != tc.runs {
				t.Errorf("MaxRetry(%d): handler ran %d times, want %d", tc.maxRetry, n, tc.runs)
			}
			if ti.Retried != tc.maxRetry || ti.LastErr != "carrier API: HTTP 500" {
				t.Errorf("MaxRetry(%d): archived with Retried %d, LastErr %q; want %d and the handler's error",
					tc.maxRetry, ti.Retried, ti.LastErr, tc.maxRetry)
			}
		}
	})
}

// Without the reserve (MaxRetry given to Client.Enqueue overrides
// NewTask's), a deferral on the last attempt would be archived: the
// middleware waits in-process instead, then runs the task once.
func TestMiddlewareLastAttemptWithoutReserveWaitsInProcess(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{Tuning: Tuning{MaxHold: -1, ReopenJitter: -1}})
		calls := mwNewCalls()
		rec := e.serve(g, func(ctx context.Context, task *asynq.Task) error {
			calls.enter(ctx)
			return nil
		})

		p := mwPause(t, g, mwUPS, time.Second)
		id := e.enqueue(NewTask(mwTaskType, nil, mwUPS), asynq.MaxRetry(0), asynq.Retention(time.Hour))
		ti := e.waitState(id, asynq.TaskStateCompleted)
		if ti.MaxRetry != 0 {
			t.Fatalf("MaxRetry = %d, want 0 (Enqueue's option overrides NewTask's reserve)", ti.MaxRetry)
		}
		if n := calls.of(id); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
		if o := rec.outcome(id); len(o.errs) != 0 {
			t.Errorf("the middleware returned %q, want nothing: a deferral here would be archived", o.errs)
		}
		if at := calls.startTimes(); len(at) == 1 && at[0].Before(p.Until) {
			t.Errorf("handler ran at %s, before the deadline %s", at[0].Format(time.RFC3339Nano), p.Until.Format(time.RFC3339Nano))
		}
		if arch, err := e.insp.ListArchivedTasks(e.queue); err != nil || len(arch) != 0 {
			t.Errorf("archived tasks: %d, %v; want none", len(arch), err)
		}
	})
}

// mwAPI is a provider that answers 200 and counts the requests it gets.
func mwAPI(t *testing.T) (url string, hits *atomic.Int64) {
	hits = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	return srv.URL, hits
}

// mwGet sends one GET through c with ctx.
func mwGet(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// mwTwoRequests is a handler that sends two requests through the gate's
// Transport, and pauses the scope between them on its first run (a peer's
// refusal arriving meanwhile): the second request is then deferred by the
// Transport, and the handler returns that *Deferral.
func mwTwoRequests(g *Gate, url string, runs *atomic.Int64) asynq.HandlerFunc {
	c := &http.Client{Transport: g.Transport(nil)}
	return func(ctx context.Context, task *asynq.Task) error {
		n := runs.Add(1)
		if err := mwGet(ctx, c, url); err != nil { // spends the middleware's admission
			return err
		}
		if n == 1 {
			if _, err := g.Pause(ctx, mwUPS, 2*time.Second); err != nil {
				return err
			}
		}
		return mwGet(ctx, c, url)
	}
}

// A Deferral that the Transport returns inside a handler does not spend a
// retry either: with NewTask's reserve the task is retried after the pause.
func TestMiddlewareTransportDeferralInsideHandlerIsRetried(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{Tuning: Tuning{MaxHold: -1, ReopenJitter: -1}})
		url, hits := mwAPI(t)
		var runs atomic.Int64
		rec := e.serve(g, mwTwoRequests(g, url, &runs))
		id := e.enqueue(NewTask(mwTaskType, nil, mwUPS, asynq.MaxRetry(0)), asynq.Retention(time.Hour))
		ti := e.waitState(id, asynq.TaskStateCompleted)
		o := rec.outcome(id)
		if ti.Retried != 0 || len(o.deferrals) != 1 || runs.Load() != 2 || hits.Load() != 3 {
			t.Errorf("Retried %d, deferrals %d, runs %d, requests %d; want 0, 1, 2, 3", ti.Retried, len(o.deferrals), runs.Load(), hits.Load())
		}
	})
}

// BUG(middleware/transport): without NewTask's reserve (MaxRetry(0) given to
// Client.Enqueue), the Middleware holds its own admission in-process on the
// last attempt, but a *Deferral returned by the Transport for a later
// request of the same handler reaches asynq, which archives the task
// (Retried ≥ MaxRetry is checked before IsFailure). Issue 2, behaviour 4: a
// deferral never turns into an archived task. Expected: the task completes
// (e.g. the Transport also holds in-process on a last attempt); today it is
// archived with the deferral's message as LastErr.
func TestMiddlewareTransportDeferralOnLastAttemptWithoutReserveIsNotArchived(t *testing.T) {
	t.Parallel()
	mwOnBackends(t, func(t *testing.T, e *mwEnv) {
		g := e.gate(Config{Tuning: Tuning{MaxHold: -1, ReopenJitter: -1}})
		url, _ := mwAPI(t)
		var runs atomic.Int64
		e.serve(g, mwTwoRequests(g, url, &runs))
		id := e.enqueue(NewTask(mwTaskType, nil, mwUPS), asynq.MaxRetry(0), asynq.Retention(time.Hour))
		var ti *asynq.TaskInfo
		e.waitFor("the task to complete or be archived", func() bool {
			ti = e.info(id)
			return ti.State == asynq.TaskStateCompleted || ti.State == asynq.TaskStateArchived
		})
		if ti.State == asynq.TaskStateArchived {
			t.Errorf("BUG: a deferral archived the task (Retried %d, MaxRetry %d, LastErr %q)", ti.Retried, ti.MaxRetry, ti.LastErr)
		}
	})
}

// When the gate's store does not answer, the task runs anyway (fail open,
// logged); with FailClosed it is deferred without spending a retry.
func TestMiddlewareStoreDown(t *testing.T) {
	t.Parallel()
	for _, failClosed := range []bool{false, true} {
		name := "FailOpen"
		if failClosed {
			name = "FailClosed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mwOnBackends(t, func(t *testing.T, e *mwEnv) {
				g := New(hangingStore(t), Config{
					Prefix:       e.b.prefix,
					Logger:       e.log.logger(),
					StoreTimeout: 100 * time.Millisecond,
					FailClosed:   failClosed,
					Tuning:       Tuning{MaxHold: -1},
				})
				calls := mwNewCalls()
				e.serve(g, func(ctx context.Context, task *asynq.Task) error {
					calls.enter(ctx)
					if string(task.Payload()) == "refuse" {
						return &Refusal{Hint: 15 * time.Second}
					}
					return nil
				})
				before := time.Now()
				id := e.enqueue(NewTask(mwTaskType, nil, mwUPS), asynq.Retention(time.Hour))
				if !failClosed {
					// A refusal that cannot be recorded: the refused task
					// still waits its own hint.
					refused := e.enqueue(NewTask(mwTaskType, []byte("refuse"), mwUPS))
					ti := e.waitState(refused, asynq.TaskStateRetry)
					after := time.Now()
					if ti.Retried != 1 || calls.of(refused) != 1 {
						t.Errorf("refused task: Retried %d after %d runs, want 1 and 1", ti.Retried, calls.of(refused))
					}
					mwBetween(t, "refused task's NextProcessAt (its own 15s hint)", ti.NextProcessAt,
						before.Add(15*time.Second).Truncate(time.Second), after.Add(16*time.Second))
					if log := e.log.String(); !strings.Contains(log, "could not record a refusal") {
						t.Errorf("want an ERROR line about the refusal that could not be recorded; log:\n%s", log)
					}
				}
				if !failClosed {
					ti := e.waitState(id, asynq.TaskStateCompleted)
					if n := calls.of(id); n != 1 || ti.Retried != 0 {
						t.Errorf("handler ran %d times, Retried %d; want 1 and 0", n, ti.Retried)
					}
					log := e.log.String()
					if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "fail open") ||
						!strings.Contains(log, mwUPS.String()) || !strings.Contains(log, "store timeout") {
						t.Errorf("want a WARN line naming the scope and the timeout; log:\n%s", log)
					}
					return
				}
				ti := e.waitState(id, asynq.TaskStateRetry)
				after := time.Now()
				if n := calls.total(); n != 0 || ti.Retried != 0 {
					t.Errorf("handler ran %d times, Retried %d; want 0 and 0", n, ti.Retried)
				}
				if !strings.Contains(ti.LastErr, "store unavailable") || !strings.Contains(ti.LastErr, mwUPS.String()) {
					t.Errorf("LastErr %q, want it to say the store is unavailable for %s", ti.LastErr, mwUPS)
				}
				mwBetween(t, "NextProcessAt (FailClosedDelay)", ti.NextProcessAt,
					before.Add(10*time.Second).Truncate(time.Second), after.Add(11*time.Second))
				if log := e.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "fail closed") {
					t.Errorf("want an ERROR line about failing closed; log:\n%s", log)
				}
			})
		})
	}
}

// Reopening after a pause, measured on a real asynq server: with a limit the
// deferred tasks come back at the limit's rate; without one they are spread
// by the reopening jitter instead of all waking at the deadline.
func TestMiddlewarePacedReopen(t *testing.T) {
	t.Parallel()
	const tasks = 20
	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		mwOnBackends(t, func(t *testing.T, e *mwEnv) {
			g := e.gate(Config{Limits: map[string][]Limit{"ups": {PerSecond(5, 1)}}, Tuning: Tuning{MaxHold: 2 * time.Second}})
			calls := mwNewCalls()
			e.serve(g, func(ctx context.Context, task *asynq.Task) error {
				calls.enter(ctx)
				return nil
			})
			p := mwPause(t, g, mwUPS, 2*time.Second)
			for range tasks {
				e.enqueue(NewTask(mwTaskType, nil, mwUPS))
			}
			e.waitFor("all tasks to complete", func() bool {
				qi, err := e.insp.GetQueueInfo(e.queue)
				return calls.total() >= tasks && err == nil && qi.Size == 0
			})
			starts := calls.startTimes()
			if len(starts) != tasks {
				t.Errorf("%d handler runs, want %d", len(starts), tasks)
			}
			slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
			if starts[0].Before(p.Until) {
				t.Errorf("first start %s before the deadline %s", starts[0].Format(time.RFC3339Nano), p.Until.Format(time.RFC3339Nano))
			}
			// The limit's slots: the burst's two at the deadline, then one
			// every 200 ms. A task starts at its slot or, on a busy
			// machine whose asynq hands it over late, after it: never
			// before. (Late tasks may start close together; the slots they
			// took were still one interval apart.)
			const interval, skew = 200 * time.Millisecond, 20 * time.Millisecond
			for k, at := range starts {
				if slot := p.Until.Add(time.Duration(max(k-1, 0)) * interval); at.Before(slot.Add(-skew)) {
					t.Errorf("start %d at %v after the deadline, before its slot at %v (5/s, burst 1); starts after the deadline: %v",
						k, at.Sub(p.Until), slot.Sub(p.Until), mwOffsets(starts, p.Until))
					break
				}
			}
			t.Logf("%s: starts after the deadline: %v", e.b.name, mwOffsets(starts, p.Until))
		})
	})
	t.Run("Jitter", func(t *testing.T) {
		t.Parallel()
		mwOnBackends(t, func(t *testing.T, e *mwEnv) {
			// A deterministic Rand: 0, 0.25, 0.5, 0.75, 0.999, 0, ... so
			// that some tasks must wait (almost) the whole window.
			var k atomic.Int64
			us := []float64{0, 0.25, 0.5, 0.75, 0.999}
			rnd := func() float64 { return us[int(k.Add(1)-1)%len(us)] }
			// No holds: every task is deferred through asynq, spread
			// within a tenth of the remaining pause after the deadline.
			g := e.gateWith(Config{Tuning: Tuning{MaxHold: -1, ReopenJitter: time.Second}}, hooks{rand: rnd})
			calls := mwNewCalls()
			rec := e.serve(g, func(ctx context.Context, task *asynq.Task) error {
				calls.enter(ctx)
				return nil
			})
			p := mwPause(t, g, mwUPS, 3*time.Second)
			var ids []string
			for range tasks {
				ids = append(ids, e.enqueue(NewTask(mwTaskType, nil, mwUPS)))
			}
			e.waitFor("all tasks to complete", func() bool {
				qi, err := e.insp.GetQueueInfo(e.queue)
				return calls.total() >= tasks && err == nil && qi.Size == 0
			})
			starts := calls.startTimes()
			if len(starts) != tasks {
				t.Errorf("%d handler runs, want %d", len(starts), tasks)
			}
			for _, s := range starts {
				if s.Before(p.Until) {
					t.Errorf("start %s before the deadline %s", s.Format(time.RFC3339Nano), p.Until.Format(time.RFC3339Nano))
				}
			}
			// Every deferral points within [deadline, deadline+300ms], and
			// they are spread, not all at the deadline.
			deferred, spread := 0, map[time.Time]bool{}
			for _, id := range ids {
				for _, d := range rec.outcome(id).deferrals {
					deferred++
					spread[d.RetryAt] = true
					mwBetween(t, "deferral's Until", d.RetryAt, p.Until, p.Until.Add(300*time.Millisecond))
				}
			}
			if deferred < tasks || len(spread) < 2 {
				t.Errorf("%d deferrals at %d distinct times; want every task deferred, spread", deferred, len(spread))
			}
			buckets := len(spread)
			t.Logf("%s: %d deferrals, %d buckets of 100ms; starts after the deadline: %v", e.b.name, deferred, buckets, mwOffsets(starts, p.Until))
		})
	})
}

// mwOffsets formats start times as offsets from the deadline.
func mwOffsets(starts []time.Time, from time.Time) []string {
	s := slices.Clone(starts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	out := make([]string, len(s))
	for i, t := range s {
		out[i] = fmt.Sprint(t.Sub(from).Round(time.Millisecond))
	}
	return out
}

// TestCostBeyondCapacityIsArchived: a task whose cost no limit can ever
// admit is archived at once, with ErrCost, instead of deferred forever.
func TestCostBeyondCapacityIsArchived(t *testing.T) {
	_, rdb := newMini(t)
	s := Scope{Provider: "acme", Account: "a"}
	for _, l := range []Limit{FixedWindow(3, time.Second), PerSecond(2, 2), SlidingWindow(5, time.Second)} {
		g := New(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"acme": {l}}, Cost: func(*asynq.Task) int { return 6 }})
		ran := false
		h := g.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran = true; return nil }))
		err := h.ProcessTask(context.Background(), NewTask("poll", nil, s))
		if !errors.Is(err, ErrCost) || !errors.Is(err, asynq.SkipRetry) || ran {
			t.Errorf("%v: ProcessTask = %v (handler ran %v); want archived with ErrCost", l, err, ran)
		}
		g.Close()
	}
}
