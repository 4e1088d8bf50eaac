package quotagate

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/store"
)

// The admission decision. The Middleware and the Transport ask Redis one
// question per task (model.AdmitScript, internal/store) and hand its answer to decide,
// which says what to do without I/O or a clock: run now (perhaps after a
// slot reserved a moment ahead), hold the worker in-process and ask again,
// or defer the task through asynq. The loop that calls Redis and sleeps is
// Gate.admit (middleware.go).

// act is what the gate does with a task.
type act int

const (
	// run: the task may spend capacity after verdict.wait (a slot of the
	// limit reserved up to MaxHold ahead; 0 for most).
	run act = iota
	// hold: wait verdict.wait in-process, then ask again. Only a task on a
	// last attempt without NewTask's reserve (a deferral would be archived)
	// holds for any wait.
	hold
	// holdPause: as hold, for a short pause, if one of the scope's
	// MaxHolders places is free; otherwise defer with verdict.deferral.
	holdPause
	// deferTask: return verdict.deferral; asynq retries the task later.
	deferTask
)

// policy is what the decision needs from the configuration and the task.
type policy struct {
	maxHold    time.Duration // Tuning.MaxHold
	jitter     time.Duration // Tuning.ReopenJitter
	maxHolders int           // Tuning.MaxHolders
	mustHold   bool          // a deferral would be archived (attempt.last)
	// interactive: the task is Interactive; it holds for any limit's slot
	// within maxHold and one tick instead of going through asynq, whose
	// whole-second retries would add a second to a wait somebody sees
	interactive bool
}

// asynqTick is the granularity of asynq's retry times: whole seconds.
const asynqTick = time.Second

// admission is the decision of model.AdmitScript, with Redis TIME, as
// the admission loop acts on it (admissionOf).
type admission struct {
	code       int64         // admitted, paused or limited
	reason     model.Reason  // why not admitted at once
	wait       time.Duration // see decision
	until      time.Time     // the deadline in force (paused), zero otherwise
	now        time.Time     // Redis TIME of the decision
	reopen     int64         // requests the scope can use when it reopens, 0 unknown
	cacheable  bool          // only a pause can stop the scope (see local.OpenCache)
	limited    bool          // limits, configured or learned, apply
	probe      bool          // a probe: its response's budget is awaited
	opens      int64         // a learned window's probe: its instant, to answer (0 not)
	seq        int64         // sequence number among the admissions that spent the budget (0 unknown)
	spread     bool          // the line spreads deferred tasks (a GCRA limit): wake at the slot
	unreserved bool          // limited, the instant not reserved: hold until it, ask again (see decision)
	byOperator bool          // the pause was set by Gate.Pause

	// The reply's instants as the model has them (Unix µs, the deadline in
	// ms), for the differential test.
	nowMicros     int64
	untilDeadline int64
}

// admissionOf is the store's answer a as the admission loop acts on it.
func admissionOf(a store.Admission) admission {
	d := a.Decision
	r := admission{code: d.Code, reason: d.Reason, wait: time.Duration(d.Wait) * time.Microsecond,
		now: time.UnixMicro(a.Now), reopen: d.Reopen, cacheable: d.Cache, limited: d.Limited,
		probe: d.Probe, opens: d.Opens, seq: d.Seq, byOperator: d.ByOp, spread: d.Spread, unreserved: d.Unreserved,
		nowMicros: a.Now, untilDeadline: d.Until}
	if d.Until != 0 {
		r.until = time.UnixMilli(d.Until)
	}
	return r
}

// admitRequest is the store's request for an admission of cost units
// under the configured limits ls, reserving a slot up to hold ahead.
func admitRequest(ls []Limit, cost int, hold time.Duration) store.AdmitRequest {
	return store.AdmitRequest{Limits: specs(ls), Cost: cost, Hold: hold, Answer: answerTimeout(hold)}
}

// answerTimeout is how long the peers of a learned window's probe wait for
// its answer: as long as a worker may hold (MaxHold and one asynq tick); a
// task slower than that to answer leaves the window open to the others.
func answerTimeout(hold time.Duration) time.Duration { return hold + asynqTick }

// verdict is the outcome of decide.
type verdict struct {
	act      act
	wait     time.Duration
	holders  int      // holdPause: how many workers of the scope may hold
	deferral Deferral // for deferTask, and holdPause without a free place
}

