package quotagate

import (
	"math"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
)

// TestDecide walks the admission decision through its rules, one step per
// row, in the manner of x/time/rate's reserveN tests: the script's answer,
// the policy and the random draw in; what the gate does out.
func TestDecide(t *testing.T) {
	const ms = time.Millisecond
	now := t0
	at := func(d time.Duration) time.Time { return now.Add(d) }
	open := func(wait time.Duration) admission { return admission{code: model.Admitted, wait: wait, now: now} }
	pausedFor := func(wait, deadline time.Duration) admission {
		return admission{code: model.Paused, wait: wait, until: at(deadline), now: now}
	}
	pausedForReason := func(wait, deadline time.Duration, r model.Reason) admission {
		a := pausedFor(wait, deadline)
		a.reason = r
		return a
	}
	withLimit := func(a admission) admission { a.limited, a.spread = true, a.code != model.Admitted; return a }
	withWindow := func(a admission) admission { a.limited = true; return a } // fixed windows: no spread
	reopening := func(a admission, n int64) admission { a.reopen = n; return a }
	intoSlots := func(a admission) admission { a.slots = true; return a } // on the learned concurrency limit's probation
	inFlight := func(wait time.Duration) admission {                      // a concurrency limit with every slot taken
		return admission{code: model.Limited, reason: model.ReasonInFlight, wait: wait, now: now, limited: true, unreserved: true}
	}
	plain := policy{maxHold: 1500 * ms, jitter: time.Second, maxHolders: 12}
	last := plain
	last.mustHold = true
	noHold := policy{jitter: time.Second, maxHolders: 12}
	interactive := plain
	interactive.interactive = true

	for _, tc := range []struct {
		name    string
		a       admission
		p       policy
		u       float64
		act     act
		wait    time.Duration
		holders int           // for holdPause
		retry   time.Duration // deferral's delay and RetryAt - now (holdPause, deferTask)
		reason  Reason
	}{
		{"open: run now", open(0), plain, 0.5, run, 0, 0, 0, 0},
		{"slot reserved ahead: run after it", open(400 * ms), plain, 0.5, run, 400 * ms, 0, 0, 0},
		{"short pause: hold a place, else paced with jitter", pausedFor(time.Second, time.Second), plain, 0.5, holdPause, time.Second, 12, 1050 * ms, ReasonPaused},
		{"pause ending within maxHold + a tick: hold", pausedFor(2500*ms, 2500*ms), plain, 0, holdPause, 2500 * ms, 12, 2500 * ms, ReasonPaused},
		{"holders: as many as the reopening can use", reopening(pausedFor(time.Second, time.Second), 8), plain, 0, holdPause, time.Second, 8, time.Second, ReasonPaused},
		{"holders: at most maxHolders", reopening(pausedFor(time.Second, time.Second), 40), plain, 0, holdPause, time.Second, 12, time.Second, ReasonPaused},
		{"holders: every worker when it reopens into a learned concurrency limit's slots", intoSlots(reopening(pausedFor(time.Second, time.Second), 8)), plain, 0, holdPause, time.Second, math.MaxInt32, time.Second, ReasonPaused},
		{"in flight: hold a poll, in as many places as there are workers", inFlight(20 * ms), plain, 0, holdPause, 20 * ms, math.MaxInt32, 20 * ms, ReasonInFlight},
		{"in flight beside a bucket: hold until its slot, reserved nothing", withLimit(inFlight(480 * ms)), plain, 0, holdPause, 480 * ms, math.MaxInt32, 480 * ms, ReasonInFlight},
		{"in flight without holding: deferred", inFlight(20 * ms), noHold, 0, deferTask, 20 * ms, 0, 20 * ms, ReasonInFlight},
		{"long pause: wake maxHold + a tick early, to hold", pausedFor(9*time.Second, 9*time.Second), plain, 0.5, deferTask, 6500 * ms, 0, 6500 * ms, ReasonPaused},
		{"long pause, any draw: no jitter on the early wake", pausedFor(time.Minute, time.Minute), plain, 0.99, deferTask, 57500 * ms, 0, 57500 * ms, ReasonPaused},
		{"holding disabled: deadline plus jitter", pausedFor(9*time.Second, 9*time.Second), noHold, 0.5, deferTask, 9*time.Second + 450*ms, 0, 9*time.Second + 450*ms, ReasonPaused},
		{"holding disabled: jitter capped", pausedFor(time.Minute, time.Minute), noHold, 0.5, deferTask, time.Minute + 500*ms, 0, time.Minute + 500*ms, ReasonPaused},
		{"holding disabled, u=0: at the deadline", pausedFor(time.Second, time.Second), noHold, 0, deferTask, time.Second, 0, time.Second, ReasonPaused},
		{"paused with a limit: slot after the deadline, woken maxHold early", withLimit(pausedFor(12*time.Second, 10*time.Second)), plain, 0.5, deferTask, 10500 * ms, 0, 10500 * ms, ReasonPaused},
		{"paused with a limit: never before the deadline", withLimit(pausedFor(10200*ms, 10*time.Second)), plain, 0.5, deferTask, 10 * time.Second, 0, 10 * time.Second, ReasonPaused},
		{"paused with fixed windows only: wake early, as without a limit", withWindow(pausedFor(9*time.Second, 9*time.Second)), plain, 0.5, deferTask, 6500 * ms, 0, 6500 * ms, ReasonPaused},
		{"limited: slot woken maxHold early", withLimit(admission{code: model.Limited, reason: model.ReasonLimit, wait: 5 * time.Second, now: now}), plain, 0.5, deferTask, 3500 * ms, 0, 3500 * ms, ReasonLimited},
		{"learned window within a hold: hold a place, ask again as it opens", reopening(withWindow(admission{code: model.Limited, reason: model.ReasonLearned, wait: 800 * ms, now: now}), 5), plain, 0.5, holdPause, 800 * ms, 5, 800 * ms, ReasonLearned},
		{"learned window beyond a hold: deferred, woken maxHold early", withWindow(admission{code: model.Limited, reason: model.ReasonLearned, wait: 4 * time.Second, now: now}), plain, 0.5, deferTask, 2500 * ms, 0, 2500 * ms, ReasonLearned},
		{"spent budget: deferred to its reset, woken early to hold", pausedForReason(9*time.Second, 9*time.Second, model.ReasonBudget), plain, 0.5, deferTask, 6500 * ms, 0, 6500 * ms, ReasonBudget},
		{"interactive, its limit's slot within a hold: hold, not asynq's whole seconds", withLimit(admission{code: model.Limited, reason: model.ReasonLimit, wait: 2 * time.Second, now: now}), interactive, 0.5, holdPause, 2 * time.Second, 12, 2 * time.Second, ReasonLimited},
		{"interactive, its slot beyond a hold: deferred, woken maxHold early", withLimit(admission{code: model.Limited, reason: model.ReasonLimit, wait: 5 * time.Second, now: now}), interactive, 0.5, deferTask, 3500 * ms, 0, 3500 * ms, ReasonLimited},
		{"interactive, a window within a hold: hold", withWindow(admission{code: model.Limited, reason: model.ReasonLimit, wait: 900 * ms, now: now}), interactive, 0.5, holdPause, 900 * ms, 12, 900 * ms, ReasonLimited},
		{"last attempt: hold a long pause (with jitter)", pausedFor(9*time.Second, 9*time.Second), last, 0.5, hold, 9*time.Second + 450*ms, 0, 0, 0},
		{"last attempt: hold a limited slot", withLimit(admission{code: model.Limited, reason: model.ReasonLimit, wait: 5 * time.Second, now: now}), last, 0.5, hold, 5 * time.Second, 0, 0, 0},
	} {
		v := decide(tc.a, tc.p, tc.u)
		if v.act != tc.act || v.wait != tc.wait || v.act == holdPause && v.holders != tc.holders {
			t.Errorf("%s: decide = act %d wait %v holders %d; want act %d wait %v holders %d", tc.name, v.act, v.wait, v.holders, tc.act, tc.wait, tc.holders)
			continue
		}
		if tc.act == holdPause || tc.act == deferTask {
			d := v.deferral
			if got := d.RetryAt.Sub(now); got != tc.retry || d.Delay != tc.retry || d.Reason != tc.reason || !d.Deadline.Equal(tc.a.until) {
				t.Errorf("%s: deferral %+v; want delay and RetryAt now+%v, reason %v, deadline %v", tc.name, d, tc.retry, tc.reason, tc.a.until)
			}
		}
	}
}

