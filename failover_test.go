package quotagate

// Failover: the gate's Redis loses its master, on a Redis Cluster with a
// replica per master and on a Sentinel-managed primary with a replica
// (internal/redistest), killed (SIGKILL, the replica promoted after the
// failure is detected) or failed over gracefully (CLUSTER FAILOVER,
// SENTINEL FAILOVER), in the middle of a run of real asynq servers. The
// tests use the package's public API only (New, Config, Middleware,
// RetryDelay, IsFailure, NewTask, Pause, State, Resume, Refusal, Deferral),
// so that they hold whatever the admission core looks like inside (the
// durable write alone is internal/store's durable_test.go).
//
// asynq's own Redis is the shared redis-server, apart from the gate's, as
// in fault_test.go: a lost task would then be the gate's doing, not a lost
// write of asynq's queue (asynq on the failing Redis would lose what its
// master had not replicated, whatever the gate does).
//
// Asserted through every failover: every task completes, exactly once per
// attempt it needed (its first attempt, plus one per refusal of its own);
// none is archived; asynq counts as retries the refusals only (no deferral
// spends one); every admission ends within the store bound plus slack; the
// gates find the new master without a restart: a pause recorded after the
// failover is in State, and the other gate, whose cache of the scope only
// an announcement can end (OpenCache is a minute), defers the scope's
// tasks. Measured and logged: the pauses acknowledged just before the
// failover that the promoted replica does not have, how long after the
// failover began the gates' store calls failed, and when the gate answered
// again.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

const (
	foTasks    = 300                   // enqueued one every foPace over foScopes scopes
	foPace     = 12 * time.Millisecond // the load lasts foTasks×foPace = 3.6 s
	foScopes   = 6
	foAt       = time.Second // when the failover begins, after the load began
	foWorkers  = 10          // per asynq server; two servers, one per gate
	foHandler  = 20 * time.Millisecond
	foHint     = time.Second // the refusals' hint
	foRefuse   = 7           // every foRefuse-th task (of every scope: 7 and foScopes are coprime) is refused on its first attempt
	foAcked    = 20          // pauses recorded just before the failover
	foWait     = 60 * time.Second
	foTaskType = "failover:poll"
	// foStoreTimeout is the gates' Config.StoreTimeout: its default.
	foStoreTimeout = 250 * time.Millisecond
	// foSlack is added to the store bound for the worst admission: the
	// store cuts every call at StoreTimeout, and an admission makes one;
	// two seconds cover the scheduling of 20 workers and a dozen
	// redis-servers on two shared cores under -race. A gate that waited
	// for the dead master (go-redis's dial timeout is 5 s, a ClusterClient
	// keeps its layout up to a minute) would exceed it.
	foSlack = 2 * time.Second
)

// foTarget is a replicated Redis a failover test runs the gates on.
type foTarget struct {
	prefix string
	// client returns a new client of the gates' Redis, closed by cleanup.
	client func(t *testing.T) redis.UniversalClient
	// masterOf returns the master that holds the scope's keys now.
	masterOf func(t *testing.T, s Scope) string
	// fail fails the master over and returns the new master; it returns
	// once the replica is promoted and the nodes agree.
	fail func(t *testing.T, master string) string
}

func clusterTarget(t *testing.T, kill bool) foTarget {
	c := redistest.StartReplicatedCluster(t)
	probe := c.Client(t)
	return foTarget{
		prefix: c.Prefix(t),
		client: func(t *testing.T) redis.UniversalClient { return c.Client(t) },
		masterOf: func(t *testing.T, s Scope) string {
			// The scope's keys share the hash tag {provider:account}
			// (DESIGN.md, schema.Keys): the tag alone routes to their slot.
			m, err := probe.MasterForKey(context.Background(), "{"+s.Provider+":"+s.Account+"}")
			if err != nil {
				t.Fatal(err)
			}
			return m.Options().Addr
		},
		fail: func(t *testing.T, master string) string {
			if kill {
				return c.KillMaster(t, master)
			}
			return c.Failover(t, master)
		},
	}
}

func sentinelTarget(t *testing.T, kill bool) foTarget {
	s := redistest.StartSentinel(t)
	return foTarget{
		prefix:   s.Prefix(t),
		client:   func(t *testing.T) redis.UniversalClient { return s.Client(t) },
		masterOf: func(t *testing.T, _ Scope) string { return s.Master(t) },
		fail: func(t *testing.T, _ string) string {
			if kill {
				return s.KillMaster(t)
			}
			return s.Failover(t)
		},
	}
}

