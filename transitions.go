package quotagate

import (
	"context"
	"errors"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
)

// The store's side of the model: each transition of model.State as one
// script call (internal/model), its arguments built from params and its named
// reply decoded.

// admitRequest is what an admission asks.
type admitRequest struct {
	limits []Limit
	cost   int
	hold   time.Duration
	probe  time.Duration // a probe's timeout (0: responses are not observed)
	dry    bool          // commit nothing: what would an admission say (State)
	// nowOnly: reserve no slot ahead (params.nowOnly): admitted now or not
	nowOnly bool
	counts  int64 // admissions no script counted (the open cache's), reported first
	class   Class
	lease   string // the admission's lease id on the concurrency limits ("" when there are none)
}

// admission is the decision of model.AdmitScript, with Redis TIME.
type admission struct {
	code       int64         // admitted, paused or limited
	reason     model.Reason  // why not admitted at once
	wait       time.Duration // see decision
	until      time.Time     // the deadline in force (paused), zero otherwise
	now        time.Time     // Redis TIME of the decision
	reopen     int64         // requests the scope can use when it reopens, 0 unknown
	cacheable  bool          // only a pause can stop the scope (see openCache)
	limited    bool          // limits, configured or learned, apply
	probe      bool          // a probe: its response's budget is awaited
	opens      int64         // a learned window's probe: its instant, to answer (0 not)
	seq        int64         // sequence number among the admissions that spent the budget (0 unknown)
	spread     bool          // the line spreads deferred tasks (a GCRA limit): wake at the slot
	unreserved bool          // limited, the instant not reserved: hold until it, ask again (see decision)
	byOperator bool          // the pause was set by Gate.Pause

	// What the scope keeps, for State.
	budget       *Budget
	learned      Limit
	limitBacklog time.Duration

	// The reply's instants as the model has them (Unix µs, the deadline in
	// ms), for the differential test.
	nowMicros     int64
	untilDeadline int64
}

// specs converts the configured limits ls for the model.
func specs(ls []Limit) []model.LimitSpec {
	out := make([]model.LimitSpec, len(ls))
	for i, l := range ls {
		out[i] = l.spec()
	}
	return out
}

func (s *store) admit(ctx context.Context, k schema.Keys, r admitRequest) (admission, error) {
	ks, args := model.AdmitRequest{Limits: specs(r.limits), Cost: int64(r.cost), Hold: r.hold.Microseconds(), MaxPause: s.maxPause.Milliseconds(),
		Probe: r.probe.Microseconds(), Dry: r.dry, NowOnly: r.nowOnly, Answer: answerTimeout(r.hold).Microseconds(), Counts: r.counts,
		Class: model.Class(r.class), Reserve: s.reserve, Lend: s.lend.Microseconds(), Lease: r.lease}.Call(k)
	var v map[string]int64
	var txt map[string]string
	var err error
	if r.dry {
		v, txt, err = s.run(ctx, "state", model.AdmitScript, model.AdmitReply, ks, args...)
	} else {
		v, txt, err = s.run(ctx, "admit", model.AdmitScript, model.AdmitReply, ks, args...)
	}
	if err != nil {
		return admission{}, err
	}
	d, now := model.AdmitDecision(v, txt)
	a := admission{code: d.Code, reason: d.Reason, wait: time.Duration(d.Wait) * time.Microsecond,
		now: time.UnixMicro(now), reopen: d.Reopen, cacheable: d.Cache, limited: d.Limited,
		probe: d.Probe, opens: d.Opens, seq: d.Seq, byOperator: d.ByOp, spread: d.Spread, unreserved: d.Unreserved, nowMicros: now, untilDeadline: d.Until}
	if v["deadline"] != 0 {
		a.until = time.UnixMilli(v["deadline"])
	}
	if v["budgetRemaining"] >= 0 {
		a.budget = &Budget{Remaining: v["budgetRemaining"], Limit: v["budgetLimit"]}
		if u := v["budgetReset"]; u > v["now"] {
			a.budget.Reset = time.UnixMicro(u)
		}
	}
	if n, w := int(v["learnedLimit"]), time.Duration(v["learnedWindow"])*time.Microsecond; n > 0 && w > r.hold {
		a.learned = SlidingWindow(n, w) // applied as a log (learnState.logSpec)
	} else if n > 0 && w > 0 {
		a.learned = FixedWindow(n, w)
	}
	a.limitBacklog = time.Duration(v["backlog"]) * time.Microsecond
	return a, nil
}

// answerTimeout is how long the peers of a learned window's probe wait for
// its answer: as long as a worker may hold (MaxHold and one asynq tick); a
// task slower than that to answer leaves the window open to the others.
func answerTimeout(hold time.Duration) time.Duration { return hold + asynqTick }

