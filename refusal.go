package quotagate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
	"github.com/quotagate/quotagate/internal/store"
)

// Refusal is the error a handler returns, or wraps, when the provider refused
// a request for its quota (HTTP 429, or 503 with a Retry-After). Hint is the
// provider's retry hint (see package hint); 0 means none could be read.
//
// A refusal becomes shared state: the Middleware records it as a pause of
// the task's scope (Hint, or when there is none the scope's hintless pause,
// 1 second doubling up to Config.FallbackPause, 12 hours, while the
// provider refuses), once per refusal (a refusal the Transport already
// recorded during the task is not recorded again), and returns the
// handler's error wrapped with the deadline now in force; the Refusal
// itself is never modified. RetryDelay then retries the refused task no
// sooner than that deadline, and no sooner than its own hint (without one,
// and without a recorded pause, the fallback schedule).
//
// A refusal counts as a failure: it spends one of the task's retries (a
// Deferral spends none). While a provider refuses without a hint, each
// pause ends with one probe, and its task may be the same each time: a
// task with MaxRetry n rides out n pauses (a day holds 17 of them from
// the first refusal; asynq's default 25 last about five days).
type Refusal struct {
	Hint time.Duration
	Err  error // the provider's error, optional
}

func (r *Refusal) Error() string {
	msg := "quotagate: provider refused the request"
	if r.Hint > 0 {
		msg += fmt.Sprintf(" (retry hint %v)", r.Hint)
	} else {
		msg += " (no readable retry hint)"
	}
	if r.Err != nil {
		msg += ": " + r.Err.Error()
	}
	return msg
}

func (r *Refusal) Unwrap() error { return r.Err }

// recorded wraps the error of a handler that returned a Refusal, with the
// scope's pause in force after recording it. Its message is the handler's
// followed by the deadline, as asynqmon shows it; RetryDelay reads the pause.
type recorded struct {
	err   error
	pause Pause
	at    time.Time // when the pause was read, by the gate's clock: Remaining is from then (zero: now)
}

// remaining is what is left at now of the pause in force when it was
// recorded: a delay computed from Remaining later, as asynq asks for it,
// would wake the task that much after the deadline, a whole second
// after it when the gap crosses one (Gate.align).
func (r *recorded) remaining(now time.Time) time.Duration {
	if r.at.IsZero() {
		return r.pause.Remaining
	}
	return max(r.pause.Remaining-now.Sub(r.at), 0)
}

// wrapping is r as the error err returns: the pause in force after err.
func (r recorded) wrapping(err error) *recorded {
	r.err = err
	return &r
}

func (r *recorded) Error() string {
	return fmt.Sprintf("%s; scope paused until %s", r.err.Error(), r.pause.Until.UTC().Format(time.RFC3339Nano))
}

func (r *recorded) Unwrap() error { return r.err }

// record pauses s (keys k) for a refusal whose hint is hint (0: none
// readable; alt, the hint read as milliseconds when it may be, 0 when not:
// refusal.alt) and returns the pause in force as read (its error not set:
// recorded.wrapping), or false when the store could not record it. It
// runs even when the task's context has ended: the refusal happened.
func (g *Gate) record(ctx context.Context, s Scope, k schema.Keys, hint, alt time.Duration, gr grant) (*recorded, bool) {
	d := hint
	facts := store.Refusal{Hinted: hint > 0, Precision: time.Millisecond, Level: gr.level, Mark: gr.mark, Opens: gr.opens}
	if hint > 0 && alt > 0 {
		facts.Alt = g.clamp(alt)
	}
	if d <= 0 {
		d = g.cfg.FallbackPause // the cap of the scope's hintless pause (internal/model/fallback.go)
	}
	if hint%time.Second == 0 {
		facts.Precision = time.Second // "try again in 5 seconds": read to the second
	}
	g.open.Ask(k.Pause) // before the round trip: this worker stops at once
	counts := g.uncounted.Take(k.Pause)
	facts.Counts, facts.CountsAge = counts.N, counts.Age(g.now())
	rec, err := g.store.Pause(context.WithoutCancel(ctx), k, g.clamp(d), facts, specs(g.limitsOf(s))...)
	until, rem, at := rec.Until, rec.Remaining, g.now()
	if err != nil {
		g.uncounted.Add(k.Pause, counts)
		g.cfg.Logger.Error("quotagate: could not record a refusal; the refused task still waits its own delay",
			"scope", s.String(), "hint", hint, "err", err)
		return nil, false
	}
	switch {
	case rec.Own: // the scope is not paused: the refused task waits its own hint
		g.metrics.InFlightRefusal(s.Provider)
		g.cfg.Logger.Debug("quotagate: provider refused a request too many in flight; its learned concurrency limit is lowered",
			"scope", s.String(), "hint", hint, "until", until, "level", gr.level)
		return &recorded{pause: Pause{Scope: s, Until: until, Remaining: rem, Reason: ReasonPaused}, at: at}, true
	case rec.Moved:
		g.metrics.Refusal(s.Provider)
		g.notePause(k, until, rem, false)
		attrs := []any{"scope", s.String(), "hint", hint, "remaining", rem, "until", until, "level", gr.level}
		if facts.Alt > 0 { // the hint may be milliseconds: until says which was read
			attrs = append(attrs, "hint_as_ms", facts.Alt)
		}
		g.cfg.Logger.Info("quotagate: provider refused, scope paused", attrs...)
	default: // a request already on its way when the scope paused
		g.metrics.Refusal(s.Provider)
		g.notePause(k, until, rem, false)
		g.cfg.Logger.Debug("quotagate: provider refused a request sent before the pause", "scope", s.String(), "hint", hint,
			"until", until, "level", gr.level, "absorbed", g.absorbed.Add(k.Pause+" "+until.String()))
	}
	return &recorded{pause: Pause{Scope: s, Until: until, Remaining: rem, Reason: ReasonPaused}, at: at}, true
}