func TestFailoverClusterKill(t *testing.T) {
	t.Parallel()
	runFailover(t, clusterTarget(t, true), true)
}

func TestFailoverClusterGraceful(t *testing.T) {
	t.Parallel()
	runFailover(t, clusterTarget(t, false), false)
}

func TestFailoverSentinelKill(t *testing.T) {
	t.Parallel()
	runFailover(t, sentinelTarget(t, true), true)
}

func TestFailoverSentinelGraceful(t *testing.T) {
	t.Parallel()
	runFailover(t, sentinelTarget(t, false), false)
}

// foGate is one process of the fleet: a gate on a client of its own, and
// an asynq server of foWorkers behind it.
type foGate struct {
	g      *Gate
	failed *foLog // its store failures, from its Logger
}

// foFleet is the test's asynq world and what its handlers saw.
type foFleet struct {
	t      *testing.T
	queues [2]string // one per gate: gate i's asynq server serves queues[i]
	client *asynq.Client
	insp   *asynq.Inspector
	addr   string  // asynq's Redis
	scopes []Scope // the load's
	gates  [2]foGate

	failing atomic.Bool // the failover is under way: handlers refuse

	mu         sync.Mutex
	queue      map[string]string // the queue of each task ID
	calls      map[string]int    // handler calls per task ID
	refusals   map[string]int    // refusals returned per task ID
	ranBy      map[string][2]int // per task ID, handler calls through each gate
	deferredBy map[string][2]int // per task ID, deferrals as paused by each gate
	worst      time.Duration     // the longest admission
	storeDown  []time.Time       // deferrals as store unavailable (fail closed)
	refusedAt  []time.Time       // when each model.Refusal was returned
}

