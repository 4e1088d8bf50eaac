package quotagate

import (
	"math"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/store"
)

// The admission decision. The Middleware and the Transport ask Redis one
// question per task (model.AdmitScript, internal/store) and hand its answer to decide,
// which says what to do without I/O or a clock: run now (perhaps after a
// slot reserved a moment ahead), hold the worker in-process and ask again,
// or defer the task through asynq. The loop that calls Redis and sleeps is
// Gate.admit (middleware.go); what it keeps between round trips (the open
// cache, the holders' places, the slot wakers) is internal/local's.

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
	leased     bool          // it took a lease on the learned concurrency limit: release it
	level      int64         // its level (model.Decision.Level): a refusal of it tells it
	mark       int64         // its mark (model.Decision.Mark): a refusal of it tells it
	slots      bool          // paused, it reopens into a learned concurrency limit's slots (model.Decision.Slots)

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
		leased: d.Leased, level: d.Level, mark: d.Mark, slots: d.Slots, nowMicros: a.Now, untilDeadline: d.Until}
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
//     scope learned), at most maxHolders; every worker when it reopens into
//     a learned concurrency limit's slots (as rule 6). Without a place the
//     task is paced:
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
//     local.SlotWakers), and the Middleware's loop bounds the whole wait by
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
// slot in flight, whose releases wake one waiting worker each, and for a
// pause that reopens into a learned concurrency limit's slots (a.slots):
// at its deadline they wait for slots as well, and a task deferred
// instead would come back at asynq's next whole second, after the slots
// it could have taken.
func places(a admission, p policy) int {
	if (a.reason == model.ReasonInFlight || a.slots) && p.maxHolders > 0 {
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
