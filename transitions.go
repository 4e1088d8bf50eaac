package quotagate

import (
	"context"
	"errors"
	"time"

	"github.com/quotagate/quotagate/internal/schema"

	"github.com/redis/go-redis/v9"
)

// The store's side of the model: each transition of scopeState as one
// script call (scripts.go), its arguments built from params and its named
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

// admission is the decision of admitScript, with Redis TIME.
type admission struct {
	code       int64         // admitted, paused or limited
	reason     reason        // why not admitted at once
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

var reasons = map[string]reason{"pause": reasonPause, "budget": reasonBudget, "probe": reasonProbe,
	"limit": reasonLimit, "learned": reasonLearned, "inflight": reasonInFlight}

// limitArgs appends the keys and arguments of the configured limits ls.
func limitArgs(k schema.Keys, ls []Limit, ks []string, args []any) ([]string, []any) {
	args = append(args, len(ls))
	for i, l := range ls {
		sp := specOf(l)
		ks = append(ks, limitKey(k, i, l))
		kind := 0
		if sp.fixed {
			kind = 1
		} else if sp.sliding {
			kind = 2
		} else if sp.concurrent {
			kind = 3
		}
		args = append(args, kind, sp.per, sp.n)
	}
	return ks, args
}

func (s *store) admit(ctx context.Context, k schema.Keys, r admitRequest) (admission, error) {
	dry := 0
	if r.dry {
		dry = 1
	} else if r.nowOnly {
		dry = 2
	}
	line := k.Line
	if r.class == Interactive {
		line = k.ILine
	}
	ks, args := limitArgs(k, r.limits, []string{k.Pause, line, k.Budget, k.Learn, k.LearnWin, k.PauseBy, k.Class, k.Fallback, k.LearnLog, k.Start},
		[]any{max(r.cost, 1), r.hold.Microseconds(), s.maxPause.Milliseconds(), r.probe.Microseconds(), dry, answerTimeout(r.hold).Microseconds(), r.counts,
			int(r.class), s.reserve, s.lend.Microseconds(), r.lease})
	var v map[string]int64
	var txt map[string]string
	var err error
	if r.dry {
		v, txt, err = s.run(ctx, "state", admitScript, admitReply, ks, args...)
	} else {
		v, txt, err = s.run(ctx, "admit", admitScript, admitReply, ks, args...)
	}
	if err != nil {
		return admission{}, err
	}
	a := admission{code: v["code"], reason: reasons[txt["reason"]], wait: time.Duration(v["wait"]) * time.Microsecond,
		now: time.UnixMicro(v["now"]), reopen: v["reopen"], cacheable: v["cache"] == 1, limited: v["limited"] == 1,
		probe: v["probe"] == 1, opens: v["opens"], seq: v["seq"], byOperator: v["byOperator"] == 1, spread: v["spread"] == 1, unreserved: v["unreserved"] == 1, nowMicros: v["now"], untilDeadline: v["deadline"]}
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
	hinted := 0
	if r.hinted {
		hinted = 1
	}
	if r.operator {
		hinted = 2
	}
	ks, args := limitArgs(k, ls, []string{k.Pause, k.Learn, k.LearnWin, k.PauseBy, k.Fallback, k.LearnLog, k.Budget, k.Start},
		[]any{d.Milliseconds(), s.maxPause.Milliseconds(), hinted, r.precision.Microseconds(), s.channel(), r.counts, r.alt.Milliseconds()})
	var v map[string]int64
	if s.durable > 0 {
		v, err = s.runDurable(ctx, k.Pause, ks, args)
	} else {
		v, _, err = s.run(ctx, "pause", refuseScript, refuseReply, ks, args...)
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
		r, _, err := runDurably(ctx, s.rdb, route, s.durable, max(s.timeout/2, time.Millisecond), refuseScript, ks, args...)
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
	v, _, err := namedReply(raw, refuseReply)
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
// ls (see observeScript).
func (s *store) observe(ctx context.Context, k schema.Keys, o observation, ls ...Limit) error {
	_, _, err := s.run(ctx, "observe", observeScript, observeReply, []string{k.Budget, k.Learn, k.Pause, k.Fallback, k.Start},
		o.remaining, o.reset, o.limit, o.prec, o.seq, s.channel(), o.opened, longestFixed(ls), boolArg(o.refused), o.rtt, o.alt, boolArg(o.millis))
	return err
}

// longestFixed is the longest fixed window of ls, µs (0: none), as
// params.longestWindow has it.
func longestFixed(ls []Limit) int64 {
	w := int64(0)
	for _, l := range ls {
		if sp := specOf(l); sp.fixed && !l.IsZero() {
			w = max(w, sp.per)
		}
	}
	return w
}

// release ends the lease of an admission (its id and cost) on the
// concurrency limits among ls (scopeState.release); it reports whether a
// lease was held (a second release of one id finds none).
func (s *store) release(ctx context.Context, k schema.Keys, id string, cost int, ls []Limit) (bool, error) {
	var ks []string
	for i, l := range ls {
		if specOf(l).concurrent {
			ks = append(ks, limitKey(k, i, l))
		}
	}
	if len(ks) == 0 || id == "" {
		return false, nil
	}
	m := lease{id: id, cost: int64(max(cost, 1))}.member()
	n, err := bounded(ctx, s, "release", func(ctx context.Context) (int64, error) {
		return releaseScript.Run(ctx, s.rdb, ks, m).Int64()
	})
	return n > 0, err
}

// releaseScript ends a lease: its member removed from every concurrency
// limit of the scope (a key of another type is left alone).
//
// KEYS[1…] the sorted sets of the scope's concurrency limits
// ARGV[1] the lease's member, "<cost>:<id>"
// returns: how many of the sets held it
var releaseScript = redis.NewScript(`
local n = 0
for _, key in ipairs(KEYS) do
  local r = redis.pcall('ZREM', key, ARGV[1])
  if type(r) == 'number' then n = n + r end
end
return n
`)

// channel is where pauses are announced (see openCache).
func (s *store) channel() string { return s.prefix + ":paused" }

// resume deletes every record that holds the scope back (scopeState.resume):
// its pause, line, budget, learned windows, hintless episode, slow start and the state
// of its limits.
func (s *store) resume(ctx context.Context, k schema.Keys, ls []Limit) error {
	del := []string{k.Pause, k.PauseBy, k.Line, k.ILine, k.Class, k.Budget, k.LearnWin, k.LearnLog, k.Fallback, k.Start}
	for i, l := range ls {
		del = append(del, limitKey(k, i, l))
	}
	// Limits configured elsewhere (another gate's LimitOf) are found by kind.
	for i := range 4 {
		del = append(del, limitKey(k, i, Limit{}), limitKey(k, i, Limit{Fixed: true}), limitKey(k, i, Limit{Sliding: true}), limitKey(k, i, Limit{Concurrent: true}))
	}
	_, err := bounded(ctx, s, "resume", func(ctx context.Context) (any, error) {
		return resumeScript.Run(ctx, s.rdb, append([]string{k.Resumed}, del...), s.maxPause.Milliseconds(), s.channel()).Result()
	})
	return err
}

// resumeScript deletes the records that hold a scope back, notes when
// (the gates re-assert no pause known in force only before it:
// reassert.go) and announces that the scope was resumed.
//
// KEYS[1] resumed  KEYS[2] pause  KEYS[3…] the other records
// ARGV[1] max pause ms (how long the note is kept: no pause known before
// it can be in force longer)  ARGV[2] channel
// returns: Redis TIME, Unix µs
var resumeScript = redis.NewScript(luaPrelude + `
redis.call('DEL', unpack(KEYS, 2))
redis.call('SET', KEYS[1], num(now_ms), 'PX', tonumber(ARGV[1]))
redis.call('PUBLISH', ARGV[2], KEYS[2] .. ' resumed')
return now_us
`)

// boolArg is b as a script argument: 1 or 0.
func boolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}
