package quotagate

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// Refusal is the error a handler returns, or wraps, when the provider refused
// a request for its quota (HTTP 429, or 503 with a Retry-After). Hint is the
// provider's retry hint (see hint.From); 0 means none could be read.
//
// The Middleware records the refusal as a pause of the task's scope (Hint,
// or Config.FallbackPause when there is none) and fills in Until, the shared
// deadline in force afterwards. RetryDelay then retries the refused task no
// sooner than that deadline, and no sooner than its own hint or, without a
// hint, the fallback schedule. A refusal counts as a failure: it spends one
// of the task's retries.
//
// Wrap it with %w to add context; note that a message built with
// fmt.Errorf is fixed when the handler returns, before the Middleware fills
// in Until, so only Error() of the *Refusal itself shows the deadline.
type Refusal struct {
	Hint time.Duration
	Err  error // the provider's error, optional

	// Set by the Middleware after recording: the shared deadline in force
	// (Redis TIME) and how long remained until it. Zero when the pause could
	// not be recorded.
	Until     time.Time
	Remaining time.Duration
}

func (r *Refusal) Error() string {
	msg := "quotagate: provider refused the request"
	if r.Hint > 0 {
		msg += fmt.Sprintf(" (retry hint %v)", r.Hint)
	} else {
		msg += " (no readable retry hint)"
	}
	if !r.Until.IsZero() {
		msg += fmt.Sprintf("; scope paused until %s", r.Until.UTC().Format(time.RFC3339Nano))
	}
	if r.Err != nil {
		msg += ": " + r.Err.Error()
	}
	return msg
}

func (r *Refusal) Unwrap() error { return r.Err }

// Deferral is the error the Middleware returns instead of running the
// handler (and Transport instead of sending a request) when the scope is
// paused, over its limit, or (with Config.FailClosed) when the store cannot
// answer. It is not a failure: it never spends a retry (see IsFailure), and
// RetryDelay retries the task after Delay, rounded so it never wakes before
// Until. Its message is what asynqmon shows as the task's last error.
type Deferral struct {
	Scope  Scope
	Delay  time.Duration // how long the task waits, measured by Redis TIME
	Until  time.Time     // when it may run again: its slot after the pause or limit
	Reason Reason

	// Deadline is the provider's pause deadline in force (ReasonPaused);
	// Until may be later, spread after it. Zero for other reasons.
	Deadline time.Time
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
)

func (r Reason) String() string {
	switch r {
	case ReasonPaused:
		return "paused"
	case ReasonLimited:
		return "limited"
	case ReasonStoreDown:
		return "store unavailable"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

func (d *Deferral) Error() string {
	wait := fmt.Sprintf("deferred %v, until %s, before calling the provider",
		d.Delay.Round(time.Millisecond), d.Until.UTC().Format(time.RFC3339Nano))
	switch d.Reason {
	case ReasonLimited:
		return fmt.Sprintf("quotagate: %s is at its throughput limit; %s", d.Scope, wait)
	case ReasonStoreDown:
		return fmt.Sprintf("quotagate: gate store unavailable for %s, failing closed; %s", d.Scope, wait)
	}
	deadline := d.Deadline
	if deadline.IsZero() {
		deadline = d.Until
	}
	left := deadline.Sub(d.Until.Add(-d.Delay)).Round(time.Millisecond)
	return fmt.Sprintf("quotagate: %s is paused by the provider until %s (%v left); %s",
		d.Scope, deadline.UTC().Format(time.RFC3339Nano), left, wait)
}

// IsFailure is for asynq.Config.IsFailure: it returns false for a Deferral
// (wrapped or not), so a deferral never spends a retry, and true for any
// other error. A Refusal is a failure.
func IsFailure(err error) bool {
	var d *Deferral
	return !errors.As(err, &d)
}

// exhausted marks a real failure past the user's MaxRetry of a task that
// carries NewTask's retry reserve: asynq archives it (SkipRetry) with the
// original message.
type exhausted struct{ err error }

func (e exhausted) Error() string   { return e.err.Error() }
func (e exhausted) Unwrap() []error { return []error{e.err, asynq.SkipRetry} }
