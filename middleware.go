package quotagate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// Middleware returns the asynq middleware that keeps the peers of a refused
// task quiet. Register it on the ServeMux (mux.Use) together with RetryDelay
// and IsFailure in asynq.Config.
//
// For a task that carries a scope (NewTask), before the handler runs, one
// Redis round trip asks whether the scope is paused and whether its limit has
// capacity:
//
//   - open: the handler runs, with the scope in its context (see Transport).
//   - a wait of at most Config.MaxHold (a slot of the limit, or the end of a
//     short pause): the worker waits in-process, then runs (a pause is
//     checked once more when it ends).
//   - a longer wait: the handler does not run, so no client is resolved and
//     no request is sent; the middleware returns a *Deferral and asynq
//     retries the task after Deferral.Delay without spending a retry.
//
// When the handler returns a *Refusal (or an error wrapping one), the
// middleware records the pause for the whole scope and returns the refusal
// with the deadline now in force. Tasks without a scope pass through.
//
// A deferral on a task's last attempt would be archived by asynq, whatever
// IsFailure says; NewTask reserves one retry for deferrals so that never
// happens. A task without that reserve (MaxRetry overridden at Enqueue)
// waits in-process on its last attempt instead, bounded by its context.
func (g *Gate) Middleware() asynq.MiddlewareFunc {
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			s, ok := ScopeOf(t)
			if !ok {
				return next.ProcessTask(ctx, t)
			}
			if err := s.Validate(); err != nil {
				return exhausted{err}
			}
			retried, _ := asynq.GetRetryCount(ctx)
			maxRetry, inAsynq := asynq.GetMaxRetry(ctx)
			budget, reserved := userMaxRetry(t)
			// The reserve is there only if Client.Enqueue did not override
			// NewTask's MaxRetry; an override is the user's budget.
			reserved = reserved && maxRetry == budget+1
			lastAttempt := inAsynq && !reserved && retried >= maxRetry

			if err := g.admit(ctx, s, g.cost(t), lastAttempt); err != nil {
				return err
			}
			err := next.ProcessTask(withAdmission(ctx, s, lastAttempt), t)
			if err == nil {
				return nil
			}
			var r *Refusal
			if errors.As(err, &r) {
				g.record(ctx, s, r)
			}
			if reserved && IsFailure(err) && retried >= budget {
				return exhausted{err}
			}
			return err
		})
	}
}

func (g *Gate) cost(t *asynq.Task) int {
	if g.cfg.Cost == nil {
		return 1
	}
	return max(g.cfg.Cost(t), 1)
}

// admit returns nil once s may spend cost units now, waiting in-process for
// short waits (or any wait when mustHold), or a *Deferral for longer waits.
func (g *Gate) admit(ctx context.Context, s Scope, cost int, mustHold bool) error {
	k := scopeKeys(g.cfg.Prefix, s)
	l := g.limitOf(s)
	if l.IsZero() && g.open.fresh(k.pause) {
		g.metrics.admission(s.Provider, outcomeAdmitted)
		return nil
	}
	for {
		gen := g.open.begin()
		a, err := g.store.admit(ctx, k, l, cost, g.cfg.MaxHold)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return g.storeFailed(s, "admit", err)
		}
		wait := a.wait
		if a.code == paused && l.IsZero() && wait > g.cfg.MaxHold {
			wait += Jitter(min(g.cfg.ReopenJitter, wait/10), g.cfg.Rand())
		}
		if a.code == admitted {
			if l.IsZero() {
				g.open.remember(k.pause, gen)
			}
			g.metrics.admission(s.Provider, outcomeAdmitted)
			return sleep(ctx, wait)
		}
		// A slot of the limit within MaxHold was reserved by the script
		// (admitted above); what is left to wait in-process is a short pause,
		// by at most MaxHolders workers.
		held := !mustHold && a.code == paused && wait <= g.cfg.MaxHold && g.holders.acquire(k.pause, g.cfg.MaxHolders)
		if !mustHold && !held {
			if !l.IsZero() {
				// A slot in the line is a place to come back to, not a
				// deadline: wake up to MaxHold before it (never before a
				// pause deadline) and wait the rest in-process, so asynq's
				// whole-second wake-ups leave no gap in the pace.
				wait = max(wait-g.cfg.MaxHold, a.until.Sub(a.now))
			}
			d := &Deferral{Scope: s, Delay: wait, Until: a.now.Add(wait), Reason: ReasonPaused, Deadline: a.until}
			if a.code == limited {
				d.Reason = ReasonLimited
			}
			g.metrics.admission(s.Provider, deferredOutcome(d.Reason))
			return d
		}
		g.metrics.admission(s.Provider, outcomeHeld)
		err = sleep(ctx, wait)
		if held {
			g.holders.release(k.pause)
		}
		if err != nil {
			return err
		}
	}
}

// holders counts, per scope, the workers of this process waiting in-process
// for a pause to end, so that one paused provider cannot take every worker
// from the others (Config.MaxHolders).
type holders struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *holders) acquire(k string, limit int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[k] >= limit {
		return false
	}
	if h.n == nil {
		h.n = make(map[string]int)
	}
	h.n[k]++
	return true
}

func (h *holders) release(k string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[k]--; h.n[k] <= 0 {
		delete(h.n, k)
	}
}

// storeFailed applies the fail-open or fail-closed policy to a store error.
func (g *Gate) storeFailed(s Scope, op string, err error) error {
	if g.cfg.FailClosed {
		g.metrics.admission(s.Provider, outcomeFailClosed)
		g.cfg.Logger.Error("quotagate: store unavailable, deferring task (fail closed)",
			"op", op, "scope", s.String(), "delay", g.cfg.FailClosedDelay, "err", err)
		return &Deferral{Scope: s, Delay: g.cfg.FailClosedDelay, Until: g.cfg.Now().Add(g.cfg.FailClosedDelay), Reason: ReasonStoreDown}
	}
	g.metrics.admission(s.Provider, outcomeFailOpen)
	g.cfg.Logger.Warn("quotagate: store unavailable, running task unchecked (fail open)",
		"op", op, "scope", s.String(), "err", err)
	return nil
}

// record pauses the scope of a refusal and fills in the deadline in force.
// It runs even when the task's context has ended: the refusal happened.
func (g *Gate) record(ctx context.Context, s Scope, r *Refusal) {
	d := r.Hint
	if d <= 0 {
		d = g.cfg.FallbackPause
	}
	p, err := g.Pause(context.WithoutCancel(ctx), s, d)
	if err != nil {
		g.cfg.Logger.Error("quotagate: could not record a refusal; the refused task still waits its own delay",
			"scope", s.String(), "hint", r.Hint, "err", err)
		return
	}
	r.Until, r.Remaining = p.Until, p.Remaining
	g.metrics.refusal(s.Provider)
	g.cfg.Logger.Info("quotagate: provider refused, scope paused",
		"scope", s.String(), "hint", r.Hint, "remaining", p.Remaining, "until", p.Until)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("quotagate: waiting for the gate: %w", ctx.Err())
	}
}
