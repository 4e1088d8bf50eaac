package quotagate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/quotagate/quotagate/internal/decide"
	"github.com/quotagate/quotagate/internal/local"
	"github.com/quotagate/quotagate/internal/metrics"
	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"

	"github.com/hibiken/asynq"
)

// Middleware returns the asynq middleware that keeps the peers of a refused
// task quiet. Register it on the ServeMux (mux.Use) together with RetryDelay
// and IsFailure in asynq.Config.
//
// For a task that carries a scope (NewTask), before the handler runs, the
// gate asks whether the scope is paused and whether its limit has capacity
// (internal/decide says what it does with the answer): a Redis round trip, or none
// for a scope with nothing configured that the feed of pauses does not
// name (local.OpenCache), once the feed, started here, has caught up:
//
//   - open: the handler runs, with the scope in its context (see Transport).
//   - a wait of at most Tuning.MaxHold (a slot of the limit, or the end of a
//     short pause): the worker waits in-process, then runs (a pause is
//     checked once more when it ends).
//   - a longer wait: the handler does not run, so no client is resolved and
//     no request is sent; the middleware returns a *Deferral and asynq
//     retries the task after Deferral.Delay without spending a retry.
//
// When the handler returns a *Refusal (or an error wrapping one), the
// middleware records the pause for the whole scope, unless the Transport
// already recorded it, and returns the error wrapped with the deadline in
// force. A task whose scope is invalid is archived (logged, without its
// account). Tasks without a scope pass through.
//
// A deferral on a task's last attempt would be archived by asynq, whatever
// IsFailure says; NewTask reserves one retry for deferrals so that never
// happens. A task without that reserve (MaxRetry overridden at Enqueue)
// waits in-process on its last attempt instead, bounded by its context.
func (g *Gate) Middleware() asynq.MiddlewareFunc {
	g.open.Begin() // the feed catches up while asynq's workers start: the first tasks need no round trip
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			s, ok := ScopeOf(t)
			if !ok {
				g.holders.Enter("", g.now()) // another scope's task, for the waiters' share
				g.inside.Add(1)              // and a worker, for the share
				defer g.inside.Add(-1)
				return next.ProcessTask(ctx, t)
			}
			if err := s.Validate(); err != nil {
				g.cfg.Logger.Error("quotagate: archiving a task whose scope is invalid", "type", t.Type(), "err", err)
				return exhausted{err}
			}
			g.inside.Add(1)
			defer g.inside.Add(-1)
			if err := g.checkCost(s, t); err != nil {
				g.cfg.Logger.Error("quotagate: archiving a task whose cost no limit can ever admit", "type", t.Type(), "provider", s.Provider, "err", err)
				return exhausted{err}
			}
			at := attemptOf(ctx, t)
			k := scopeKeys(g.cfg.Prefix, s)
			g.holders.Enter(k.Pause, g.now())
			c := g.classOf(ctx, t)
			gr, err := g.admission(ctx, s, k, g.cost(t), at.last, c, true)
			if err != nil {
				return err
			}
			if n := g.inflight.Enter(k.Pause, int64(g.cost(t))); gr.level == 0 {
				gr.level = n // the scope's records know no level: this process's (a lower bound)
			}
			defer g.inflight.Leave(k.Pause, int64(g.cost(t)))
			ta := &taskAdmission{keys: k, mustHold: at.last, grant: gr, class: c}
			ta.unspent.Store(true)
			defer g.releaseTask(ctx, s, ta) // every path: a return, a refusal, a panic
			err = next.ProcessTask(withAdmission(ctx, s, ta), t)
			var r *Refusal
			if !errors.As(err, &r) && ta.refused.Load() == nil {
				g.answer(ctx, s, ta)
			}
			if errors.As(err, &r) {
				err = g.refused(ctx, s, err, r.Hint, ta)
			}
			return at.settle(err)
		})
	}
}

// answer tells the scope that the task whose admission opened a learned
// window (or went in a slow start, or as a hintless episode's probe) was
// not refused, unless its Transport told it already: the provider's
// window began with it (see learnState.answer).
func (g *Gate) answer(ctx context.Context, s Scope, ta *taskAdmission) {
	if ta.grant.opens == 0 || !ta.answered.CompareAndSwap(false, true) {
		return
	}
	_ = g.tellAnswer(ctx, s, ta.keys, model.Observation{Remaining: -2, Opened: ta.grant.opens}) // logged
}