// refusalFacts is what a refusal tells the scope beyond its pause.
type refusalFacts struct {
	hinted    bool          // the provider gave a wait: the pause ends at its window's reset
	precision time.Duration // of that wait: a second when read in whole seconds
	counts    int64         // admissions no script counted (the open cache's), reported first
	operator  bool          // Gate.Pause: an operator's pause, which teaches nothing
	// alt: the hint read as milliseconds, clamped as the pause is, when
	// it may be (refusal.alt; 0: not in question)
	alt time.Duration
}

// pause records a pause of d (clamped by the caller) under the limits ls
// and returns the deadline in force, the time remaining until it (both per
// Redis TIME), and whether it moved the deadline (a refusal of a request
// sent before the pause moves nothing).
func (s *store) pause(ctx context.Context, k schema.Keys, d time.Duration, r refusalFacts, ls ...Limit) (until time.Time, remaining time.Duration, moved bool, err error) {
	kind := model.Hintless
	if r.hinted {
		kind = model.Hinted
	}
	if r.operator {
		kind = model.Operator
	}
	ks, args := model.RefuseRequest{Limits: specs(ls), Pause: d.Milliseconds(), MaxPause: s.maxPause.Milliseconds(), Kind: kind,
		Prec: r.precision.Microseconds(), Channel: s.channel(), Counts: r.counts, Alt: r.alt.Milliseconds()}.Call(k)
	var v map[string]int64
	if s.durable > 0 {
		v, err = s.runDurable(ctx, k.Pause, ks, args)
	} else {
		v, _, err = s.run(ctx, "pause", model.RefuseScript, model.RefuseReply, ks, args...)
	}
	if err != nil {
		return time.Time{}, 0, false, err
	}
	until = time.UnixMilli(v["deadline"])
	return until, until.Sub(time.UnixMicro(v["now"]).Truncate(time.Millisecond)), v["moved"] == 1, nil
}

// runDurable runs the refusal script and WAITs for s.durable replicas (see
// runDurably and Config.Durable). A pause fewer replicas acknowledged is in
// force on the master: it is logged, not failed.
func (s *store) runDurable(ctx context.Context, route string, ks []string, args []any) (map[string]int64, error) {
	raw, err := bounded(ctx, s, "pause", func(ctx context.Context) (any, error) {
		r, _, err := runDurably(ctx, s.rdb, route, s.durable, max(s.timeout/2, time.Millisecond), model.RefuseScript, ks, args...)
		if errors.Is(err, errNotReplicated) {
			if s.log != nil {
				s.log.Warn("quotagate: a pause is in force but fewer replicas than Config.Durable acknowledged it", "err", err)
			}
			err = nil
		}
		return r, err
	})
	if err != nil {
		return nil, err
	}
	v, _, err := model.NamedReply(raw, model.RefuseReply)
	return v, err
}

// state reads what the gate knows of a scope whose configured limits are
// ls: a dry admission (see Gate.State), as interactive work sees the
// scope (the whole of its capacity, no reserve left for another class).
func (s *store) state(ctx context.Context, k schema.Keys, ls ...Limit) (Pause, error) {
	a, err := s.admit(ctx, k, admitRequest{limits: ls, cost: 1, dry: true, class: Interactive})
	if err != nil {
		return Pause{}, err
	}
	return pauseOf(Scope{}, a), nil
}

// observe records an observation of a scope whose configured limits are
// ls (see model.ObserveScript).
func (s *store) observe(ctx context.Context, k schema.Keys, o model.Observation, ls ...Limit) error {
	ks, args := model.ObserveCall(k, o, s.channel(), specs(ls))
	_, _, err := s.run(ctx, "observe", model.ObserveScript, model.ObserveReply, ks, args...)
	return err
}

// release ends the lease of an admission (its id and cost) on the
// concurrency limits among ls (model.State.Release); it reports whether a
// lease was held (a second release of one id finds none).
func (s *store) release(ctx context.Context, k schema.Keys, id string, cost int, ls []Limit) (bool, error) {
	ks, args := model.ReleaseCall(k, specs(ls), id, int64(cost))
	if len(ks) == 0 {
		return false, nil
	}
	n, err := bounded(ctx, s, "release", func(ctx context.Context) (int64, error) {
		return model.ReleaseScript.Run(ctx, s.rdb, ks, args...).Int64()
	})
	return n > 0, err
}

// channel is where pauses are announced (see openCache).
func (s *store) channel() string { return schema.Channel(s.prefix) }

// resume deletes every record that holds the scope back (model.State.Resume):
// its pause, line, budget, learned windows, hintless episode, slow start and
// the state of every limit, whatever its index or kind and whichever gate
// configured it (model.ResumeCall).
func (s *store) resume(ctx context.Context, k schema.Keys) error {
	ks, args := model.ResumeCall(k, s.maxPause.Milliseconds(), s.channel())
	_, err := bounded(ctx, s, "resume", func(ctx context.Context) (any, error) {
		return model.ResumeScript.Run(ctx, s.rdb, ks, args...).Result()
	})
	return err
}
