package decide

import (
	"math"
	"time"

	"github.com/quotagate/quotagate/internal/model"
)

// Act is what the gate does with a task.
type Act int

const (
	// Run: the task may spend capacity after Verdict.Wait (a slot of the
	// limit reserved up to MaxHold ahead; 0 for most).
	Run Act = iota
	// Hold: wait Verdict.Wait in-process, then ask again. Only a task on a
	// last attempt without NewTask's reserve (a deferral would be
	// archived) holds for any wait.
	Hold
	// HoldPause: as Hold, for a short pause, if one of the scope's
	// Verdict.Holders places is free; otherwise defer for Verdict.Retry.
	HoldPause
	// Defer: asynq retries the task after Verdict.Retry.
	Defer
)

// Policy is what the decision needs from the configuration and the task.
type Policy struct {
	MaxHold    time.Duration // Tuning.MaxHold
	Jitter     time.Duration // Tuning.ReopenJitter
	MaxHolders int           // Tuning.MaxHolders
	MustHold   bool          // a deferral would be archived (the task's last attempt)
	// Interactive: the task is Interactive; it holds for any limit's slot
	// within MaxHold and one tick instead of going through asynq, whose
	// whole-second retries would add a second to a wait somebody sees.
	Interactive bool
}

// Verdict is the outcome of Decide.
type Verdict struct {
	Act     Act
	Wait    time.Duration
	Holders int           // HoldPause: how many workers of the scope may hold
	Retry   time.Duration // the deferral's delay: Defer, and HoldPause without a free place
	// Early: the deferral may wake at the start of the whole second in
	// which Retry ends, before it (WakeEarly): the reopening it waits for
	// is bounded by the model, not by its arrival.
	Early bool
}

// Decide turns the answer a of the admission script into a verdict. u is a
// uniform random value in [0, 1) for the reopening jitter.
//
// Rules, in order:
//  1. admitted: run after a.Wait.
//  2. a last attempt without reserve: hold for the wait, whatever it is.
//  3. paused, ending within MaxHold + one asynq tick: hold, if one of the
//     scope's places is free, so the scope reopens at the deadline's
//     millisecond. Places: as many as the reopening can use (the budget the
//     scope learned), at most MaxHolders; every worker when it reopens into
//     a learned concurrency limit's slots (as rule 6). Without a place the
//     task is paced: deferred to the deadline plus a jitter within a tenth
//     of the wait (at most Jitter), or, with a limit, to its slot in the
//     reopening line; into a learned concurrency limit's slots it wakes
//     early instead (WakeEarly): the slots, not the arrivals, pace that
//     reopening, and a task back a second after the deadline leaves the
//     slots empty once the queue before it has run.
//  4. paused for longer, without a GCRA limit (fixed windows open at once):
//     deferred to wake MaxHold + one tick before the deadline. asynq keeps
//     the retry time in whole seconds and forwards it within its
//     DelayedTaskCheckInterval, so the task is back, and holding, before
//     the deadline whenever that interval is at most MaxHold (500 ms is the
//     README's advice; asynq's default is 5 s).
//  5. limited by the learned limit, its next window within MaxHold + one
//     asynq tick: as a short pause (it reserves no slot ahead: the holders
//     ask again as the window opens). So is an Interactive task limited
//     by any limit, and any task whose slot is not reserved (Unreserved:
//     background work behind a bucket while a reserve is in force), its
//     slot within MaxHold + one tick.
//  6. limited by a concurrency limit with every slot taken (reason
//     in flight; the instant is never reserved): as a short pause, in as
//     many places as there are workers. Waiting for a slot in flight is
//     not a reopening's herd: each release wakes one waiting worker (see
//     local.SlotWakers), and the Middleware's loop bounds the whole wait by
//     MaxHold before it defers.
//  7. otherwise, with a GCRA limit: deferred to the task's slot in the
//     reopening line (the script spread the slots one interval apart),
//     woken MaxHold early and never before the deadline, to wait the rest
//     in-process: asynq's whole-second wake-ups then leave no gap in the
//     pace. (Waking before the deadline would ask again and take a second
//     slot.) A limited instant beyond a hold wakes so too; with holding
//     disabled (MaxHold 0), a pause without a GCRA limit is deferred to its
//     deadline plus the jitter.
func Decide(a Answer, p Policy, u float64) Verdict {
	// 1. Admitted.
	if a.Code == model.Admitted {
		return Verdict{Act: Run, Wait: a.Wait}
	}
	wait := a.Wait + reopenJitter(a, p, u)
	// 2. A last attempt without reserve.
	if p.MustHold {
		return Verdict{Act: Hold, Wait: wait}
	}
	reopenHold := p.reopenHold()
	// 3. A short pause: hold in a place, or be paced.
	if a.Code == model.Paused && a.Wait <= reopenHold {
		return holdShort(a, p, slotWake(a, p, wait))
	}
	// 4. A longer pause without a GCRA limit: wake early, to hold.
	if a.Code == model.Paused && !a.Spread && reopenHold > 0 {
		return deferTo(a.Wait - reopenHold)
	}
	// 5 and 6. A limit's instant near and not reserved (a slot in flight
	// never is; places gives it every worker): as a short pause.
	if holdsSoon(a, p, reopenHold) {
		return holdShort(a, p, wait)
	}
	// 7. Otherwise: deferred to the slot, or to the deadline.
	return deferTo(slotWake(a, p, wait))
}

