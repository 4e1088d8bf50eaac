package store

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/quotagate/quotagate/internal/feed"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
)

// The store's side of the model: each transition of model.State as one
// script call (internal/model), its arguments built from values and its
// named reply decoded.

// AdmitRequest is what an admission asks (model.AdmitRequest, in the
// gate's units).
type AdmitRequest struct {
	Limits []model.LimitSpec // the configured limits, in order
	Cost   int
	Hold   time.Duration // how far ahead a slot may be reserved
	Probe  time.Duration // a probe's timeout (0: responses are not observed)
	Answer time.Duration // how long the peers of a learned window's probe wait for its answer
	Dry    bool          // commit nothing: what would an admission say (State)
	// NowOnly: reserve no slot ahead (params.nowOnly): admitted now or not
	NowOnly bool
	Counts  int64 // admissions no script counted (the open cache's), reported first
	// CountsAge: how long before the call the first of Counts was admitted
	CountsAge time.Duration
	Class     model.Class
	Lease     string // the admission's lease id on the concurrency limits ("" when there are none)
}

// Admission is the answer of model.AdmitScript: the model's decision
// (its wait in µs, the deadline in force in Unix ms) and what the scope
// keeps, at Now, the Redis TIME of the decision (Unix µs).
type Admission struct {
	model.Decision
	Now int64

	// What the scope keeps, for State.
	Budget  Budget  // the budget its provider advertised
	Learned Learned // the limit it learned from refusals
	Backlog int64   // µs: how far ahead of Now its first limit is spent (quotagate.Pause.LimitBacklog)
}

// Budget is a scope's quota as its provider advertised it, spent by the
// admissions since.
type Budget struct {
	Known     bool  // false: nothing advertised, or nothing observed
	Remaining int64 // requests left
	Limit     int64 // the quota's size; 0 when not advertised
	Reset     int64 // Unix µs when the quota is whole again; 0 unknown (or past)
}

// Learned is what a scope learned from refusals: N requests in a window
// of Window µs (N 0 when none), and InFlight, the requests it may have in
// flight once its provider was found to limit them (0 when not).
type Learned struct{ N, Window, InFlight int64 }

// Admits is when the scope admits a request again, per Redis TIME: zero
// when it admits now, the deadline in force when paused, Now plus the
// wait when limited.
func (a Admission) Admits() time.Time {
	switch {
	case a.Code == model.Admitted:
		return time.Time{}
	case a.Code != model.Paused:
		return time.UnixMicro(a.Now).Add(time.Duration(a.Wait) * time.Microsecond)
	case a.Until != 0:
		return time.UnixMilli(a.Until)
	}
	return time.Time{}
}

// Remaining is how long from Now until Admits, 0 when the scope admits
// now. Deadlines are whole ms: Now is truncated to the ms.
func (a Admission) Remaining() time.Duration {
	if a.Code == model.Admitted {
		return 0
	}
	return a.Admits().Sub(time.UnixMicro(a.Now).Truncate(time.Millisecond))
}

// Admit runs an admission of r for the scope of k.
func (s *Store) Admit(ctx context.Context, k schema.Keys, r AdmitRequest) (Admission, error) {
	ks, args := model.AdmitRequest{Limits: r.Limits, Cost: int64(r.Cost), Hold: r.Hold.Microseconds(), MaxPause: s.maxPause.Milliseconds(),
		Probe: r.Probe.Microseconds(), Dry: r.Dry, NowOnly: r.NowOnly, Answer: r.Answer.Microseconds(), Counts: r.Counts,
		Age: r.CountsAge.Microseconds(), Class: r.Class, Reserve: s.reserve, Lend: s.lend.Microseconds(), Lease: r.Lease, Expect: s.expect}.Call(k)
	var v map[string]int64
	var err error
	if r.Dry {
		v, _, err = s.run(ctx, "state", model.AdmitScript, model.AdmitReply, ks, args...)
	} else if as := s.answers.take(k.Pause); len(as) > 0 {
		v, err = s.admitAfter(ctx, as, ks, args)
	} else {
		v, _, err = s.run(ctx, "admit", model.AdmitScript, model.AdmitReply, ks, args...)
	}
	if err != nil {
		return Admission{}, err
	}
	d, now := model.AdmitDecision(v)
	a := Admission{Decision: d, Now: now, Learned: Learned{N: v["learnedLimit"], Window: v["learnedWindow"], InFlight: v["learnedInFlight"]},
		Backlog: v["backlog"]}
	if v["budgetRemaining"] >= 0 {
		a.Budget = Budget{Known: true, Remaining: v["budgetRemaining"], Limit: v["budgetLimit"]}
		if u := v["budgetReset"]; u > v["now"] {
			a.Budget.Reset = u
		}
	}
	return a, nil
}