// releaseTask releases the lease of the task's admission, unless its
// first request's Transport released it already.
func (g *Gate) releaseTask(ctx context.Context, s Scope, ta *taskAdmission) {
	if ta.grant.lease != "" && ta.released.CompareAndSwap(false, true) {
		g.release(ctx, s, ta.keys, ta.grant, ta.refused.Load() == nil && !ta.refusal.Load())
	}
}

// release ends the lease of the admission gr on the concurrency limits of
// s (a request's response arrived, or its handler returned; answered: it
// was not refused, which a learned concurrency limit counts), and wakes as
// many of this process's workers waiting for a slot of s. A release the
// store fails is tried once more, in the background, StoreTimeout later
// (a store that stalled a moment, as a loaded machine's does, answers
// again), and then logged: the lease expires by itself (Limit.Period), its
// slot lost until then.
func (g *Gate) release(ctx context.Context, s Scope, k schema.Keys, gr grant, answered bool) {
	if gr.lease == "" {
		return
	}
	ctx, ls := context.WithoutCancel(ctx), specs(g.limitsOf(s))
	if _, err := g.store.Release(ctx, k, gr.lease, gr.cost, ls, answered); err != nil {
		go func() {
			time.Sleep(g.cfg.StoreTimeout)
			if _, err := g.store.Release(ctx, k, gr.lease, gr.cost, ls, answered); err != nil {
				g.cfg.Logger.Warn("quotagate: could not release a lease of a concurrency limit (it expires by itself)", "scope", s.String(), "err", err)
			}
		}()
	}
	g.slots.Wake(k.Pause, gr.cost)
}

// refused records the refusal that the handler returned in err (unless the
// Transport recorded it already during the task) and wraps err with the
// pause in force.
func (g *Gate) refused(ctx context.Context, s Scope, err error, hint time.Duration, ta *taskAdmission) error {
	if r := ta.refused.Load(); r != nil {
		return r.wrapping(err)
	}
	ta.refusal.Store(true)
	if r, ok := g.record(ctx, s, ta.keys, hint, 0, ta.grant); ok {
		return r.wrapping(err)
	}
	return err
}

func (g *Gate) cost(t *asynq.Task) int {
	if g.cfg.Cost == nil {
		return 1
	}
	return max(g.cfg.Cost(t), 1)
}

// admit returns nil once background work of s may spend cost units now,
// waiting in-process for short waits (or any wait when mustHold), or a
// *Deferral for longer waits.
func (g *Gate) admit(ctx context.Context, s Scope, cost int, mustHold bool) error {
	_, err := g.admission(ctx, s, scopeKeys(g.cfg.Prefix, s), cost, mustHold, Background, false)
	return err
}

// grant is what an admission tells the response of the request it admitted
// (see observe): whether it is a first contact's probe, whose answer the
// scope's peers await, and its sequence number among the admissions that
// spent the scope's advertised budget.
type grant struct {
	probe bool
	seq   int64 // 0: not known (no admission in Redis: the open cache)
	opens int64 // µs: it opens a learned window; its answer aligns the windows (0 not)
	// lease: the id of its lease on the scope's concurrency limits, to
	// release ("" none), of cost units
	lease string
	cost  int
	level int64 // its level (model.Decision.Level), which its refusal tells
	mark  int64 // its mark (model.Decision.Mark), which its refusal tells
}

