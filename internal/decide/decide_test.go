package decide

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
)

// TestDecide walks the Answer decision through its rules, one step per
// row, in the manner of x/time/rate's reserveN tests: the script's answer,
// the policy and the random draw in; what the gate does out.
func TestDecide(t *testing.T) {
	const ms = time.Millisecond
	now := time.Unix(1_700_000_000, 0)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	open := func(wait time.Duration) Answer { return Answer{Code: model.Admitted, Wait: wait, Now: now} }
	pausedFor := func(wait, deadline time.Duration) Answer {
		return Answer{Code: model.Paused, Wait: wait, Until: at(deadline), Now: now}
	}
	pausedForReason := func(wait, deadline time.Duration, r model.Reason) Answer {
		a := pausedFor(wait, deadline)
		a.Reason = r
		return a
	}
	withLimit := func(a Answer) Answer { a.Limited, a.Spread = true, a.Code != model.Admitted; return a }
	withWindow := func(a Answer) Answer { a.Limited = true; return a } // fixed windows: no spread
	reopening := func(a Answer, n int64) Answer { a.Reopen = n; return a }
	intoSlots := func(a Answer) Answer { a.Slots = true; return a } // on the learned concurrency limit's probation
	inFlight := func(wait time.Duration) Answer {                   // a concurrency limit with every slot taken
		return Answer{Code: model.Limited, Reason: model.ReasonInFlight, Wait: wait, Now: now, Limited: true, Unreserved: true}
	}
	plain := Policy{MaxHold: 1500 * ms, Jitter: time.Second, MaxHolders: 12}
	last := plain
	last.MustHold = true
	noHold := Policy{Jitter: time.Second, MaxHolders: 12}
	interactive := plain
	interactive.Interactive = true

	for _, tc := range []struct {
		name    string
		a       Answer
		p       Policy
		u       float64
		act     Act
		wait    time.Duration
		holders int           // for HoldPause
		retry   time.Duration // the deferral's delay (HoldPause, Defer)
	}{
		{"open: run now", open(0), plain, 0.5, Run, 0, 0, 0},
		{"slot reserved ahead: run after it", open(400 * ms), plain, 0.5, Run, 400 * ms, 0, 0},
		{"short pause: hold a place, else paced with jitter", pausedFor(time.Second, time.Second), plain, 0.5, HoldPause, time.Second, 12, 1050 * ms},
		{"pause ending within maxHold + a tick: hold", pausedFor(2500*ms, 2500*ms), plain, 0, HoldPause, 2500 * ms, 12, 2500 * ms},
		{"holders: as many as the reopening can use", reopening(pausedFor(time.Second, time.Second), 8), plain, 0, HoldPause, time.Second, 8, time.Second},
		{"holders: at most maxHolders", reopening(pausedFor(time.Second, time.Second), 40), plain, 0, HoldPause, time.Second, 12, time.Second},
		{"holders: every worker when it reopens into a learned concurrency limit's slots", intoSlots(reopening(pausedFor(time.Second, time.Second), 8)), plain, 0, HoldPause, time.Second, math.MaxInt32, time.Second},
		{"in flight: hold a poll, in as many places as there are workers", inFlight(20 * ms), plain, 0, HoldPause, 20 * ms, math.MaxInt32, 20 * ms},
		{"in flight beside a bucket: hold until its slot, reserved nothing", withLimit(inFlight(480 * ms)), plain, 0, HoldPause, 480 * ms, math.MaxInt32, 480 * ms},
		{"in flight without holding: deferred", inFlight(20 * ms), noHold, 0, Defer, 20 * ms, 0, 20 * ms},
		{"long pause: wake maxHold + a tick early, to hold", pausedFor(9*time.Second, 9*time.Second), plain, 0.5, Defer, 6500 * ms, 0, 6500 * ms},
		{"long pause, any draw: no jitter on the early wake", pausedFor(time.Minute, time.Minute), plain, 0.99, Defer, 57500 * ms, 0, 57500 * ms},
		{"holding disabled: deadline plus jitter", pausedFor(9*time.Second, 9*time.Second), noHold, 0.5, Defer, 9*time.Second + 450*ms, 0, 9*time.Second + 450*ms},
		{"holding disabled: jitter capped", pausedFor(time.Minute, time.Minute), noHold, 0.5, Defer, time.Minute + 500*ms, 0, time.Minute + 500*ms},
		{"holding disabled, u=0: at the deadline", pausedFor(time.Second, time.Second), noHold, 0, Defer, time.Second, 0, time.Second},
		{"paused with a limit: slot after the deadline, woken maxHold early", withLimit(pausedFor(12*time.Second, 10*time.Second)), plain, 0.5, Defer, 10500 * ms, 0, 10500 * ms},
		{"paused with a limit: never before the deadline", withLimit(pausedFor(10200*ms, 10*time.Second)), plain, 0.5, Defer, 10 * time.Second, 0, 10 * time.Second},
		{"paused with fixed windows only: wake early, as without a limit", withWindow(pausedFor(9*time.Second, 9*time.Second)), plain, 0.5, Defer, 6500 * ms, 0, 6500 * ms},
		{"limited: slot woken maxHold early", withLimit(Answer{Code: model.Limited, Reason: model.ReasonLimit, Wait: 5 * time.Second, Now: now}), plain, 0.5, Defer, 3500 * ms, 0, 3500 * ms},
		{"learned window within a hold: hold a place, ask again as it opens", reopening(withWindow(Answer{Code: model.Limited, Reason: model.ReasonLearned, Wait: 800 * ms, Now: now}), 5), plain, 0.5, HoldPause, 800 * ms, 5, 800 * ms},
		{"learned window beyond a hold: deferred, woken maxHold early", withWindow(Answer{Code: model.Limited, Reason: model.ReasonLearned, Wait: 4 * time.Second, Now: now}), plain, 0.5, Defer, 2500 * ms, 0, 2500 * ms},
		{"spent budget: deferred to its reset, woken early to hold", pausedForReason(9*time.Second, 9*time.Second, model.ReasonBudget), plain, 0.5, Defer, 6500 * ms, 0, 6500 * ms},
		{"interactive, its limit's slot within a hold: hold, not asynq's whole seconds", withLimit(Answer{Code: model.Limited, Reason: model.ReasonLimit, Wait: 2 * time.Second, Now: now}), interactive, 0.5, HoldPause, 2 * time.Second, 12, 2 * time.Second},
		{"interactive, its slot beyond a hold: deferred, woken maxHold early", withLimit(Answer{Code: model.Limited, Reason: model.ReasonLimit, Wait: 5 * time.Second, Now: now}), interactive, 0.5, Defer, 3500 * ms, 0, 3500 * ms},
		{"interactive, a window within a hold: hold", withWindow(Answer{Code: model.Limited, Reason: model.ReasonLimit, Wait: 900 * ms, Now: now}), interactive, 0.5, HoldPause, 900 * ms, 12, 900 * ms},
		{"last attempt: hold a long pause (with jitter)", pausedFor(9*time.Second, 9*time.Second), last, 0.5, Hold, 9*time.Second + 450*ms, 0, 0},
		{"last attempt: hold a limited slot", withLimit(Answer{Code: model.Limited, Reason: model.ReasonLimit, Wait: 5 * time.Second, Now: now}), last, 0.5, Hold, 5 * time.Second, 0, 0},
	} {
		v := Decide(tc.a, tc.p, tc.u)
		if v.Act != tc.act || v.Wait != tc.wait || v.Act == HoldPause && v.Holders != tc.holders {
			t.Errorf("%s: decide = act %d wait %v holders %d; want act %d wait %v holders %d", tc.name, v.Act, v.Wait, v.Holders, tc.act, tc.wait, tc.holders)
			continue
		}
		if tc.act == HoldPause || tc.act == Defer {
			if v.Retry != tc.retry {
				t.Errorf("%s: the deferral's delay %v, want %v", tc.name, v.Retry, tc.retry)
			}
		}
	}
}

