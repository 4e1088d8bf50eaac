package tracking

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
)

// Handler is the asynq handler of poll tasks. Register it behind the gate:
//
//	mux := asynq.NewServeMux()
//	mux.Use(gate.Middleware())
//	mux.Handle(tracking.TypePoll, &tracking.Handler{Resolver: r, Report: save})
//
// with gate.RetryDelay(nil) and quotagate.IsFailure in the asynq.Config. The
// middleware runs first: while the task's scope is paused (or over its
// limit) the handler does not run at all, so no client is resolved and no
// request is sent.
//
// A poll resolves the client for the task's carrier and credential
// fingerprint, polls once and reports the result. The carrier's 429 comes
// back from the client as a *quotagate.Refusal, which the handler returns
// (wrapped) for the middleware to record as the scope's pause. An unknown
// number or a malformed task is not retried (asynq.SkipRetry); any other
// error is retried on asynq's schedule.
type Handler struct {
	// Resolver returns the client of a carrier credential. Required.
	Resolver ClientResolver

	// Report receives every successful poll, delivered or not (see the
	// package doc for what happens next). An error fails the task, which is
	// then retried. nil drops results.
	Report func(ctx context.Context, p Poll, r Result) error
}

// ProcessTask polls the number of t once.
func (h *Handler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	p, err := ParsePoll(t)
	if err != nil {
		return err
	}
	client, err := h.Resolver.Resolve(ctx, p.Carrier, p.Key)
	if err != nil {
		return fmt.Errorf("tracking: resolve client of %s: %w", p.Carrier, err)
	}
	res, err := client.Track(ctx, p.Number)
	if errors.Is(err, ErrUnknownNumber) {
		return &PollError{Carrier: p.Carrier, Number: p.Number, Err: fmt.Errorf("%w: %w", err, asynq.SkipRetry)}
	}
	if err != nil {
		return &PollError{Carrier: p.Carrier, Number: p.Number, Err: err}
	}
	if h.Report == nil {
		return nil
	}
	return h.Report(ctx, p, res)
}

// PollError is a failed poll: the carrier and number, and the cause (a
// *quotagate.Refusal for a 429, which the gate's middleware records as the
// scope's pause and wraps with the deadline in force).
type PollError struct {
	Carrier, Number string
	Err             error
}

// Error returns "tracking: poll <carrier> <number>: " and the cause.
func (e *PollError) Error() string {
	return "tracking: poll " + e.Carrier + " " + e.Number + ": " + e.Err.Error()
}

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *PollError) Unwrap() error { return e.Err }
