package quotagate

// Faults under load: the gate's Redis is killed and restarted, or hung
// (SIGSTOP) and resumed, in the middle of a run of real asynq servers. The
// gate's Redis is a private redis-server, apart from asynq's, so that asynq
// keeps working through the fault. Two fleets run side by side through the
// same fault, one failing open and one failing closed, each of two
// processes (two gates on two clients, two asynq servers of 10 workers).
//
// Asserted for both: every task runs exactly once, none is archived, no
// deferral spends a retry, the worst admission stays within 10× the store
// bound (logged), and after recovery a pause recorded through one gate is
// seen by the other. Fail open: tasks ran during the outage. Fail closed:
// tasks were deferred as "store unavailable", and none was admitted after
// the fleet saw the first such deferral and before Redis came back.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/internal/redistest"
)

const (
	faultTasks    = 300                   // per fleet, enqueued one every faultPace
	faultPace     = 10 * time.Millisecond // the load lasts faultTasks×faultPace = 3 s
	faultAt       = 500 * time.Millisecond
	faultOutage   = 2 * time.Second
	faultWorkers  = 10 // per asynq server; two servers per fleet
	faultHandler  = 20 * time.Millisecond
	faultBoundMul = 10 // the worst admission may take this many StoreTimeouts
)

func TestFaultUnderLoad(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"kill", "hang"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartPrivate(t) // the gates' Redis
			asynqRedis := redistest.Start(t) // asynq's
			fleets := []*faultFleet{newFaultFleet(t, fault, srv, asynqRedis, false), newFaultFleet(t, fault, srv, asynqRedis, true)}

			var wg sync.WaitGroup
			for _, f := range fleets {
				wg.Add(1)
				go func() { defer wg.Done(); f.load() }()
			}
			time.Sleep(faultAt)
			downAt := time.Now()
			switch fault {
			case "kill":
				srv.Kill(t)
				time.Sleep(faultOutage)
			case "hang":
				srv.Suspend(t)
				time.Sleep(faultOutage)
			}
			upAt := time.Now()
			switch fault {
			case "kill":
				srv.Restart(t)
			case "hang":
				srv.Resume(t)
			}
			wg.Wait()
			for _, f := range fleets {
				f.check(downAt, upAt)
			}
		})
	}
}

// faultFleet is one failure policy's fleet: a queue, two gates on two
// clients of the gates' Redis, and an asynq server behind each.
type faultFleet struct {
	t          *testing.T
	e          *mwEnv
	failClosed bool
	gates      [2]*Gate
	trips      [2]*roundTrips
	calls      *mwCalls

	mu       sync.Mutex
	ids      []string
	worst    time.Duration
	events   []faultEvent
	firstOut time.Time // when the first deferral as "store unavailable" was seen
	enqErr   error
}

// faultEvent is one admission: when it began, and when the handler started
// (zero when the task was deferred).
type faultEvent struct{ begin, start time.Time }

type faultBeginKey struct{}

func newFaultFleet(t *testing.T, fault string, srv *redistest.Server, asynqRedis *redistest.Server, failClosed bool) *faultFleet {
	name := "open"
	if failClosed {
		name = "closed"
	}
	f := &faultFleet{t: t, failClosed: failClosed, calls: mwNewCalls()}
	prefix := srv.Prefix(t) + ":" + name
	for i := range f.gates {
		f.trips[i] = new(roundTrips)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		rdb.AddHook(f.trips[i])
		t.Cleanup(func() { rdb.Close() })
		if i == 0 {
			f.e = mwNewEnv(t, &mwBackend{name: fault + ", fail " + name, addr: asynqRedis.Addr, rdb: rdb, prefix: prefix})
		}
		// OpenCache is long so that, after recovery, only an announcement
		// can tell the other gate of a pause.
		f.gates[i] = New(rdb, Config{Prefix: prefix, Logger: f.e.log.logger(), FailClosed: failClosed,
			Tuning: Tuning{FailClosedDelay: time.Second, OpenCache: time.Minute}})
		t.Cleanup(func() { f.gates[i].Close() })
		f.serve(f.gates[i])
	}
	return f
}

// serve starts an asynq server with the gate registered as the README says,
// and a middleware around it that times every admission.
func (f *faultFleet) serve(g *Gate) {
	mux := asynq.NewServeMux()
	mux.Use(f.timing, g.Middleware())
	mux.HandleFunc(mwTaskType, func(ctx context.Context, t *asynq.Task) error {
		f.admitted(ctx)
		f.calls.enter(ctx)
		time.Sleep(faultHandler)
		return nil
	})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: f.e.b.addr}, asynq.Config{
		Concurrency:              faultWorkers,
		Queues:                   map[string]int{f.e.queue: 1},
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

// faultAdmission is one admission: when it began, and whether the handler
// ran. timing puts it in the task's context, the handler marks it.
type faultAdmission struct {
	begin time.Time
	ran   bool
}

// timing runs outside the gate's middleware: it notes when each admission
// began and, for a task the gate deferred, how long that took and why.
func (f *faultFleet) timing(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		a := &faultAdmission{begin: time.Now()}
		err := next.ProcessTask(context.WithValue(ctx, faultBeginKey{}, a), t)
		if a.ran {
			return err
		}
		end := time.Now()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.worst = max(f.worst, end.Sub(a.begin))
		f.events = append(f.events, faultEvent{begin: a.begin})
		var d *Deferral
		if errors.As(err, &d) && d.Reason == ReasonStoreDown && f.firstOut.IsZero() {
			f.firstOut = end
		}
		return err
	})
}