// Refusal is what a refusal tells the scope beyond its pause.
type Refusal struct {
	Hinted    bool          // the provider gave a wait: the pause ends at its window's reset
	Precision time.Duration // of that wait: a second when read in whole seconds
	Counts    int64         // admissions no script counted (the open cache's), reported first
	CountsAge time.Duration // how long before the call the first of Counts was admitted
	Operator  bool          // Gate.Pause: an operator's pause, which teaches nothing
	// Alt: the hint read as milliseconds, clamped as the pause is, when
	// it may be (quotagate's refusal.alt; 0: not in question)
	Alt time.Duration
	// Level, Mark and Opens: the refused request's admission's level, mark
	// and answer id (model.Refusal: what the learned concurrency limit
	// reads; 0 unknown)
	Level, Mark, Opens int64
}

// Recorded is what a refusal left in force.
type Recorded struct {
	Until     time.Time     // the deadline in force (or, Own, the refused request's own)
	Remaining time.Duration // until it, by Redis TIME
	Moved     bool          // the refusal moved the scope's deadline
	// Own: the refusal was one request too many in flight under the
	// scope's learned concurrency limit: the scope is not paused, and
	// Until is the refused request's own hint (model's flight.go)
	Own bool
}

// kind is the refusal kind of r (model.RefuseRequest.Kind).
func (r Refusal) kind() int {
	switch {
	case r.Operator:
		return model.Operator
	case r.Hinted:
		return model.Hinted
	}
	return model.Hintless
}

// Pause records a pause of d (clamped by the caller) under the limits ls
// and returns the deadline in force, the time remaining until it (both per
// Redis TIME), and whether it moved the deadline (a refusal of a request
// sent before the pause moves nothing).
func (s *Store) Pause(ctx context.Context, k schema.Keys, d time.Duration, r Refusal, ls ...model.LimitSpec) (Recorded, error) {
	ks, args := model.RefuseRequest{Limits: ls, Pause: d.Milliseconds(), MaxPause: s.maxPause.Milliseconds(), Kind: r.kind(),
		Prec: r.Precision.Microseconds(), Counts: r.Counts, Age: r.CountsAge.Microseconds(), Alt: r.Alt.Milliseconds(), Level: r.Level, Mark: r.Mark, Opens: r.Opens}.Call(k)
	if as := s.answers.take(k.Pause); len(as) > 0 { // the answers came before the refusal
		s.sendAnswers(ctx, as)
	}
	var v map[string]int64
	var err error
	if s.durable > 0 {
		v, err = s.runDurable(ctx, k.Pause, ks, args)
	} else {
		v, _, err = s.run(ctx, "pause", model.RefuseScript, model.RefuseReply, ks, args...)
	}
	if err != nil {
		return Recorded{}, err
	}
	if v["own"] != 1 {
		s.announce(ctx, feed.Entry{Key: k.Pause, UntilMs: v["deadline"], NowMs: v["now"] / 1000})
	}
	until := time.UnixMilli(v["deadline"])
	return Recorded{Until: until, Remaining: until.Sub(time.UnixMicro(v["now"]).Truncate(time.Millisecond)), Moved: v["moved"] == 1,
		Own: v["own"] == 1}, nil
}