// TestHoldsSoon walks the rule by which a limited task holds for its
// instant instead of deferring (decide's rules 5 and 6), one step per row.
func TestHoldsSoon(t *testing.T) {
	const ms = time.Millisecond
	plain := policy{maxHold: 1500 * ms}
	interactive := plain
	interactive.interactive = true
	for _, tc := range []struct {
		name string
		a    admission
		p    policy
		want bool
	}{
		{"a window within the hold", admission{code: model.Limited, wait: 2500 * ms}, plain, true},
		{"a window beyond the hold", admission{code: model.Limited, wait: 2501 * ms}, plain, false},
		{"a reserved slot within the hold: deferred to it", admission{code: model.Limited, spread: true, wait: 800 * ms}, plain, false},
		{"an unreserved slot within the hold", admission{code: model.Limited, spread: true, unreserved: true, wait: 800 * ms}, plain, true},
		{"a reserved slot, interactive", admission{code: model.Limited, spread: true, wait: 800 * ms}, interactive, true},
		{"interactive, beyond the hold", admission{code: model.Limited, spread: true, wait: 3 * time.Second}, interactive, false},
		{"in flight, holding disabled", admission{code: model.Limited, reason: model.ReasonInFlight, unreserved: true, wait: 20 * ms}, policy{}, false},
		{"paused: a pause, not a limit", admission{code: model.Paused, wait: 800 * ms}, plain, false},
	} {
		if got := holdsSoon(tc.a, tc.p, tc.p.reopenHold()); got != tc.want {
			t.Errorf("%s: holdsSoon = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPlaces walks how many workers of a scope may hold (decide's rules 3
// and 6), one step per row.
func TestPlaces(t *testing.T) {
	for _, tc := range []struct {
		name       string
		reason     model.Reason
		reopen     int64
		maxHolders int
		want       int
	}{
		{"nothing learned: maxHolders", model.ReasonPause, 0, 12, 12},
		{"as many as the reopening can use", model.ReasonPause, 8, 12, 8},
		{"at most maxHolders", model.ReasonBudget, 40, 12, 12},
		{"a slot in flight: every worker", model.ReasonInFlight, 3, 12, math.MaxInt32},
		{"a slot in flight, holders disabled: none", model.ReasonInFlight, 0, 0, 0},
	} {
		a := admission{reason: tc.reason, reopen: tc.reopen}
		if got := places(a, policy{maxHolders: tc.maxHolders}); got != tc.want {
			t.Errorf("%s: places = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestBriefSteps walks brief: only a worker without a waiter's place
// holds, once per task, a short pause or a limit's near instant within
// briefHold; anything longer, or a deferral, goes through asynq.
func TestBriefSteps(t *testing.T) {
	placed := &waiting{worker: true, joined: true}
	free := &waiting{worker: true}
	for _, st := range []struct {
		name    string
		v       verdict
		w       *waiting
		briefed bool
		want    bool
	}{
		{"without a place, a pause ending within briefHold", verdict{act: holdPause, wait: 100 * time.Millisecond}, free, false, true},
		{"without a place, a limit's instant within briefHold", verdict{act: hold, wait: briefHold}, free, false, true},
		{"without a place, longer than briefHold", verdict{act: holdPause, wait: briefHold + time.Millisecond}, free, false, false},
		{"without a place, held briefly once already", verdict{act: holdPause, wait: 10 * time.Millisecond}, free, true, false},
		{"without a place, a deferral", verdict{act: deferTask, wait: 10 * time.Millisecond}, free, false, false},
		{"with a place: the holders' rules", verdict{act: holdPause, wait: 10 * time.Millisecond}, placed, false, false},
	} {
		if got := brief(st.v, st.w, st.briefed); got != st.want {
			t.Errorf("%s: brief = %v, want %v", st.name, got, st.want)
		}
	}
}