// decide turns the answer a of the admission script into a verdict. u is a
// uniform random value in [0, 1) for the reopening jitter.
//
// Rules, in order:
//  1. admitted: run after a.wait.
//  2. a last attempt without reserve: hold for the wait, whatever it is.
//  3. paused, ending within maxHold + one asynq tick: hold, if one of the
//     scope's places is free, so the scope reopens at the deadline's
//     millisecond. Places: as many as the reopening can use (the budget the
//     scope learned), at most maxHolders. Without a place the task is paced:
//     deferred to the deadline plus a jitter within a tenth of the wait (at
//     most jitter), or, with a limit, to its slot in the reopening line.
//  4. paused for longer, without a GCRA limit (fixed windows open at once):
//     deferred to wake maxHold + one tick before the deadline. asynq rounds
//     the retry time up to a whole second and forwards it within its
//     DelayedTaskCheckInterval, so the task is back, and holding, before
//     the deadline whenever that interval is at most maxHold (500 ms is the
//     README's advice; asynq's default is 5 s).
//  5. limited by the learned limit, its next window within maxHold + one
//     asynq tick: as a short pause (it reserves no slot ahead: the holders
//     ask again as the window opens). So is an Interactive task limited
//     by any limit, and any task whose slot is not reserved (unreserved:
//     background work behind a bucket while a reserve is in force), its
//     slot within maxHold + one tick.
//  6. limited by a concurrency limit with every slot taken (reason
//     in flight; the instant is never reserved): as a short pause, in as
//     many places as there are workers. Waiting for a slot in flight is
//     not a reopening's herd: each release wakes one waiting worker (see
//     slotWakers), and the Middleware's loop bounds the whole wait by
//     maxHold before it defers.
//  7. otherwise, with a GCRA limit: deferred to the task's slot in the reopening
//     line (the script spread the slots one interval apart), woken maxHold
//     early and never before the deadline, to wait the rest in-process:
//     asynq's whole-second wake-ups then leave no gap in the pace. (Waking
//     before the deadline would ask again and take a second slot.) A
//     limited instant beyond a hold wakes so too; with holding disabled
//     (maxHold 0), a pause without a GCRA limit is deferred to its
//     deadline plus the jitter.
func decide(a admission, p policy, u float64) verdict {
	// 1. Admitted.
	if a.code == model.Admitted {
		return verdict{act: run, wait: a.wait}
	}
	wait := a.wait + reopenJitter(a, p, u)
	// 2. A last attempt without reserve.
	if p.mustHold {
		return verdict{act: hold, wait: wait}
	}
	reopenHold := p.reopenHold()
	// 3. A short pause: hold in a place, or be paced.
	if a.code == model.Paused && a.wait <= reopenHold {
		return holdShort(a, p, slotWake(a, p, wait))
	}
	// 4. A longer pause without a GCRA limit: wake early, to hold.
	if a.code == model.Paused && !a.spread && reopenHold > 0 {
		return deferTo(a, a.wait-reopenHold)
	}
	// 5 and 6. A limit's instant near and not reserved (a slot in flight
	// never is; places gives it every worker): as a short pause.
	if holdsSoon(a, p, reopenHold) {
		return holdShort(a, p, wait)
	}
	// 7. Otherwise: deferred to the slot, or to the deadline.
	return deferTo(a, slotWake(a, p, wait))
}

// reopenHold is the longest wait a task holds in-process for: maxHold and
// one asynq tick, 0 when holding is disabled.
func (p policy) reopenHold() time.Duration {
	if p.maxHold <= 0 {
		return 0
	}
	return p.maxHold + asynqTick
}

// reopenJitter decides how far past a pause's deadline a task wakes: a
// draw u within a tenth of the wait, at most p.jitter, so that the
// workers deferred to one deadline do not all ask at its millisecond; 0
// when the scope is not paused or its line spreads the slots instead.
func reopenJitter(a admission, p policy, u float64) time.Duration {
	if a.code != model.Paused || a.spread {
		return 0
	}
	return jitter(min(p.jitter, a.wait/10), u)
}

// holdsSoon decides whether a limited task asks again in-process at its
// instant, as after a short pause (rules 5 and 6): the instant is within
// reopenHold and is not a reserved slot (fixed windows, the learned
// limit, an unreserved instant), or the task is Interactive.
func holdsSoon(a admission, p policy, reopenHold time.Duration) bool {
	return a.code == model.Limited && (!a.spread || a.unreserved || p.interactive) && a.wait <= reopenHold
}

// slotWake decides when a deferred task wakes: wait, or, when its limit
// gives it a slot (a GCRA line, or a limited instant), maxHold before it
// and never before the deadline (waking before the deadline would ask
// again and take a second slot).
func slotWake(a admission, p policy, wait time.Duration) time.Duration {
	if a.limited && (a.spread || a.code == model.Limited) {
		return max(wait-p.maxHold, a.until.Sub(a.now))
	}
	return wait
}

// places decides how many workers of the scope may hold: as many as the
// reopening can use (a.reopen), at most maxHolders; every worker for a
// slot in flight, whose releases wake one waiting worker each.
func places(a admission, p policy) int {
	if a.reason == model.ReasonInFlight && p.maxHolders > 0 {
		return math.MaxInt32
	}
	if a.reopen > 0 {
		return int(min(a.reopen, int64(p.maxHolders)))
	}
	return p.maxHolders
}