// admitted records, at the handler's start, an admission that let the task
// run.
func (f *faultFleet) admitted(ctx context.Context) {
	start := time.Now()
	a := ctx.Value(faultBeginKey{}).(*faultAdmission)
	a.ran = true
	f.mu.Lock()
	defer f.mu.Unlock()
	f.worst = max(f.worst, start.Sub(a.begin))
	f.events = append(f.events, faultEvent{begin: a.begin, start: start})
}

// load enqueues the fleet's tasks on two scopes, one every faultPace.
func (f *faultFleet) load() {
	for i := range faultTasks {
		s := []Scope{mwUPS, mwFedEx}[i%2]
		info, err := f.e.client.Enqueue(NewTask(mwTaskType, nil, s), asynq.Queue(f.e.queue), asynq.Retention(time.Hour))
		f.mu.Lock()
		if err != nil {
			f.enqErr = err
		} else {
			f.ids = append(f.ids, info.ID)
		}
		f.mu.Unlock()
		time.Sleep(faultPace)
	}
}

// check waits until every task has completed, then asserts the fleet's
// outcome; the outage lasted from downAt to upAt.
func (f *faultFleet) check(downAt, upAt time.Time) {
	t, e := f.t, f.e
	t.Helper()
	f.mu.Lock()
	ids, enqErr := f.ids, f.enqErr
	f.mu.Unlock()
	if enqErr != nil || len(ids) != faultTasks {
		t.Fatalf("%s: enqueued %d tasks of %d: %v", e.b.name, len(ids), faultTasks, enqErr)
	}
	e.waitFor(e.b.name+": every task completed", func() bool {
		qi, err := e.insp.GetQueueInfo(e.queue)
		return err == nil && qi.Completed+qi.Archived == faultTasks
	})
	qi, err := e.insp.GetQueueInfo(e.queue)
	if err != nil {
		t.Fatal(err)
	}
	if qi.Archived != 0 || qi.Completed != faultTasks {
		t.Errorf("%s: %d completed, %d archived; want %d and 0", e.b.name, qi.Completed, qi.Archived, faultTasks)
	}
	done, err := e.insp.ListCompletedTasks(e.queue, asynq.PageSize(faultTasks))
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range done {
		if ti.Retried != 0 {
			t.Errorf("%s: task %s completed after spending %d retries, want 0 (%s)", e.b.name, ti.ID, ti.Retried, ti.LastErr)
		}
	}
	for _, id := range ids {
		if n := f.calls.of(id); n != 1 {
			t.Errorf("%s: task %s ran %d times, want once", e.b.name, id, n)
		}
	}

	f.mu.Lock()
	worst, events, firstOut := f.worst, f.events, f.firstOut
	f.mu.Unlock()
	bound := f.gates[0].cfg.StoreTimeout
	ranDuring, deferred, trusted := 0, 0, 0
	for _, ev := range events {
		if ev.start.IsZero() {
			deferred++
			continue
		}
		if ev.start.After(downAt) && ev.start.Before(upAt) {
			ranDuring++
			if !firstOut.IsZero() && ev.begin.After(firstOut) {
				trusted++ // admitted after the fleet had seen the store fail
			}
		}
	}
	t.Logf("%s: worst admission %v (store bound %v); %d admissions, %d deferred, %d ran during the %v outage",
		e.b.name, worst.Round(time.Millisecond), bound, len(events), deferred, ranDuring, upAt.Sub(downAt).Round(time.Millisecond))
	if worst >= faultBoundMul*bound {
		t.Errorf("%s: the worst admission took %v, want under %d× the store bound %v", e.b.name, worst, faultBoundMul, bound)
	}
	if !f.failClosed && ranDuring == 0 {
		t.Errorf("%s: no task ran during the outage: the gate did not fail open", e.b.name)
	}
	if f.failClosed {
		if firstOut.IsZero() {
			t.Errorf("%s: no task was deferred as store unavailable: the gate did not fail closed", e.b.name)
		}
		if trusted != 0 {
			t.Errorf("%s: %d tasks ran during the outage although admitted after the first store-down deferral", e.b.name, trusted)
		}
	}

	// After recovery, a pause recorded through one gate reaches the other
	// (whose cached entry only an announcement can end: OpenCache is a
	// minute).
	ctx := context.Background()
	s := Scope{Provider: "after-recovery", Account: "acct"}
	for i, g := range f.gates {
		eventually(t, fmt.Sprintf("%s: gate %d admits from its cache again", e.b.name, i), func() bool {
			before := f.trips[i].Load()
			if err := g.admit(ctx, s, 1, false); err != nil {
				t.Fatalf("%s: gate %d after recovery: %v", e.b.name, i, err)
			}
			return f.trips[i].Load() == before
		})
	}
	if _, err := f.gates[0].Pause(ctx, s, time.Minute); err != nil {
		t.Fatalf("%s: Pause after recovery: %v", e.b.name, err)
	}
	start := time.Now()
	for i, g := range f.gates {
		eventually(t, fmt.Sprintf("%s: gate %d sees the pause", e.b.name, i), func() bool {
			var d *Deferral
			return errors.As(g.admit(ctx, s, 1, false), &d) && d.Reason == ReasonPaused
		})
	}
	t.Logf("%s: a pause after recovery seen by both gates within %v", e.b.name, time.Since(start).Round(time.Millisecond))
}