func runFailover(t *testing.T, target foTarget, kill bool) {
	asynqRedis := redistest.Start(t)
	f := &foFleet{
		t:          t,
		addr:       asynqRedis.Addr,
		client:     asynq.NewClient(asynq.RedisClientOpt{Addr: asynqRedis.Addr}),
		insp:       asynq.NewInspector(asynq.RedisClientOpt{Addr: asynqRedis.Addr}),
		queue:      map[string]string{},
		calls:      map[string]int{},
		refusals:   map[string]int{},
		ranBy:      map[string][2]int{},
		deferredBy: map[string][2]int{},
	}
	t.Cleanup(func() { f.client.Close(); f.insp.Close() })
	n := strconv.FormatUint(mwQueueSeq.Add(1), 10)
	for i := range f.queues {
		f.queues[i] = "qgfo-" + n + "-" + strconv.Itoa(i) + "-" + t.Name()
	}
	// Gate 0 fails open (the default), gate 1 closed: both policies go
	// through the same failover. OpenCache is a minute so that, after the
	// failover, only an announcement can tell a gate of a peer's pause;
	// MaxHold is off so that an admission's time is the store's.
	// The load's providers have a configured limit far above the load: a
	// scope with a configured limit learns none from its refusals, and the
	// learning is not what these tests are about (in this load, with every
	// task refused while the failover lasts, a learned limit starves its
	// scope for long after, failover or not).
	limits := map[string][]Limit{}
	for i := range foScopes {
		limits["p"+strconv.Itoa(i)] = []Limit{PerSecond(10_000, 10_000)}
	}
	for i := range f.gates {
		f.gates[i].failed = new(foLog)
		cfg := Config{Prefix: target.prefix, FailClosed: i == 1, StoreTimeout: foStoreTimeout, Limits: limits, Logger: slog.New(f.gates[i].failed),
			Tuning: Tuning{MaxHold: -1, OpenCache: time.Minute, FailClosedDelay: time.Second}}
		f.gates[i].g = New(target.client(t), cfg)
		t.Cleanup(func() { f.gates[i].g.Close() })
		f.serve(i)
	}
	ctx := context.Background()
	scopes := make([]Scope, foScopes)
	for i := range scopes {
		scopes[i] = Scope{Provider: "p" + strconv.Itoa(i), Account: "acct"}
	}
	f.scopes = scopes
	victim := target.masterOf(t, scopes[0])

	// The load: foTasks tasks over the scopes, every foRefuse-th refused
	// on its first attempt, and every task whose first attempt runs
	// during the failover.
	var ids []string
	loadDone := make(chan error, 1)
	var idsMu sync.Mutex
	go func() {
		for i := range foTasks {
			payload := []byte("ok")
			if i%foRefuse == 0 {
				payload = []byte("refuse")
			}
			id, err := f.enqueue(i/foScopes, payload, scopes[i%foScopes])
			if err != nil {
				loadDone <- err
				return
			}
			idsMu.Lock()
			ids = append(ids, id)
			idsMu.Unlock()
			time.Sleep(foPace)
		}
		loadDone <- nil
	}()
	time.Sleep(foAt)

	// Pauses acknowledged just before the failover, on scopes of the
	// victim: how many does the new master have?
	var acked []Pause
	for i := 0; len(acked) < foAcked; i++ {
		if i == 2000 {
			t.Fatalf("2000 scopes, %d of them on %s", len(acked), victim)
		}
		s := Scope{Provider: "acked", Account: strconv.Itoa(i)}
		if target.masterOf(t, s) != victim {
			continue
		}
		p, err := f.gates[0].g.Pause(ctx, s, time.Minute)
		if err != nil || p.Until.IsZero() {
			t.Fatalf("Pause(%v) before the failover = %v, %v", s, p, err)
		}
		acked = append(acked, p)
	}

	// The gate answers again: poll a State from the failover's start.
	probe := Scope{Provider: "probe", Account: "acct"}
	downAt := time.Now()
	f.failing.Store(true)
	newMaster := target.fail(t, victim)
	promotedAt := time.Now()
	f.failing.Store(false)
	var answeredAt time.Time
	eventuallyWithin(t, foWait, "the gate answers after the failover", func() bool {
		_, err := f.gates[0].g.State(ctx, probe)
		answeredAt = time.Now()
		return err == nil
	})
	t.Logf("failover of %s to %s: promoted %v after it began; the gate answered %v after that",
		victim, newMaster, promotedAt.Sub(downAt).Round(time.Millisecond), answeredAt.Sub(promotedAt).Round(time.Millisecond))

	lost, shortened := 0, 0
	for _, p := range acked {
		st, err := f.gates[0].g.State(ctx, p.Scope)
		if err != nil {
			t.Fatalf("State(%v) after the failover: %v", p.Scope, err)
		}
		switch {
		case st.Until.IsZero():
			lost++
		case st.Until.Before(p.Until):
			shortened++
		}
	}
	t.Logf("pauses acknowledged just before the failover: %d, lost on the new master: %d, shortened: %d", len(acked), lost, shortened)
	if !kill && lost+shortened != 0 {
		// A graceful failover waits for the replica to catch up (CLUSTER
		// FAILOVER; the Sentinel promotes a replica that was in sync and
		// was not written to since).
		t.Errorf("a graceful failover lost %d and shortened %d of %d acknowledged pauses", lost, shortened, len(acked))
	}

	if err := <-loadDone; err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	f.waitCompleted(ids)
	f.checkTasks(ids, kill, downAt, promotedAt)

	// After the failover a pause recorded through gate 0 is in force: in
	// State, and gate 1 (whose cache of the scope is warm) hears it on the
	// feed and defers the scope's tasks, as gate 0 does.
	after := Scope{Provider: "after", Account: "acct"}
	f.warm(after)
	p, err := f.gates[0].g.Pause(ctx, after, time.Minute)
	if err != nil {
		t.Fatalf("Pause after the failover: %v", err)
	}
	for i, gt := range f.gates {
		st, err := gt.g.State(ctx, after)
		if err != nil || !st.Until.Equal(p.Until) || st.Remaining <= 0 {
			t.Errorf("gate %d: State after the failover's pause = %v, %v; want until %v", i, st, err, p.Until)
		}
	}
	for i, gt := range f.gates {
		k := scopeKeys(target.prefix, after).Pause
		eventuallyWithin(t, foWait, fmt.Sprintf("gate %d heard the pause", i), func() bool { return !gt.g.admitsUncached(k) })
	}
	f.checkDeferred(after)

	for i, gt := range f.gates {
		first, last, n := gt.failed.span()
		if n == 0 {
			t.Logf("gate %d: no store failure logged", i)
			continue
		}
		t.Logf("gate %d (fail closed %v): %d store failures logged, from %v to %v after the failover began",
			i, i == 1, n, first.Sub(downAt).Round(time.Millisecond), last.Sub(downAt).Round(time.Millisecond))
	}
}