// holdShort is the verdict of a short wait: hold a.wait in one of the
// scope's places, or, without a place, defer to paced.
func holdShort(a admission, p policy, paced time.Duration) verdict {
	return verdict{act: holdPause, wait: a.wait, holders: places(a, p), deferral: deferralOf(a, paced)}
}

// deferTo is the verdict of a task deferred through asynq to wake after
// wait.
func deferTo(a admission, wait time.Duration) verdict {
	return verdict{act: deferTask, wait: wait, deferral: deferralOf(a, wait)}
}

// deferralOf is the Deferral of the task a holds back, to wake after wait.
func deferralOf(a admission, wait time.Duration) Deferral {
	return Deferral{Delay: wait, RetryAt: a.now.Add(wait), Reason: publicReason(a.reason), Deadline: a.until, Operator: a.byOperator}
}

// jitter returns the point u of the way into window. u ≤ 0 or NaN gives 0
// and u ≥ 1 the whole window.
func jitter(window time.Duration, u float64) time.Duration {
	if window <= 0 || !(u > 0) { // !(u > 0) also catches NaN
		return 0
	}
	if u >= 1 {
		return window
	}
	return time.Duration(float64(window) * u)
}

// holders counts the workers of this process that wait in-process, per
// scope and in all, so that neither one paced or paused provider nor many
// brief pauses at once can take every worker from the other scopes' tasks
// (the reference article's "do not let one provider freeze every
// integration": tasks of other providers wait in asynq's queue, where no
// worker is left to take them).
//
// A waiter is a worker waiting for its scope in any way: until a slot of a
// limit reserved ahead, for a pause or a window to open (a holder), for a
// slot of a concurrency limit in flight, or on a last attempt. The rule
// (join): a worker may wait only while fewer than one in holdShare of the
// tasks inside the middleware wait, unless every waiter is of its own scope
// and no task of another scope (or without one) entered the middleware
// within fairFor: a process that serves one scope alone gives its reopening
// every worker. A worker that may not wait asks the admission for no slot
// ahead (model.Params.NowOnly) and is deferred to its instant; its worker
// takes the next task of the queue. Last attempts without NewTask's reserve
// wait whatever the count (they join it).
//
// The holders among the waiters also have places per scope (acquire):
// Tuning.MaxHolders, or as many as the reopening can use; Interactive work
// has Tuning.MaxHolders places of its own per scope, which background
// holders never take.
type holders struct {
	mu    sync.Mutex
	n     map[string]int // holders per scope, every class
	ni    map[string]int // holders per scope, interactive
	w     map[string]int // waiters per scope, every kind
	total int            // waiters in all
	// the most recent scope a task entered with and when, and the most
	// recent other scope and when (so the last entry of a scope other
	// than any k is known)
	last, other     string
	lastAt, otherAt time.Time
}

// holdShare bounds what the waiters may take of the tasks inside a
// process's middleware while more than one scope is served: one in two.
// Without a bound, many scopes pausing briefly at once hold every worker
// and admissions stall; and one paced scope's waiters (some sleeping
// until a reserved slot, the others holding for the window after) take
// every worker, so that a scope with no quota at all waits behind the
// paced scope's backlog in the queue.
const holdShare = 2

// fairFor is how long after a task of another scope (or without one)
// entered the middleware a scope's waiters are still held to holdShare:
// MaxHold's default and one asynq tick, the longest a worker waits before
// it asks again: the workers the share leaves free take task after task of
// the queue (deferring the paced scope's) and meet the other scopes' tasks
// again well within it; short, so a process left with one scope soon
// gives its reopening every worker again (were one scope's own holders
// capped by the share, a process serving one carrier alone would fall far
// behind the carrier's quota: TestModesEndToEnd).
// Chosen with the example (go run ./example -modes gate,gate+limit; docs/measurements.md).
const fairFor = 2500 * time.Millisecond

// enter notes that a task of scope k ("" none) entered the middleware at
// now.
func (h *holders) enter(k string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if k != h.last {
		h.other, h.otherAt = h.last, h.lastAt
	}
	h.last, h.lastAt = k, now
}

// join takes a waiter's place for a worker of scope k at now, with inside
// tasks inside the middleware (this one among them), if the rule allows
// it (see holders); force takes it whatever the count.
func (h *holders) join(k string, inside int64, now time.Time, force bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !force && int64(h.total) >= max(inside/holdShare, 1) && (h.total > h.w[k] || !h.alone(k, now)) {
		return false
	}
	if h.w == nil {
		h.w = make(map[string]int)
	}
	h.w[k]++
	h.total++
	return true
}

