package quotagate

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// Refusal is the error a handler returns, or wraps, when the provider refused
// a request for its quota (HTTP 429, or 503 with a Retry-After). Hint is the
// provider's retry hint (see HintFrom); 0 means none could be read.
//
// The Middleware records the refusal as a pause of the task's scope (Hint,
// or Config.FallbackPause when there is none) and fills in Until, the shared
// deadline in force afterwards. RetryDelay then retries the refused task no
// sooner than that deadline, and no sooner than its own hint or, without a
// hint, the fallback schedule. A refusal counts as a failure: it spends one
// of the task's retries.
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
// handler, when the task's scope is paused, over its limit, or (with
// Config.FailClosed) when the store cannot answer. It is not a failure: it
// never spends a retry (see IsFailure), and RetryDelay retries the task after
// Delay, rounded so it never wakes before Until. Its message is what asynqmon
// shows as the task's last error.
type Deferral struct {
	Scope  Scope
	Delay  time.Duration // how long the task waits, measured by Redis TIME
	Until  time.Time     // when it may run again (a pause deadline or its slot)
	Reason Reason
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
	until := d.Until.UTC().Format(time.RFC3339Nano)
	delay := d.Delay.Round(time.Millisecond)
	switch d.Reason {
	case ReasonLimited:
		return fmt.Sprintf("quotagate: %s is at its throughput limit; deferred %v, next slot %s (handler not run)", d.Scope, delay, until)
	case ReasonStoreDown:
		return fmt.Sprintf("quotagate: gate store unavailable for %s, failing closed; deferred %v until %s (handler not run)", d.Scope, delay, until)
	}
	return fmt.Sprintf("quotagate: %s is paused by the provider for %v more, until %s; deferred (handler not run)", d.Scope, delay, until)
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