// enqueue enqueues the i-th task of a batch, of scope s, on the queue of
// gate i%2 (so that both gates take their share, whatever asynq's servers
// fetch), and returns its ID.
func (f *foFleet) enqueue(i int, payload []byte, s Scope) (string, error) {
	q := f.queues[i%len(f.queues)]
	info, err := f.client.Enqueue(NewTask(foTaskType, payload, s), asynq.Queue(q), asynq.Retention(time.Hour))
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	f.queue[info.ID] = q
	f.mu.Unlock()
	return info.ID, nil
}

func (f *foFleet) queueOf(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queue[id]
}

// queueInfo sums the counts of the fleet's queues.
func (f *foFleet) queueInfo() (*asynq.QueueInfo, error) {
	var sum asynq.QueueInfo
	for _, q := range f.queues {
		qi, err := f.insp.GetQueueInfo(q)
		if err != nil {
			return nil, err
		}
		sum.Completed += qi.Completed
		sum.Archived += qi.Archived
		sum.Pending += qi.Pending
		sum.Active += qi.Active
		sum.Scheduled += qi.Scheduled
		sum.Retry += qi.Retry
	}
	return &sum, nil
}

// serve starts the asynq server of gate i: the gate registered as the
// README says, inside a middleware that times every admission.
func (f *foFleet) serve(i int) {
	g := f.gates[i].g
	mux := asynq.NewServeMux()
	mux.Use(f.timing(i), g.Middleware())
	mux.HandleFunc(foTaskType, func(ctx context.Context, t *asynq.Task) error {
		a, ok := ctx.Value(foBeginKey{}).(*foAdmission)
		if !ok {
			return errors.New("the handler ran outside the timing middleware")
		}
		a.ran = time.Now()
		id, _ := asynq.GetTaskID(ctx)
		f.mu.Lock()
		f.worst = max(f.worst, a.ran.Sub(a.begin))
		f.calls[id]++
		by := f.ranBy[id]
		by[i]++
		f.ranBy[id] = by
		refuse := f.refusals[id] == 0 && (string(t.Payload()) == "refuse" || f.failing.Load())
		if refuse {
			f.refusals[id]++
			f.refusedAt = append(f.refusedAt, a.ran)
		}
		f.mu.Unlock()
		if refuse {
			return &Refusal{Hint: foHint}
		}
		time.Sleep(foHandler)
		return nil
	})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: f.addr}, asynq.Config{
		Concurrency:              foWorkers,
		Queues:                   map[string]int{f.queues[i]: 1},
		IsFailure:                IsFailure,
		RetryDelayFunc:           g.RetryDelay(nil),
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        50 * time.Millisecond,
		ShutdownTimeout:          3 * time.Second,
		LogLevel:                 asynq.FatalLevel,
	})
	if err := srv.Start(mux); err != nil {
		f.t.Fatalf("asynq server: %v", err)
	}
	f.t.Cleanup(srv.Shutdown)
}

type foBeginKey struct{}

// foAdmission is one admission: when it began, and when the handler ran
// (zero when the gate deferred the task).
type foAdmission struct{ begin, ran time.Time }

// timing runs outside gate i's middleware: it notes when each admission
// began and, for a task the gate deferred, how long that took and why.
func (f *foFleet) timing(i int) asynq.MiddlewareFunc {
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			a := &foAdmission{begin: time.Now()}
			err := next.ProcessTask(context.WithValue(ctx, foBeginKey{}, a), t)
			if !a.ran.IsZero() {
				return err
			}
			end := time.Now()
			id, _ := asynq.GetTaskID(ctx)
			f.mu.Lock()
			defer f.mu.Unlock()
			f.worst = max(f.worst, end.Sub(a.begin))
			var d *Deferral
			if errors.As(err, &d) {
				switch d.Reason {
				case ReasonStoreDown:
					f.storeDown = append(f.storeDown, end)
				case ReasonPaused:
					by := f.deferredBy[id]
					by[i]++
					f.deferredBy[id] = by
				}
			}
			return err
		})
	}
}