// admission is admit for work of class c, also returning the grant. It is
// the loop around decide.Decide: ask Redis (unless the open cache knows the scope
// is open), do what the decision says, ask again after a hold. Interactive work
// holds in places of its own (Tuning.MaxHolders of them), so background
// holders never take the place of an interactive task. A wait for a slot
// of a concurrency limit holds at most Tuning.MaxHold in all, woken by the
// releases of this process (local.SlotWakers), before it defers.
//
// On an asynq worker (worker: inside the Middleware) every wait takes a
// waiter's place first (local.Holders.Join): without one, the admission reserves
// no slot ahead (store.AdmitRequest.NowOnly) and any wait is a deferral, so one
// scope's waiting never takes every worker from the other scopes' tasks.
func (g *Gate) admission(ctx context.Context, s Scope, k schema.Keys, cost int, mustHold bool, c Class, worker bool) (gr grant, err error) {
	ls := g.limitsOf(s)
	if len(ls) == 0 && g.open.Fresh(k.Pause, !g.observed.Load()) {
		g.uncounted.Add(k.Pause, local.Count{N: int64(cost), First: g.now()})
		g.metrics.Admission(s.Provider, c.String(), metrics.Admitted)
		return gr, nil
	}
	p := decide.Policy{MaxHold: g.cfg.Tuning.MaxHold, Jitter: g.cfg.Tuning.ReopenJitter, MaxHolders: g.cfg.Tuning.MaxHolders, MustHold: mustHold,
		Interactive: c == Interactive}
	rechecked := false
	q := asking{s: s, k: k, c: c, cost: cost, lease: g.leaseID(ls), configuredLease: concurrent(ls), p: p}
	var inFlight time.Duration // held so far for a slot in flight
	briefed := false           // a worker without a place held briefly once (decide.BriefHold)
	for {
		gen := g.open.Begin()
		counts := g.uncounted.Take(k.Pause)
		// A waiter's place, taken before asking: an admission may reserve
		// a slot ahead only for a worker that may wait for it. Every path
		// of this round gives it back (leave), after its wait if any.
		w := g.joinWaiters(k.Pause, worker, local.Want{Keep: g.keepsWorker(c, ls), Force: mustHold, Interactive: c == Interactive})
		a, err := g.ask(ctx, q, ls, counts, w.nowOnly())
		var again bool
		if err != nil {
			w.leave() // nothing reserved to wait for: a deferral, or fail open or closed
			var known bool
			if a, known, err = g.admitFailed(ctx, q, counts, err); !known {
				return gr, err
			}
		} else if a, again = g.answerOf(ctx, k, a, rechecked); again {
			rechecked = true // the lost pause is in force again: ask again
			w.leave()
			continue
		}
		v := decide.Decide(a, p, g.rand())
		if decide.Brief(v, w.nowOnly(), briefed) {
			briefed = true
			err = sleep(ctx, v.Wait)
			w.leave()
			if err != nil {
				return gr, err
			}
			continue
		}
		switch v.Act {
		case decide.Run:
			return g.runAdmitted(ctx, q, a, v.Wait, gen, w)
		case decide.HoldPause:
			err = g.holdInPlace(ctx, q, a, v, w, &inFlight)
		case decide.Hold:
			g.metrics.Admission(s.Provider, c.String(), metrics.Held)
			g.metrics.Wait(s.Provider, c.String(), v.Wait)
			err = sleep(ctx, v.Wait) // a last attempt: joined whatever the count
			w.leave()
		case decide.Defer:
			w.leave()
			return gr, g.deferred(s, c, g.deferralOf(a, v))
		}
		if err != nil {
			return gr, err
		}
	}
}

// asking is what every round of one admission asks with: the scope, its
// keys, the class, the cost, the lease id ("" none) and whether a
// configured concurrency limit takes it (configuredLease; otherwise only
// an admission the learned one leases holds it), and the policy.
type asking struct {
	s               Scope
	k               schema.Keys
	c               Class
	cost            int
	lease           string
	configuredLease bool
	p               decide.Policy
}

// waiting is a worker's place among the waiters of one scope during one
// round of an admission (local.Holders.Join), given back once (leave).
type waiting struct {
	h      *local.Holders
	k      string
	worker bool        // on an asynq worker (inside the Middleware)
	place  local.Place // the waiter's place it holds (local.NoPlace: none)
}

// joinWaiters takes a waiter's place for a worker of scope k if the rule
// of local.Holders allows what w asks.
func (g *Gate) joinWaiters(k string, worker bool, w local.Want) *waiting {
	p := local.NoPlace
	if worker {
		p = g.holders.Join(k, g.inside.Load(), g.now(), w)
	}
	return &waiting{h: &g.holders, k: k, worker: worker, place: p}
}