// Deferral is the error the Middleware returns instead of running the
// handler (and Transport instead of sending a request) when the scope is
// paused, over its limit, or (with Config.FailClosed) when the store cannot
// answer. It is not a failure: it never spends a retry (see IsFailure), and
// RetryDelay retries the task after Delay, rounded so it never wakes before
// RetryAt (Delay is then a whole second ahead already when the task wakes
// early, at the start of its deadline's second, into a learned
// concurrency limit's slots). Its message is what asynqmon shows as the task's last error.
type Deferral struct {
	Scope   Scope
	Delay   time.Duration // how long the task waits, measured by Redis TIME
	RetryAt time.Time     // when it comes back: its slot after the pause or limit
	Reason  Reason
	Class   Class // of the deferred task

	// Deadline is the deadline in force (ReasonPaused: the pause's;
	// ReasonBudget: the budget's reset); RetryAt may be earlier (to be
	// waiting when it ends) or later (spread after it). Zero for other
	// reasons.
	Deadline time.Time

	// Operator is set when the pause in force was set by Gate.Pause (an
	// operator), not by a provider's refusal.
	Operator bool

	wake time.Time // the whole second it wakes at, on the worker's clock, when it wakes early (decide.WakeEarly)
}

// Reason tells why a task was deferred.
type Reason int

const (
	// ReasonPaused: the provider refused a peer and the scope is paused.
	ReasonPaused Reason = iota
	// ReasonLimited: the scope's throughput limit has no capacity now.
	ReasonLimited
	// ReasonStoreDown: the store did not answer and the gate fails closed.
	ReasonStoreDown
	// ReasonBudget: the budget the provider advertises is spent until its
	// reset.
	ReasonBudget
	// ReasonProbe: the budget's reset has passed and one request went to
	// ask the provider what the new window holds; the others wait for its
	// answer (at most Tuning.MaxHold and one second).
	ReasonProbe
	// ReasonLearned: the limit the scope learned from refusals has no
	// capacity until its next window.
	ReasonLearned
	// ReasonInFlight: a Concurrent limit of the scope has every slot
	// taken by requests in flight, or the scope starts slowly (a provider
	// that advertises nothing, of which nothing was learned: each answer
	// lets two more requests go; see internal/model/start.go).
	ReasonInFlight
)

// publicReason names a model's reason.
func publicReason(r model.Reason) Reason {
	switch r {
	case model.ReasonBudget:
		return ReasonBudget
	case model.ReasonProbe:
		return ReasonProbe
	case model.ReasonLimit:
		return ReasonLimited
	case model.ReasonLearned:
		return ReasonLearned
	case model.ReasonInFlight:
		return ReasonInFlight
	}
	return ReasonPaused
}

func (r Reason) String() string {
	switch r {
	case ReasonPaused:
		return "paused"
	case ReasonLimited:
		return "limited"
	case ReasonStoreDown:
		return "store unavailable"
	case ReasonBudget:
		return "budget spent"
	case ReasonProbe:
		return "probing"
	case ReasonLearned:
		return "learned limit"
	case ReasonInFlight:
		return "in flight"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

func (d *Deferral) Error() string {
	return fmt.Sprintf("quotagate: %s %s; back at %s, no retry spent (scope %s, %s)",
		d.Scope.Provider, d.why(), d.back().UTC().Format(RFC3339Milli), d.Scope, d.Class)
}

// why says, in a few words, what holds the scope back.
func (d *Deferral) why() string {
	switch d.Reason {
	case ReasonPaused:
		if d.Operator {
			return "paused by an operator"
		}
		return "paused by the provider"
	case ReasonBudget:
		return "budget spent until its reset"
	case ReasonProbe:
		return "waiting for the provider to say what its new window holds"
	case ReasonLimited:
		return "at its configured limit"
	case ReasonLearned:
		return "at the limit it learned from refusals"
	case ReasonInFlight:
		return "at its limit of requests in flight"
	case ReasonStoreDown:
		return "gate store unavailable (failing closed)"
	}
	return d.Reason.String()
}

// back is when asynq brings the task back: RetryAt rounded up to the
// whole second, as RetryDelay schedules it (asynq keeps whole seconds), the
// instant asynqmon's Retry In counts down to.
func (d *Deferral) back() time.Time {
	t := d.RetryAt.Truncate(time.Second)
	if t.Before(d.RetryAt) {
		t = t.Add(time.Second)
	}
	return t
}

// IsFailure is for asynq.Config.IsFailure: it returns false for a Deferral
// (wrapped or not), so a deferral never spends a retry, and true for any
// other error. A Refusal is a failure.
func IsFailure(err error) bool {
	var d *Deferral
	return !errors.As(err, &d)
}