// waitCompleted waits until every task of ids has completed (or been
// archived: checkTasks then fails the test).
func (f *foFleet) waitCompleted(ids []string) {
	f.t.Helper()
	var qi *asynq.QueueInfo
	var err error
	for end := time.Now().Add(foWait); ; time.Sleep(50 * time.Millisecond) {
		if qi, err = f.queueInfo(); err == nil && qi.Completed+qi.Archived >= len(ids) {
			return
		}
		if time.Now().After(end) {
			break
		}
	}
	if err != nil {
		f.t.Fatalf("after %v: GetQueueInfo: %v", foWait, err)
	}
	waiting, _ := f.insp.ListRetryTasks(f.queues[0], asynq.PageSize(5))
	var why []string
	for _, ti := range waiting {
		why = append(why, fmt.Sprintf("%s (retried %d, next %v): %s", ti.ID, ti.Retried, time.Until(ti.NextProcessAt).Round(time.Second), ti.LastErr))
	}
	for _, sc := range f.scopes {
		st, err := f.gates[0].g.State(context.Background(), sc)
		f.t.Logf("State(%v) = %v; learned %+v, limit backlog %v, budget %+v; %v", sc, st, st.Learned, st.LimitBacklog, st.Budget, err)
	}
	f.t.Fatalf("after %v, of %d tasks: %d completed, %d archived, %d pending, %d active, %d scheduled, %d retry; waiting: %q",
		foWait, len(ids), qi.Completed, qi.Archived, qi.Pending, qi.Active, qi.Scheduled, qi.Retry, why)
}

// checkTasks asserts the outcome of the load: every task completed, none
// archived, each ran once plus once per refusal, asynq counted only the
// refusals as retries, and every admission ended within the store bound
// plus foSlack.
func (f *foFleet) checkTasks(ids []string, kill bool, downAt, promotedAt time.Time) {
	t := f.t
	t.Helper()
	qi, err := f.queueInfo()
	if err != nil {
		t.Fatal(err)
	}
	if qi.Archived != 0 || qi.Completed != len(ids) || len(ids) != foTasks {
		t.Errorf("%d tasks enqueued of %d: %d completed, %d archived; want all completed", len(ids), foTasks, qi.Completed, qi.Archived)
	}
	var done []*asynq.TaskInfo
	for _, q := range f.queues {
		d, err := f.insp.ListCompletedTasks(q, asynq.PageSize(2*foTasks))
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, d...)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	refused := 0
	for _, ti := range done {
		if ti.Retried != f.refusals[ti.ID] {
			t.Errorf("task %s completed after %d retries, refused %d times: a deferral spent a retry (%s)", ti.ID, ti.Retried, f.refusals[ti.ID], ti.LastErr)
		}
		refused += f.refusals[ti.ID]
	}
	for _, id := range ids {
		if n, want := f.calls[id], f.refusals[id]+1; n != want {
			t.Errorf("task %s ran %d times, want %d (once, and once more per refusal)", id, n, want)
		}
	}
	during := 0
	for _, at := range f.refusedAt {
		if !at.Before(downAt) && !at.After(promotedAt) {
			during++
		}
	}
	bound := foStoreTimeout
	t.Logf("%d tasks, %d refusals (%d during the failover), %d deferrals as store unavailable; worst admission %v (store bound %v)",
		len(ids), refused, during, len(f.storeDown), f.worst.Round(time.Millisecond), bound)
	if kill && during == 0 {
		t.Error("no refusal arrived during the failover: the test did not test it")
	}
	if f.worst > bound+foSlack {
		t.Errorf("the worst admission took %v, want within the store bound %v + %v", f.worst, bound, foSlack)
	}
	if len(f.storeDown) > 0 {
		t.Logf("fail closed: deferred as store unavailable from %v to %v after the failover began",
			f.storeDown[0].Sub(downAt).Round(time.Millisecond), f.storeDown[len(f.storeDown)-1].Sub(downAt).Round(time.Millisecond))
	}
}

// warm runs tasks of s until each gate has admitted one: then each holds
// the scope in its open cache (for OpenCache, a minute).
func (f *foFleet) warm(s Scope) {
	f.t.Helper()
	for round := 0; ; round++ {
		if round == 5 {
			f.t.Fatalf("five rounds of 20 tasks of %v never ran through both gates", s)
		}
		var ids []string
		for i := range 20 {
			id, err := f.enqueue(i, []byte("ok"), s)
			if err != nil {
				f.t.Fatal(err)
			}
			ids = append(ids, id)
		}
		var both [2]bool
		eventuallyWithin(f.t, foWait, "the warming tasks ran", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			both = [2]bool{}
			for _, id := range ids {
				if f.calls[id] == 0 {
					return false
				}
				by := f.ranBy[id]
				both[0], both[1] = both[0] || by[0] > 0, both[1] || by[1] > 0
			}
			return true
		})
		if both[0] && both[1] {
			return
		}
	}
}