// runDurable runs the refusal script and WAITs for s.durable replicas (see
// runDurably and Config.Durable). A pause fewer replicas acknowledged is in
// force on the master: it is logged, not failed.
func (s *Store) runDurable(ctx context.Context, route string, ks []string, args []any) (map[string]int64, error) {
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

// Observe records an observation of a scope whose configured limits are
// ls (see model.ObserveScript).
func (s *Store) Observe(ctx context.Context, k schema.Keys, o model.Observation, ls ...model.LimitSpec) error {
	ks, args := model.ObserveCall(k, o, ls)
	v, _, err := s.run(ctx, "observe", model.ObserveScript, model.ObserveReply, ks, args...)
	if err == nil && v["announce"] == 1 {
		s.announce(ctx, feed.Entry{Key: k.Pause})
	}
	return err
}

// Release ends the lease of an admission (its id and cost) on the
// concurrency limits among ls, or the learned one (model.State.Release),
// answered telling that its request was not refused; it reports whether a
// lease was held (a second release of one id finds none).
func (s *Store) Release(ctx context.Context, k schema.Keys, id string, cost int, ls []model.LimitSpec, answered bool) (bool, error) {
	ks, args := model.ReleaseCall(k, ls, id, int64(cost), answered)
	if len(ks) == 0 {
		return false, nil
	}
	n, err := bounded(ctx, s, "release", func(ctx context.Context) (int64, error) {
		return model.ReleaseScript.Run(ctx, s.rdb, ks, args...).Int64()
	})
	return n > 0, err
}

// Resume deletes every record that holds the scope back (model.State.Resume):
// its pause, line, budget, learned windows, hintless episode, slow start and
// the state of every limit, whatever its index or kind and whichever gate
// configured it (model.ResumeCall).
func (s *Store) Resume(ctx context.Context, k schema.Keys) error {
	s.answers.take(k.Pause) // what they would teach, the scope forgets
	ks, args := model.ResumeCall(k, s.maxPause.Milliseconds())
	_, err := bounded(ctx, s, "resume", func(ctx context.Context) (any, error) {
		return model.ResumeScript.Run(ctx, s.rdb, ks, args...).Result()
	})
	if err == nil {
		s.announce(ctx, feed.Entry{Key: k.Pause, Resumed: true})
	}
	return err
}

// Reassertion is a remembered pause to re-assert (internal/failover):
// its deadline and a Redis TIME it was known in force at (Unix ms, of the
// clock that set it), the time it has left as the gate measures it (0:
// the deadline alone counts), and whether an operator set it.
type Reassertion struct {
	UntilMs, SeenMs int64
	Left            time.Duration
	Operator        bool
	// Announce: announce the pause in force on the feed even when the
	// re-assertion did not move it (the feed lost its entry)
	Announce bool
}

// Reasserted is what a re-assertion did.
type Reasserted struct {
	Until   time.Time // the deadline in force after it; zero: none
	NowMs   int64     // the Redis TIME of the script
	Moved   bool      // it moved the deadline (the pause had been lost)
	Resumed bool      // the scope was resumed since: nothing re-asserted
}

// Reassert runs model.ReassertScript for the remembered pause e of the
// pause key key.
func (s *Store) Reassert(ctx context.Context, key string, e Reassertion) (Reasserted, error) {
	left := int64(math.Ceil(float64(e.Left) / float64(time.Millisecond)))
	ks, args := model.ReassertRequest{UntilMs: e.UntilMs, LeftMs: max(left, 0), SeenMs: e.SeenMs, MaxPause: s.maxPause.Milliseconds(),
		Operator: e.Operator, SlackMs: s.timeout.Milliseconds()}.Call(schema.PauseKeys(key))
	v, _, err := s.run(ctx, "pause", model.ReassertScript, model.ReassertReply, ks, args...)
	if err != nil {
		return Reasserted{}, err
	}
	r := Reasserted{NowMs: v["now"] / 1000, Moved: v["moved"] == 1, Resumed: v["resumed"] == 1}
	if v["deadline"] > 0 {
		r.Until = time.UnixMilli(v["deadline"])
	}
	if r.Moved || e.Announce && !r.Resumed && v["deadline"] > 0 {
		s.announce(ctx, feed.Entry{Key: key, UntilMs: v["deadline"], NowMs: r.NowMs})
	}
	return r, nil
}