// reopenHold is the longest wait a task holds in-process for: MaxHold and
// one asynq tick, 0 when holding is disabled.
func (p Policy) reopenHold() time.Duration {
	if p.MaxHold <= 0 {
		return 0
	}
	return p.MaxHold + AsynqTick
}

// reopenJitter decides how far past a pause's deadline a task wakes: a
// draw u within a tenth of the wait, at most p.Jitter, so that the
// workers deferred to one deadline do not all ask at its millisecond; 0
// when the scope is not paused or its line spreads the slots instead.
func reopenJitter(a Answer, p Policy, u float64) time.Duration {
	if a.Code != model.Paused || a.Spread {
		return 0
	}
	return Jitter(min(p.Jitter, a.Wait/10), u)
}

// holdsSoon decides whether a limited task asks again in-process at its
// instant, as after a short pause (rules 5 and 6): the instant is within
// reopenHold and is not a reserved slot (fixed windows, the learned
// limit, an unreserved instant), or the task is Interactive.
func holdsSoon(a Answer, p Policy, reopenHold time.Duration) bool {
	return a.Code == model.Limited && (!a.Spread || a.Unreserved || p.Interactive) && a.Wait <= reopenHold
}

// slotWake decides when a deferred task wakes: wait, or, when its limit
// gives it a slot (a GCRA line, or a limited instant), MaxHold before it
// and never before the deadline (waking before the deadline would ask
// again and take a second slot).
func slotWake(a Answer, p Policy, wait time.Duration) time.Duration {
	if a.Limited && (a.Spread || a.Code == model.Limited) {
		return max(wait-p.MaxHold, a.Until.Sub(a.Now))
	}
	return wait
}

// places decides how many workers of the scope may hold: as many as the
// reopening can use (a.Reopen), at most MaxHolders; every worker for a
// slot in flight, whose releases wake one waiting worker each, and for a
// pause that reopens into a learned concurrency limit's slots (a.Slots):
// at its deadline they wait for slots as well, and a task deferred
// instead would come back at asynq's next whole second, after the slots
// it could have taken.
func places(a Answer, p Policy) int {
	if (a.Reason == model.ReasonInFlight || a.Slots) && p.MaxHolders > 0 {
		return math.MaxInt32
	}
	if a.Reopen > 0 {
		return int(min(a.Reopen, int64(p.MaxHolders)))
	}
	return p.MaxHolders
}

// holdShort is the verdict of a short wait: hold a.Wait in one of the
// scope's places, or, without a place, defer to paced.
func holdShort(a Answer, p Policy, paced time.Duration) Verdict {
	return Verdict{Act: HoldPause, Wait: a.Wait, Holders: places(a, p), Retry: paced, Early: a.Slots}
}

// WakeEarly returns the delay after now of a deferral that may wake
// within the whole second in which wait ends: until that second begins,
// if it begins after now; otherwise wait. asynq truncates a retry time to
// its second and forwards it at its first DelayedTaskCheckInterval tick
// within or after that second, so a task woken so is queued at the
// instant wait ends or up to a tick before or after it, where aligned up
// (the RetryDelay) it comes back up to a second and a tick after. A
// second that has begun is not woken into: the task would be back at
// once and ask again for nothing.
func WakeEarly(now time.Time, wait time.Duration) time.Duration {
	sec := now.Add(wait).Truncate(AsynqTick)
	if !sec.After(now) {
		return wait
	}
	return sec.Sub(now)
}

// deferTo is the verdict of a task deferred through asynq to wake after
// wait.
func deferTo(wait time.Duration) Verdict {
	return Verdict{Act: Defer, Wait: wait, Retry: wait}
}

// BriefHold is the longest wait a worker without a waiter's place
// (local.Holders.Join) holds rather than defers, once per task: a
// deferral goes through asynq, which brings the task back at a whole
// second and within its DelayedTaskCheckInterval, a second or more later
// however short the wait; and the worker freed to meet other scopes'
// tasks, deferring its own scope's, would send the whole queue of a scope
// whose pause ends in a moment to asynq's retries. A quarter of asynq's
// tick keeps what other scopes' tasks may wait for it short.
const BriefHold = AsynqTick / 4

// Brief decides whether a worker without a waiter's place (placeless)
// holds verdict v in-process: a short pause or a limit's near instant,
// within BriefHold, the task's first brief hold (briefed: it held one).
func Brief(v Verdict, placeless, briefed bool) bool {
	return placeless && !briefed && (v.Act == HoldPause || v.Act == Hold) && v.Wait <= BriefHold
}

// Jitter returns the point u of the way into window. u ≤ 0 or NaN gives 0
// and u ≥ 1 the whole window.
func Jitter(window time.Duration, u float64) time.Duration {
	if window <= 0 || !(u > 0) { // !(u > 0) also catches NaN
		return 0
	}
	if u >= 1 {
		return window
	}
	return time.Duration(float64(window) * u)
}