// TestHoldsSoon walks the rule by which a limited task holds for its
// instant instead of deferring (decide's rules 5 and 6), one step per row.
func TestHoldsSoon(t *testing.T) {
	const ms = time.Millisecond
	plain := Policy{MaxHold: 1500 * ms}
	interactive := plain
	interactive.Interactive = true
	for _, tc := range []struct {
		name string
		a    Answer
		p    Policy
		want bool
	}{
		{"a window within the hold", Answer{Code: model.Limited, Wait: 2500 * ms}, plain, true},
		{"a window beyond the hold", Answer{Code: model.Limited, Wait: 2501 * ms}, plain, false},
		{"a reserved slot within the hold: deferred to it", Answer{Code: model.Limited, Spread: true, Wait: 800 * ms}, plain, false},
		{"an unreserved slot within the hold", Answer{Code: model.Limited, Spread: true, Unreserved: true, Wait: 800 * ms}, plain, true},
		{"a reserved slot, interactive", Answer{Code: model.Limited, Spread: true, Wait: 800 * ms}, interactive, true},
		{"interactive, beyond the hold", Answer{Code: model.Limited, Spread: true, Wait: 3 * time.Second}, interactive, false},
		{"in flight, holding disabled", Answer{Code: model.Limited, Reason: model.ReasonInFlight, Unreserved: true, Wait: 20 * ms}, Policy{}, false},
		{"paused: a pause, not a limit", Answer{Code: model.Paused, Wait: 800 * ms}, plain, false},
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
		a := Answer{Reason: tc.reason, Reopen: tc.reopen}
		if got := places(a, Policy{MaxHolders: tc.maxHolders}); got != tc.want {
			t.Errorf("%s: places = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestBriefSteps walks brief: only a worker without a waiter's place
// holds, once per task, a short pause or a limit's near instant within
// BriefHold; anything longer, or a deferral, goes through asynq.
func TestBriefSteps(t *testing.T) {
	const placed, free = false, true
	for _, st := range []struct {
		name      string
		v         Verdict
		placeless bool
		briefed   bool
		want      bool
	}{
		{"without a place, a pause ending within BriefHold", Verdict{Act: HoldPause, Wait: 100 * time.Millisecond}, free, false, true},
		{"without a place, a limit's instant within BriefHold", Verdict{Act: Hold, Wait: BriefHold}, free, false, true},
		{"without a place, longer than BriefHold", Verdict{Act: HoldPause, Wait: BriefHold + time.Millisecond}, free, false, false},
		{"without a place, held briefly once already", Verdict{Act: HoldPause, Wait: 10 * time.Millisecond}, free, true, false},
		{"without a place, a deferral", Verdict{Act: Defer, Wait: 10 * time.Millisecond}, free, false, false},
		{"with a place: the holders' rules", Verdict{Act: HoldPause, Wait: 10 * time.Millisecond}, placed, false, false},
	} {
		if got := Brief(st.v, st.placeless, st.briefed); got != st.want {
			t.Errorf("%s: brief = %v, want %v", st.name, got, st.want)
		}
	}
}

// TestJitter: a pure function of the window and u, clamped into the window.
func TestJitter(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		u      float64
		want   time.Duration
	}{
		{time.Second, 0, 0},
		{time.Second, 0.5, 500 * time.Millisecond},
		{time.Second, 0.999, 999 * time.Millisecond},
		{time.Second, math.Nextafter(1, 0), time.Second - 1},
		{time.Second, 1, time.Second},
		{time.Second, 1.5, time.Second},
		{time.Second, math.Inf(1), time.Second},
		{time.Second, -1, 0},
		{time.Second, math.Copysign(0, -1), 0},
		{time.Second, math.Inf(-1), 0},
		{time.Second, math.NaN(), 0},
		{0, 0.5, 0},
		{-time.Second, 0.5, 0},
		{-time.Second, 1, 0},
		{math.MaxInt64, 0.5, 1 << 62},
	} {
		if got := Jitter(tc.window, tc.u); got != tc.want {
			t.Errorf("Jitter(%v, %v) = %v, want %v", tc.window, tc.u, got, tc.want)
		}
	}
	for range 1000 {
		u := rand.Float64()
		if got := Jitter(time.Minute, u); got < 0 || got >= time.Minute {
			t.Fatalf("Jitter(1m, %v) = %v, outside [0, 1m)", u, got)
		}
	}
}

// TestWakeEarly walks the early wake of a deferral into a learned
// concurrency limit's slots (decide's rule 3), one step per row: the
// start of the second the wait ends in, unless that second has begun.
func TestWakeEarly(t *testing.T) {
	const ms = time.Millisecond
	at := func(d time.Duration) time.Time { return time.Unix(1_700_000_000, 0).Add(d) }
	for _, tc := range []struct {
		name string
		now  time.Time
		wait time.Duration
		want time.Duration
	}{
		{"ends in a later second: its start", at(120 * ms), 1030 * ms, 880 * ms},
		{"ends on a second: that second", at(120 * ms), 880 * ms, 880 * ms},
		{"ends two seconds on: the later second's start", at(900 * ms), 2300 * ms, 2100 * ms},
		{"ends within the second begun: the wait", at(100 * ms), 500 * ms, 500 * ms},
		{"now on a second, ends within it: the wait", at(0), 999 * ms, 999 * ms},
		{"now on a second, ends on the next: it", at(0), time.Second, time.Second},
		{"no wait", at(300 * ms), 0, 0},
	} {
		if got := WakeEarly(tc.now, tc.wait); got != tc.want {
			t.Errorf("%s: WakeEarly = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Only a pause that reopens into the learned concurrency limit's
	// slots wakes early: its slots pace the reopening, not the arrivals.
	paused := Answer{Code: model.Paused, Wait: time.Second, Until: at(time.Second), Now: at(0)}
	plain := Policy{MaxHold: 1500 * ms, Jitter: time.Second, MaxHolders: 12}
	if v := Decide(paused, plain, 0); v.Early {
		t.Errorf("a plain short pause wakes early: %+v", v)
	}
	paused.Slots = true
	if v := Decide(paused, plain, 0); !v.Early || v.Act != HoldPause {
		t.Errorf("a short pause into the slots: %+v, want HoldPause, early", v)
	}
}