// alone reports whether no task of a scope other than k entered within
// fairFor before now.
func (h *holders) alone(k string, now time.Time) bool {
	at, seen := h.lastAt, h.last != k && !h.lastAt.IsZero()
	if !seen {
		at, seen = h.otherAt, !h.otherAt.IsZero()
	}
	return !seen || now.Sub(at) >= fairFor
}

// leave gives back a place join took.
func (h *holders) leave(k string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total--
	if h.w[k]--; h.w[k] <= 0 {
		delete(h.w, k)
	}
}

// acquire takes a holder's place for work of class c of scope k if fewer
// than limit of its holders of that class hold. The worker has joined the
// waiters already.
func (h *holders) acquire(k string, c Class, limit int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	mine := h.n[k] - h.ni[k]
	if c == Interactive {
		mine = h.ni[k]
	}
	if mine >= limit {
		return false
	}
	if h.n == nil {
		h.n, h.ni = make(map[string]int), make(map[string]int)
	}
	h.n[k]++
	if c == Interactive {
		h.ni[k]++
	}
	return true
}

func (h *holders) release(k string, c Class) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[k]--; h.n[k] <= 0 {
		delete(h.n, k)
	}
	if c == Interactive {
		if h.ni[k]--; h.ni[k] <= 0 {
			delete(h.ni, k)
		}
	}
}

// slotWakers wake the workers of this process that wait for a slot of a
// concurrency limit when a lease of their scope is released here: one
// worker per unit released, at once, instead of at its next poll
// (concurrentPoll, which finds the slots other processes release). The
// scopes share wakerShards channels by hash, so the memory is bounded
// whatever the number of accounts; a wake taken by a worker of another
// scope of the same shard costs that worker one round trip, and this one
// its poll.
type slotWakers struct {
	seed maphash.Seed
	once sync.Once
	ch   [wakerShards]chan struct{}
}

// wakerShards is how many channels the scopes share: far more than the
// scopes a process waits on at once, so that wakes seldom go astray.
const wakerShards = 256

func (w *slotWakers) of(k string) chan struct{} {
	w.once.Do(func() {
		w.seed = maphash.MakeSeed()
		for i := range w.ch {
			w.ch[i] = make(chan struct{}, 1)
		}
	})
	return w.ch[maphash.String(w.seed, k)%wakerShards]
}

// wake wakes up to n workers waiting for a slot of scope k (one may be
// woken later, by the channel's buffer: it asks once more).
func (w *slotWakers) wake(k string, n int) {
	ch := w.of(k)
	for range n {
		select {
		case ch <- struct{}{}:
		default:
			return
		}
	}
}

// wait waits d, until a slot of k is released here, or until ctx ends.
func (w *slotWakers) wait(ctx context.Context, k string, d time.Duration) error {
	return sleepOr(ctx, d, w.of(k))
}

// uncounted counts, per scope, the admissions this process made from its
// open cache, which no script saw: the next round trip of the scope (an
// admission or a refusal) reports them, so what the scope learns counts
// every request it sent (see learnState.report). A count is removed when
// taken, and given back when its round trip fails; past maxUncounted
// scopes the counts are dropped (a scope's learning then undercounts,
// which its next refusal-free window corrects).
type uncounted struct {
	m sync.Map // pause key → *atomic.Int64
	n atomic.Int64
}

// maxUncounted bounds the scopes with counts waiting for a round trip:
// far more than a process admits from its cache between two of their
// round trips, few enough to be nothing in memory.
const maxUncounted = 10_000

func (c *uncounted) add(k string, n int64) {
	if n <= 0 {
		return
	}
	v, ok := c.m.Load(k)
	if !ok {
		if c.n.Load() >= maxUncounted {
			c.m.Clear()
			c.n.Store(0)
		}
		var loaded bool
		if v, loaded = c.m.LoadOrStore(k, new(atomic.Int64)); !loaded {
			c.n.Add(1)
		}
	}
	v.(*atomic.Int64).Add(n)
}

func (c *uncounted) take(k string) int64 {
	if v, ok := c.m.LoadAndDelete(k); ok {
		c.n.Add(-1)
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// absorbed counts, per pause (scope and deadline), the refusals of
// requests already on their way when it began, which the log reports at
// DEBUG with this count instead of a line at INFO each. Past
// maxAbsorbedPauses pauses the counts start again.
type absorbed struct {
	mu sync.Mutex
	n  map[string]int
}

// maxAbsorbedPauses bounds the pauses absorbed counts are kept for: far
// more than are in force at once in one process.
const maxAbsorbedPauses = 1000

func (a *absorbed) add(pause string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil || len(a.n) >= maxAbsorbedPauses {
		a.n = make(map[string]int)
	}
	a.n[pause]++
	return a.n[pause]
}
