package quotagate

import (
	"errors"
	"time"

	"github.com/hibiken/asynq"
)

// RetryDelay returns the asynq.RetryDelayFunc that schedules the tasks the
// gate deferred or the provider refused; every other error goes to next
// (asynq.DefaultRetryDelayFunc when next is nil).
//
// For a *Deferral it is the deferral's Delay. For a *Refusal it is the
// longer of the task's own delay and what is left of the shared pause that
// was in force after recording it; the own delay is the hint clamped to
// [MinPause, MaxPause].
// A refusal without a hint follows the shared pause alone (the scope's
// hintless episode, Config.FallbackPause, knows when it asks the provider
// again); only when the pause could not be recorded (the store failed) does
// it wait the fallback schedule by attempt (n is asynq's retry count, so
// attempt = n+1):
//
//	attempt  1     2     3    4    5    6     7
//	delay   15m   30m   1h   2h   4h   8h   12h (cap)
//
// asynq stores retry times in whole Unix seconds, truncated, so a delay is
// rounded up to the next whole second of the worker's clock: a
// task never wakes before its deadline and re-checks at most once per pause.
// (One exception: a task deferred by a pause that reopens into a learned
// concurrency limit's slots wakes at the start of the deadline's second,
// to be queued when the slots open; see decide.WakeEarly.)
// It then waits up to asynq's DelayedTaskCheckInterval (default 5 s) more to
// be forwarded: set it to 500 ms (below Tuning.MaxHold; see the README).
func (g *Gate) RetryDelay(next asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if next == nil {
		next = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		var d *Deferral
		if errors.As(err, &d) {
			if !d.wake.IsZero() {
				return max(d.wake.Sub(g.now()), 0) // a whole second: asynq truncates what it adds after
			}
			return g.align(d.Delay)
		}
		var r *Refusal
		if errors.As(err, &r) {
			var shared time.Duration // the pause in force after recording it
			rec := (*recorded)(nil)
			known := errors.As(err, &rec)
			if known {
				shared = rec.remaining(g.now())
			}
			var own time.Duration
			switch {
			case r.Hint > 0:
				own = g.clamp(r.Hint)
			case !known: // the scope's pause is not known: back off alone
				own = backoff(g.cfg.FallbackBase, g.cfg.FallbackCap, max(n+1, n)) // n+1 overflows at MaxInt
			}
			return g.align(max(own, shared))
		}
		return next(n, err, t)
	}
}

// backoff returns base·2^(attempt-1) capped at limit (attempt < 1 counts as
// 1), computed without overflow.
func backoff(base, limit time.Duration, attempt int) time.Duration {
	d := max(base, 0)
	for i := 1; i < attempt && d < limit; i++ {
		if d > limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}

// align rounds d up so that now+d falls on a whole second: asynq truncates
// retry times to whole seconds, and this way truncation cannot wake a task
// early.
func (g *Gate) align(d time.Duration) time.Duration {
	now := g.now()
	at := now.Add(max(d, 0))
	sec := at.Truncate(time.Second)
	if sec.Before(at) {
		sec = sec.Add(time.Second)
	}
	return sec.Sub(now)
}