// checkDeferred enqueues tasks of the paused scope s: none may run while it
// is paused, and each gate must defer some (with a warm cache only the
// pause's announcement tells a gate). Then it resumes s and has the
// deferred tasks run at once, and checks they complete.
func (f *foFleet) checkDeferred(s Scope) {
	t := f.t
	t.Helper()
	var ids []string
	for i := range 20 {
		id, err := f.enqueue(i, []byte("ok"), s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	eventuallyWithin(t, foWait, "every task of the paused scope deferred", func() bool {
		for _, id := range ids {
			ti, err := f.insp.GetTaskInfo(f.queueOf(id), id)
			if err != nil || ti.State != asynq.TaskStateRetry {
				return false
			}
		}
		return true
	})
	f.mu.Lock()
	var by [2]int
	for _, id := range ids {
		if f.calls[id] != 0 {
			t.Errorf("task %s of the paused scope %v ran", id, s)
		}
		d := f.deferredBy[id]
		by[0] += d[0]
		by[1] += d[1]
	}
	f.mu.Unlock()
	t.Logf("tasks of the scope paused after the failover: %d deferred by gate 0, %d by gate 1", by[0], by[1])
	if by[0] == 0 || by[1] == 0 {
		t.Errorf("deferrals by gate: %v; want both gates to defer the paused scope's tasks", by)
	}
	if err := f.gates[1].g.Resume(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := f.insp.RunTask(f.queueOf(id), id); err != nil {
			t.Fatalf("RunTask(%s): %v", id, err)
		}
	}
	eventuallyWithin(t, foWait, "the resumed scope's tasks completed", func() bool {
		for _, id := range ids {
			ti, err := f.insp.GetTaskInfo(f.queueOf(id), id)
			if err != nil || ti.State != asynq.TaskStateCompleted {
				return false
			}
		}
		return true
	})
}

// eventuallyWithin fails the test when cond does not hold within d
// (redistest.Eventually).
func eventuallyWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, d, what, cond)
}

// foLog is a slog.Handler that keeps the times of the records at Warn and
// above: a gate's store failures (and refusals it could not record).
type foLog struct {
	mu    sync.Mutex
	times []time.Time
}

func (l *foLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *foLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		l.mu.Lock()
		l.times = append(l.times, time.Now())
		l.mu.Unlock()
	}
	return nil
}
func (l *foLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *foLog) WithGroup(string) slog.Handler      { return l }

// span returns the first and last failure and how many there were.
func (l *foLog) span() (first, last time.Time, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.times) == 0 {
		return time.Time{}, time.Time{}, 0
	}
	ts := slices.Clone(l.times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	return ts[0], ts[len(ts)-1], len(ts)
}

// TestFailoverDurablePause: with Config.Durable, a pause the gate records
// is on the replica when Pause returns (read there at once); without any
// replica it is still in force on the master, and the gate says it is not
// durable.
func TestFailoverDurablePause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.StartSentinel(t)
	prefix := s.Prefix(t)
	// WAIT gets half of StoreTimeout: 2.5 s here, so that a replica slow
	// under a loaded machine still acknowledges (the default gives 125 ms,
	// and a pause WAIT gave up on is in force but logged, not failed).
	g := New(s.Client(t), Config{Prefix: prefix, Durable: 1, StoreTimeout: 5 * time.Second})
	defer g.Close()
	sc := Scope{Provider: "ups", Account: "durable"}
	p, err := g.Pause(ctx, sc, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	replica := s.NodeClient(t, s.Replica(t))
	keys, err := replica.Keys(ctx, prefix+"*:pause").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("pause keys on the replica right after Pause: %v, %v; want the one recorded", keys, err)
	}
	if v, err := replica.Get(ctx, keys[0]).Int64(); err != nil || v != p.Until.UnixMilli() {
		t.Errorf("replica holds %d, %v; want the deadline %d", v, err, p.Until.UnixMilli())
	}

	single := redistest.Start(t)
	var logs testLogBuffer
	lone := New(single.Client(t), Config{Prefix: single.Prefix(t), Durable: 1, Logger: logs.logger()})
	defer lone.Close()
	if _, err := lone.Pause(ctx, sc, time.Minute); err != nil {
		t.Fatalf("Pause with no replica: %v; want the pause in force", err)
	}
	if st, err := lone.State(ctx, sc); err != nil || st.Until.IsZero() {
		t.Errorf("State = %v, %v; want paused", st, err)
	}
	if !strings.Contains(logs.String(), "fewer replicas") {
		t.Errorf("no warning that the pause is not durable:\n%s", logs.String())
	}
}
