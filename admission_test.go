package quotagate

import (
	"testing"
	"time"
)

// TestDecide walks the admission decision through its rules, one step per
// row, in the manner of x/time/rate's reserveN tests: the script's answer,
// the policy and the random draw in; what the gate does out.
func TestDecide(t *testing.T) {
	const ms = time.Millisecond
	now := t0
	deadline := func(d time.Duration) time.Time { return now.Add(d) }
	ans := func(code int64, wait time.Duration, until time.Time) admission {
		return admission{code: code, wait: wait, until: until, now: now}
	}
	plain := policy{maxHold: 1500 * ms, jitter: time.Second}
	withLimit := plain
	withLimit.limited = true
	last := plain
	last.mustHold = true
	noHold := policy{jitter: time.Second}

	for _, tc := range []struct {
		name   string
		a      admission
		p      policy
		u      float64
		act    act
		wait   time.Duration
		retry  time.Duration // deferral's RetryAt - now (for holdPause and deferTask)
		reason Reason
	}{
		{"open: run now", ans(admitted, 0, time.Time{}), plain, 0.5, run, 0, 0, 0},
		{"slot reserved ahead: run after it", ans(admitted, 400*ms, time.Time{}), withLimit, 0.5, run, 400 * ms, 0, 0},
		{"short pause: hold a place", ans(paused, time.Second, deadline(time.Second)), plain, 0.5, holdPause, time.Second, time.Second, ReasonPaused},
		{"pause at exactly maxHold: hold", ans(paused, 1500*ms, deadline(1500*ms)), plain, 0.99, holdPause, 1500 * ms, 1500 * ms, ReasonPaused},
		{"long pause, no limit: defer with jitter", ans(paused, 9*time.Second, deadline(9*time.Second)), plain, 0.5, deferTask, 9*time.Second + 450*ms, 9*time.Second + 450*ms, ReasonPaused},
		{"long pause, jitter capped", ans(paused, time.Minute, deadline(time.Minute)), plain, 0.5, deferTask, time.Minute + 500*ms, time.Minute + 500*ms, ReasonPaused},
		{"long pause, u=0: at the deadline", ans(paused, 9*time.Second, deadline(9*time.Second)), plain, 0, deferTask, 9 * time.Second, 9 * time.Second, ReasonPaused},
		{"holding disabled: even a short pause defers", ans(paused, time.Second, deadline(time.Second)), noHold, 0, deferTask, time.Second, time.Second, ReasonPaused},
		{"paused with a limit: slot after deadline, woken maxHold early", ans(paused, 12*time.Second, deadline(10*time.Second)), withLimit, 0.5, deferTask, 10500 * ms, 10500 * ms, ReasonPaused},
		{"paused with a limit: never before the deadline", ans(paused, 10200*ms, deadline(10*time.Second)), withLimit, 0.5, deferTask, 10 * time.Second, 10 * time.Second, ReasonPaused},
		{"limited: slot woken maxHold early", ans(limited, 5*time.Second, time.Time{}), withLimit, 0.5, deferTask, 3500 * ms, 3500 * ms, ReasonLimited},
		{"last attempt: hold a long pause (with jitter)", ans(paused, 9*time.Second, deadline(9*time.Second)), last, 0.5, hold, 9*time.Second + 450*ms, 0, 0},
		{"last attempt: hold a limited slot", ans(limited, 5*time.Second, time.Time{}), policy{maxHold: 1500 * ms, limited: true, mustHold: true}, 0.5, hold, 5 * time.Second, 0, 0},
	} {
		v := decide(tc.a, tc.p, tc.u)
		if v.act != tc.act || v.wait != tc.wait {
			t.Errorf("%s: decide = act %d wait %v; want act %d wait %v", tc.name, v.act, v.wait, tc.act, tc.wait)
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