// keepsWorker decides whether a wait of class c, for a scope under the
// configured limits ls, leaves one worker of the process free: background
// work, where interactive work is expected (Config.InteractiveQueues),
// behind a configured limit. There the waiters sleep until slots they
// reserved ahead, up to MaxHold each, and an interactive task of the same
// scope queued behind them would wait for a worker as long (asynq serves
// its queue first, but only to a free worker). A scope with nothing
// configured keeps none: its waiters ask again as each learned window
// opens, and the worker kept free sends the tasks it meets through
// asynq's retries, which bring them back at whole seconds, out of the
// learned windows' phase, for no gain the priority benchmark could see
// (docs/measurements.md).
func (g *Gate) keepsWorker(c Class, ls []Limit) bool {
	return g.expect && c == Background && len(ls) > 0
}

// nowOnly decides whether the admission may reserve no slot ahead: a
// worker without a waiter's place may not wait for one.
func (w *waiting) nowOnly() bool { return w.worker && w.place == local.NoPlace }

// leave gives the waiter's place back, if it holds one.
func (w *waiting) leave() {
	w.h.Leave(w.k, w.place)
	w.place = local.NoPlace
}

// ask is one round's question to the store: an admission under the
// limits ls, reporting counts admissions no script counted, reserving no
// slot ahead when nowOnly.
func (g *Gate) ask(ctx context.Context, q asking, ls []Limit, counts local.Count, nowOnly bool) (decide.Answer, error) {
	r := admitRequest(ls, q.cost, q.p.MaxHold)
	r.Probe, r.Counts, r.CountsAge, r.Class, r.Lease, r.NowOnly = g.probe(), counts.N, counts.Age(g.now()), model.Class(q.c), q.lease, nowOnly
	a, err := g.store.Admit(ctx, q.k, r)
	if err != nil {
		return decide.Answer{}, err
	}
	return decide.AnswerOf(a.Decision, a.Now), nil
}

// admitFailed decides what an admission the store failed acts on: the
// pause this gate knows for the scope (known), or else the caller's end or
// the fail-open or fail-closed answer (err, nil to run unchecked).
func (g *Gate) admitFailed(ctx context.Context, q asking, counts local.Count, err error) (a decide.Answer, known bool, _ error) {
	g.uncounted.Add(q.k.Pause, counts)
	if q.configuredLease {
		// The script may have taken the lease before the call failed:
		// give it back (a lease never taken is released as nothing),
		// without holding up the fail-open or fail-closed answer. A
		// learned concurrency limit's lease id goes with every admission
		// of a scope with nothing configured, and is seldom taken: one
		// taken by a call that failed expires by itself (a minute), rather
		// than every failed admission sending a release to a store that
		// just failed.
		go g.release(ctx, q.s, q.k, grant{lease: q.lease, cost: q.cost}, false)
	}
	if ctx.Err() != nil {
		return a, false, ctx.Err()
	}
	a, ok := g.knownPause(q.k, g.now()) // a pause this gate knows does not fail with the store
	if !ok {
		return a, false, g.storeFailed(q.s, q.c, "admit", err)
	}
	g.cfg.Logger.Warn("quotagate: store unavailable, deferring a task of a scope this gate knows paused",
		"scope", q.s.String(), "until", a.Until, "err", err)
	return a, true, nil
}

// answerOf decides which answer the admission acts on: the store's a
// (noted), or, until one round rechecked it, the pause this gate knows
// the store lost (again: it is in force again, ask again; see recheck).
func (g *Gate) answerOf(ctx context.Context, k schema.Keys, a decide.Answer, rechecked bool) (_ decide.Answer, again bool) {
	if rechecked {
		g.noteAnswer(k, a)
		return a, false
	}
	again, known := g.recheck(ctx, k, a, g.now())
	if again {
		return a, true
	}
	if known != nil {
		return *known, false
	}
	g.noteAnswer(k, a)
	return a, false
}

// runAdmitted grants the admission a that runs after wait (a slot reserved
// ahead), remembering its scope open when only a pause can stop it; a
// wait ended by ctx gives its lease back.
func (g *Gate) runAdmitted(ctx context.Context, q asking, a decide.Answer, wait time.Duration, gen uint64, w *waiting) (grant, error) {
	if a.Cacheable {
		g.open.Remember(q.k.Pause, gen)
	}
	g.metrics.Admission(q.s.Provider, q.c.String(), metrics.Admitted)
	g.metrics.Wait(q.s.Provider, q.c.String(), wait)
	gr := grant{probe: a.Probe, seq: a.Seq, opens: a.Opens, cost: q.cost, level: a.Level, mark: a.Mark}
	if a.Leased || q.configuredLease {
		gr.lease = q.lease
	}
	err := sleep(ctx, wait) // a slot reserved ahead: only with a place (nowOnly otherwise)
	w.leave()
	if err != nil {
		g.release(ctx, q.s, q.k, gr, false)
		return grant{}, err
	}
	return gr, nil
}

// holdInPlace decides whether a worker holds for the short wait v in one
// of its scope's places, and holds; without a place, or past maxHold in
// all for a slot in flight (inFlight, which it adds to), it returns the
// deferral instead.
func (g *Gate) holdInPlace(ctx context.Context, q asking, a decide.Answer, v decide.Verdict, w *waiting, inFlight *time.Duration) error {
	slot := a.Reason == model.ReasonInFlight
	if slot && *inFlight >= q.p.MaxHold || w.nowOnly() || !g.holders.Acquire(q.k.Pause, q.c == Interactive, v.Holders) {
		w.leave()
		return g.deferred(q.s, q.c, g.deferralOf(a, v))
	}
	g.metrics.Admission(q.s.Provider, q.c.String(), metrics.Held)
	g.metrics.Wait(q.s.Provider, q.c.String(), v.Wait)
	var err error
	if slot {
		t0 := g.now()
		err = sleepOr(ctx, v.Wait, g.slots.Of(q.k.Pause)) // or until a slot is released here
		*inFlight += max(g.now().Sub(t0), time.Millisecond)
	} else {
		err = sleepOr(ctx, v.Wait, g.holders.Crowded()) // or until another scope needs the worker
	}
	g.holders.Release(q.k.Pause, q.c == Interactive)
	w.leave()
	return err
}

// leaseID returns a new lease id when a concurrency limit is among ls, or
// none is configured (the scope may have learned one: internal/model's
// flight.go), "" otherwise: 64 random bits, unique among the leases of a
// scope.
func (g *Gate) leaseID(ls []Limit) string {
	if len(ls) > 0 && !concurrent(ls) {
		return ""
	}
	return strconv.FormatUint(rand.Uint64(), 36)
}

// concurrent reports whether a concurrency limit is among ls.
func concurrent(ls []Limit) bool {
	return slices.ContainsFunc(ls, func(l Limit) bool { return l.Concurrent })
}

// deferred returns the deferral d of scope s and class c, counted.
func (g *Gate) deferred(s Scope, c Class, d Deferral) *Deferral {
	d.Scope, d.Class = s, c
	g.metrics.Admission(s.Provider, c.String(), deferredOutcome(d.Reason))
	g.metrics.Wait(s.Provider, c.String(), d.Delay)
	return &d
}

// storeFailed applies the fail-open or fail-closed policy to a store error.
func (g *Gate) storeFailed(s Scope, c Class, op string, err error) error {
	if g.cfg.FailClosed {
		delay := g.cfg.Tuning.FailClosedDelay
		g.metrics.Admission(s.Provider, c.String(), metrics.FailClosed)
		g.cfg.Logger.Error("quotagate: store unavailable, deferring task (fail closed)",
			"op", op, "scope", s.String(), "delay", delay, "err", err)
		return &Deferral{Scope: s, Class: c, Delay: delay, RetryAt: g.now().Add(delay), Reason: ReasonStoreDown}
	}
	g.metrics.Admission(s.Provider, c.String(), metrics.FailOpen)
	g.cfg.Logger.Warn("quotagate: store unavailable, running task unchecked (fail open)",
		"op", op, "scope", s.String(), "err", err)
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error { return sleepOr(ctx, d, nil) }

// sleepOr waits d, until wake fires (nil: never), or until ctx ends.
func sleepOr(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
		return fmt.Errorf("quotagate: waiting for the gate: %w", ctx.Err())
	}
	return nil
}
