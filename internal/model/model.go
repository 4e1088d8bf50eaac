package model

import (
	"fmt"
	"math"
	"slices"
)

// The admission model: one scope's state and its transitions, as pure
// functions of explicit instants, in the manner of x/time/rate's reserveN.
//
// A scope's state is made of concerns (the pause, the configured limits,
// the advertised budget, the learned quota, the reopening lines, the
// classes, the hintless episode, the slow start), each in its own file
// with the Lua fragment that is its transaction in Redis: the package doc
// (doc.go) lists the files.
//
// Every concern answers two questions: the earliest instant it admits a
// request of a given cost (or why it never will), and what it commits when
// a request is admitted at an instant. admit asks every concern, takes the
// earliest instant all of them agree on, and commits only when that
// instant is within the hold; otherwise it commits nothing but the
// deferred task's slot of the line. The other transitions (refuse,
// observe, resume) each touch the concerns they concern.
//
// Instants are Unix microseconds of Redis TIME (the pause deadline is kept
// to the millisecond, as it is stored). The Lua scripts (scripts.go) run
// the same transitions on the same state in Redis; the differential test
// (differential_test.go) holds them equal.

// State is everything the gate keeps of one scope.
type State struct {
	pause  pauseState
	line   lineState // background work's reopening line
	iline  lineState // interactive work's (see class.go)
	class  classState
	limits []limitState // one per configured limit, in order
	budget budgetState
	learn  learnState
	lwin   windowState // the learned limit's window counts
	llog   limitState  // the learned limit's log (learnState.logSpec)
	fall   fallbackState
	start  startState
	flight flightState // the learned concurrency limit (flight.go)
	lease  limitState  // its leases
}

// Params is what the transitions need from the configuration.
type Params struct {
	Limits []LimitSpec // configured, zero ones left out
	Hold   int64       // µs: how far ahead a slot may be reserved (Tuning.MaxHold)
	// NowOnly: reserve no slot ahead; admitted only at now, otherwise
	// limited with the instant unreserved (the gate has no worker to spare
	// for a wait in this process: see internal/local's holders)
	NowOnly  bool
	MaxPause int64 // ms: a deadline farther ahead is malformed (Config.MaxPause)
	Probe    int64 // µs: a budget probe's timeout; 0: responses are not observed
	Answer   int64 // µs: a learned window's probe's timeout (its task reports it)
	Reserve  int64 // per mille of every capacity background work leaves to interactive work (Config.Reserve)
	Lend     int64 // µs: after this long without interactive work, its reserve is lent (Tuning.LendAfter)
	// Expect: interactive work is expected (Config.InteractiveQueues), so
	// the reserve is lent for now only before the scope's first
	// interactive request as after it (classState.keeper)
	Expect bool
}

// Reason names what holds a scope back: what a deferral says, what State
// shows.
type Reason int

const (
	ReasonNone     Reason = iota
	ReasonPause           // a pause deadline (a refusal, or Gate.Pause)
	ReasonBudget          // the advertised budget is spent until its reset
	ReasonProbe           // a probe is out: its answer will tell the budget
	ReasonLimit           // a configured limit has no capacity yet
	ReasonLearned         // the learned limit has no capacity yet
	ReasonInFlight        // a concurrency limit has every slot taken
)

// Decision is the verdict of admit.
type Decision struct {
	Code   int64  // admitted, paused (a deadline) or limited (capacity)
	Reason Reason // why not admitted at once
	Wait   int64  // µs until the slot (admitted: ≤ hold) or until asking again
	Until  int64  // ms: the deadline in force (paused), 0 otherwise
	Reopen int64  // requests the scope can use when it reopens, 0 unknown
	Probe  bool   // admitted as a probe: its response's budget is awaited
	Opens  int64  // µs: admitted as a learned window's or a hintless episode's probe, or in a slow start (its instant, the answer's id); 0 not
	Seq    int64  // the admission's sequence number among those that spent the budget
	Spread bool   // the line hands out slots one GCRA interval apart
	// Unreserved: limited, and the instant is not reserved: hold until it
	// and ask again (the learned limit's windows; a bucket while a reserve
	// is in force)
	Unreserved bool
	ByOp       bool // paused by an operator (Gate.Pause), not a refusal
	Limited    bool // limits (configured or learned) apply to the scope
	Cache      bool // nothing but a pause can stop the scope (see local.OpenCache)
	// Leased: the admission took its lease on the learned concurrency
	// limit (flight.go): its release tells whether it was refused
	Leased bool
	// Level: the requests in flight once admitted, itself included: the
	// learned concurrency limit's leases, or a slow start's requests
	// unanswered (0: neither); a refusal of it tells it (Refusal.Level)
	Level int64
	// Mark: the units the scope admitted at a level once it was admitted,
	// its own included (flightState.mark; 0: no level); a refusal of it
	// tells it (Refusal.Mark), and with it those admitted after it
	Mark int64
	// Slots: paused while the learned concurrency limit is on probation
	// (flight.go): the scope reopens into its slots, so the workers held
	// for the deadline are no herd (each waits for a slot then), and
	// every one of them may hold rather than defer to asynq's next whole
	// second (internal/decide's places)
	Slots bool
}

const (
	Admitted int64 = iota
	Paused
	Limited
)

// maxRounds bounds the search for the earliest instant every limit admits:
// each round moves the instant to the next one some limit admits, and a
// limit moves it at most to its next window, so n limits agree within n+1
// rounds unless their windows keep crossing. After the last round the
// instant is checked once more; a request is admitted only at an instant
// every limit admits.
const maxRounds = 8

// active are the limits that apply to a scope: the configured ones, or the
// learned one when none is configured and the provider advertises no
// budget, or advertises one that is not what refuses (a refusal that
// advertised budget left: learnState.secondary). Beside an advertised
// budget that is what refuses, the learned limit does not apply: the
// budget is the provider's own word on its quota and paces the scope by
// itself, and a count learned beside it could only hold the scope below
// what the provider accepts.
type active struct {
	specs   []LimitSpec
	states  []*limitState
	learned bool // specs[0] is the learned limit
	flight  bool // the learned concurrency limit is the last of specs
}

func (s *State) active(p Params) active {
	if len(p.Limits) > 0 {
		a := active{specs: p.Limits}
		for i := range s.limits {
			a.states = append(a.states, &s.limits[i])
		}
		return a
	}
	if s.flight.phase == flightConfirmed {
		return active{specs: []LimitSpec{s.flight.spec()}, states: []*limitState{&s.lease}, flight: true}
	}
	if l, ok := s.learn.spec(); ok && (!s.budget.known || s.learn.secondary > 0) {
		a := active{specs: []LimitSpec{l}, states: []*limitState{{fixed: true, learned: true, paced: s.learn.paced > 0, win: &s.lwin}}, learned: true}
		if ll, ok := s.learn.logSpec(p); ok {
			a.specs, a.states = []LimitSpec{ll}, []*limitState{&s.llog}
		}
		if s.flight.phase == flightProbation || s.flight.phase == flightBoth { // beside the learned window (flight.go)
			a.specs, a.states, a.flight = append(a.specs, s.flight.spec()), append(a.states, &s.lease), true
		}
		return a
	}
	return active{}
}

// Admit decides whether a request of cost and class c may go at now, and
// returns the decision; s is changed only by what the decision commits.
func (s *State) Admit(p Params, now, cost int64, c Class) Decision {
	return s.AdmitLease(p, now, cost, c, "")
}

// AdmitLease is admit whose admission, if any, takes the lease id on the
// concurrency limits (see concurrency.go).
func (s *State) AdmitLease(p Params, now, cost int64, c Class, id string) Decision {
	s.Normalize(p, now)
	lim := s.active(p)
	interactive := c == Interactive
	k := s.class.keeper(p, now, interactive)
	line := &s.line
	if interactive {
		line = &s.iline
	}
	d := s.admitAs(p, now, cost, lim, k, line, id)
	if interactive {
		s.class.asked(now, d.Code == Admitted, now+d.Wait, cost)
	}
	return d
}

// admitAs is admit for work whose line is line and which leaves k unspent
// (its class's; see class.go), its lease id. It asks every concern
// for the earliest instant it admits the request: first those that hold
// the scope by a deadline (deadline; a deadline ahead defers the
// task to it), then the limits for the earliest instant all of them admit
// from now (search). The verdict admits only an instant within the hold
// (within); the commit (commit) changes only what that admission spends,
// and a task not admitted changes nothing but its slot of the line.
func (s *State) admitAs(p Params, now, cost int64, lim active, k keeper, line *lineState, id string) Decision {
	a := admission{s: s, p: p, now: now, cost: cost, lim: lim, al: s.learn.alignment(), k: k, line: line, id: id}
	d := Decision{Limited: len(lim.specs) > 0, Reopen: s.reopen(lim)}
	if d, ok := a.retried(d); ok {
		return d
	}
	h := a.deadline()
	if h.at > now {
		return a.paused(d, h)
	}
	at, ok, k := a.search()
	full := lim.full(p, a.al, k, now, cost)
	unreserved := a.unreserved(k, full)
	if !a.within(at, ok, unreserved) {
		if a.beyond(at) {
			return a.commitBeyond(d)
		}
		if a.probing(at) {
			return a.awaitProbe(d, at)
		}
		return a.limited(d, k, at, full, unreserved)
	}
	d.Wait = at - now
	a.commit(&d, at, h)
	return d
}

// admission is one request's question to a scope, as admitAs asks it of
// the concerns: a request of cost at now, under the limits lim (their
// fixed windows aligned by al), leaving k unspent, deferred to line, with
// the lease id. Its steps are the scripts' admission_* functions
// (luaAdmit), whose a holds the same.
type admission struct {
	s         *State
	p         Params
	now, cost int64
	lim       active
	al        alignment
	k         keeper
	line      *lineState
	id        string
}

// held is what the concerns that hold a scope by a deadline answer
// (admission.deadline).
type held struct {
	at     int64         // µs: the latest deadline asked for (≤ now: none holds the scope)
	why    Reason        // the reason of the concern that asked for it first
	budget budgetVerdict // the budget's answer: its spend commits it
	starts bool          // a slow start is on: the admission counts in it
}

// later makes at the deadline, with why, when it is later than the
// deadline so far and than now. A concern that asks for the deadline
// already in force does not take its reason: the first concern asked for
// an instant names it.
func (h *held) later(now, at int64, why Reason) {
	if at > max(h.at, now) {
		h.at, h.why = at, why
	}
}

// deadline asks the concerns that hold a scope by a deadline for the
// earliest instant each admits, in this order: the pause, the budget, the
// learned window's probe, the hintless episode's probe, the slow start.
// None of them admits before its deadline whatever the limits say, so the
// latest is the scope's, and the limits are asked only when it has passed.
func (a admission) deadline() held {
	s := a.s
	h := held{at: s.pause.earliest(a.p, a.now), why: ReasonPause}
	h.budget = a.budget()
	h.later(a.now, h.budget.at, h.budget.why)
	h.later(a.now, a.learned(), ReasonProbe)
	h.later(a.now, s.fall.earliest(a.p, a.now), ReasonProbe)
	_, learned := s.learn.spec()
	h.starts = s.start.on(a.p, s.budget, learned, a.now)
	h.later(a.now, a.start(h.starts), ReasonInFlight)
	return h
}

// budget is the advertised budget's answer (spent until its reset, or a
// probe's answer awaited). A scope with configured limits is paced by
// them: its budget is shown, not enforced, so it holds nothing.
func (a admission) budget() budgetVerdict {
	if len(a.p.Limits) > 0 {
		return budgetVerdict{}
	}
	return a.s.budget.earliest(a.p, a.now, a.cost, a.k)
}

// learned is the learned window's probe's deadline: while the learned
// limit applies, its windows open with one request, the probe
// (learnState.opens), and the others wait for its answer. A learned limit
// that does not apply holds nothing (0).
func (a admission) learned() int64 {
	if !a.lim.learned {
		return 0
	}
	return a.s.learn.earliest(a.p, a.now)
}

// start is the slow start's deadline while it is on: its answers are
// awaited. A task with no place to wait in its process (Params.NowOnly)
// goes at once: deferred, asynq would bring it back later than the
// start's round trips save (start.go).
func (a admission) start(on bool) int64 {
	if !on || a.p.NowOnly {
		return 0
	}
	return a.s.start.earliest(a.p, a.now, a.cost)
}

// paused is the verdict of a request a deadline holds: paused until it,
// shown to the millisecond (the pause's own deadline as it is stored, and
// who set it). With limits, the task takes its slot of the line from the
// deadline on (deferTo), so that the deferred come back at the limits'
// pace, not all at once.
func (a admission) paused(d Decision, h held) Decision {
	d.Code, d.Reason = Paused, h.why
	d.Until = ceilMs(h.at)
	d.Wait = h.at - a.now
	d.Slots = a.s.flight.phase == flightProbation
	if h.why == ReasonPause {
		d.Until, d.ByOp = a.s.pause.untilMs, a.s.pause.operator
	}
	if len(a.lim.specs) > 0 {
		d.Wait, d.Spread = a.deferTo(h.at)
	}
	return d
}

// search is the earliest instant at or after now every limit admits the
// request, of what k leaves of each (active.earliest), whether they agree
// on it (ok), and the keeper it was asked with. A reserve lent is lent
// for now only: when the limits admit later than now, they are asked
// again leaving the lent reserve, so a slot ahead never spends the
// reserve of the next window. Past k's lapse nothing is held back: an
// instant later than the lapse is not admitted with k, and the task asks
// again at the lapse (not ok).
func (a admission) search() (at int64, ok bool, k keeper) {
	k = a.k
	at, ok = a.lim.earliest(a.p, a.al, k, a.now, a.cost)
	if at > a.now && k.lent > 0 {
		k = keeper{share: k.lent}
		at, ok = a.lim.earliest(a.p, a.al, k, a.now, a.cost)
	}
	if k.lapse > 0 && at > k.lapse {
		at, ok = k.lapse, false
	}
	return at, ok, k
}

// unreserved reports whether the request may not reserve a slot ahead of
// now: it is admitted at now or holds until the instant and asks again
// then. So does a task with no place to wait (Params.NowOnly). The
// learned limit reserves no slot ahead, unless it is a log (see
// learnState.logSpec): its next window is asked for when it opens, by one
// request first (see learnState.opens); a refusal may realign it
// meanwhile. Nor does work that leaves a reserve or claims in force (k
// lapses) behind a bucket: a bucket's slot ahead of now spends tokens the
// reserve needs now (its TAT would run ahead of now by more than the
// burst less the reserve); so does a sliding log's (its entry ahead
// counts in the window of now), and a concurrency limit's (its lease is
// held from now). A concurrency limit with every slot taken (full)
// reserves nothing either: its leases are released long before the
// instant it answers (see fullRetry).
func (a admission) unreserved(k keeper, full bool) bool {
	lim := a.lim
	return a.p.NowOnly || lim.learned && !lim.sliding() || full || k.lapse > 0 && (lim.interval(a.cost) > 0 || lim.sliding() || lim.concurrent())
}

// within reports whether the limits' instant at is admitted: every limit
// admits it (ok), it is within the hold (a slot farther ahead is not
// reserved: the task is deferred), and, when the request may not reserve
// a slot ahead (unreserved), it is now.
func (a admission) within(at int64, ok, unreserved bool) bool {
	return ok && at-a.now <= a.p.Hold && !(unreserved && at > a.now)
}

// limited is the verdict of a request the limits do not admit in time:
// limited, by the learned limit or a configured one, or by a concurrency
// limit with every slot taken (full: it asks again at fullRetry), and
// deferred to its slot of the line from the instant the limits admit.
func (a admission) limited(d Decision, k keeper, at int64, full, unreserved bool) Decision {
	d.Code, d.Reason, d.Unreserved = Limited, ReasonLimit, unreserved
	if a.lim.learned {
		d.Reason = ReasonLearned
	}
	if full {
		d.Reason, at = ReasonInFlight, a.fullRetry(k, at)
	}
	d.Wait, d.Spread = a.deferTo(at)
	return d
}

// fullRetry is when a request that a concurrency limit with every slot
// taken refused asks again, at most at, the instant the limits answered:
// that is its leases' expiry, and they are released long before it, so it
// asks at the earliest instant the other limits admit, at least
// concurrentPoll from now.
func (a admission) fullRetry(k keeper, at int64) int64 {
	others, _ := a.lim.others().earliest(a.p, a.al, k, a.now, a.cost)
	return min(at, max(others, a.now+concurrentPoll))
}

// deferTo is the wait until the deferred task's slot of the line, the
// first free one from at on, and whether the line spreads its slots: one
// interval of the fastest GCRA limit apart (active.interval), so that the
// deferred come back at the limits' pace. With no GCRA limit (fixed
// windows open at once) every one comes back at at.
func (a admission) deferTo(at int64) (wait int64, spread bool) {
	inc := a.lim.interval(a.cost)
	return a.line.take(a.now, at, inc), inc > 0
}

// commit spends what an admission at at spends, concern by concern: the
// learned limit (commitLearned), every limit applied, the budget and the
// learned cycle (with no limit configured: they are not enforced
// otherwise), the hintless episode's probe and the slow start, whose
// answers are awaited (Decision.Opens).
func (a admission) commit(d *Decision, at int64, h held) {
	s := a.s
	a.commitLearned(d, at)
	for i, l := range a.lim.specs {
		a.lim.states[i].spend(l, a.p, a.al, a.now, at, a.cost, a.id)
	}
	if len(a.p.Limits) == 0 {
		d.Probe, d.Seq = s.budget.spend(a.p, a.now, a.cost, h.budget)
		s.learn.count(at, a.cost)
	}
	probes := s.fall.probes()
	if probes {
		s.fall.probeAt, d.Opens = at, at
	}
	if h.starts {
		s.start.spend(at, a.cost)
		d.Opens = at // its answer is reported
	}
	d.Leased, d.Level = s.flight.leasing(), a.level(at, h.starts)
	d.Mark = s.flight.mark(a.now, d.Level, a.cost)
	d.Cache = a.opensCache(probes, h.starts)
}

// commitLearned is the learned limit's part of an admission at at, when
// it applies: the first admission of a window after one spent whole is
// the window's probe (learnState.opens); the window may raise n
// (learnState.grow); and when the learned limit is a log, its fixed
// windows count the admission too (they tell the probe and the raises).
func (a admission) commitLearned(d *Decision, at int64) {
	if !a.lim.learned {
		return
	}
	s := a.s
	l, _ := s.learn.spec()
	if s.learn.opens(l, a.p, &s.lwin, a.al, at) {
		s.learn.probeAt, d.Opens = at, at
		s.learn.expires = max(s.learn.expires, at+LearnTTL)
	}
	s.learn.grow(l, a.p, &s.lwin, a.al, at)
	if a.lim.sliding() {
		s.lwin.spend(l, a.p, a.al, at, a.cost)
	}
}

// opensCache reports whether nothing but a pause can stop the scope after
// the admission (Decision.Cache; see local.OpenCache): no limit applies
// nor is configured, the budget has nothing to tell (budgetState.quiet),
// and the admission was neither a hintless episode's probe (probes) nor
// counted in a slow start (starts), whose answers are awaited.
func (a admission) opensCache(probes, starts bool) bool {
	return len(a.lim.specs) == 0 && len(a.p.Limits) == 0 && a.s.budget.quiet(a.p) && !probes && !starts
}

// Report adds n admissions no script counted (an open cache's), the
// first of them age µs before now, to what the scope learns (see
// learnState.report). The scripts apply it first, in the round trip of
// the next admission or refusal; it changes no verdict.
func (s *State) Report(p Params, now, n, age int64) {
	s.Normalize(p, now)
	if len(p.Limits) == 0 {
		s.learn.report(now, n, age)
	}
}

// reopen is how many requests the scope can use at once when it reopens:
// its advertised quota, or its learned limit.
func (s *State) reopen(lim active) int64 {
	if s.budget.known && s.budget.limit > 0 {
		return s.budget.limit
	}
	if lim.learned {
		return lim.specs[0].n
	}
	return 0
}

// earliest is the earliest instant at or after now every limit admits a
// request of cost that leaves k unspent (searched in at most maxRounds,
// then checked once more: ok).
func (a active) earliest(p Params, al alignment, k keeper, now, cost int64) (at int64, ok bool) {
	view := a.kept(k)
	at = now
	for range maxRounds {
		before := at
		for i, l := range view {
			at = max(at, a.states[i].earliest(l, p, al, now, at, cost))
		}
		if at == before {
			break
		}
	}
	ok = true
	for i, l := range view {
		ok = ok && a.states[i].earliest(l, p, al, now, at, cost) == at
	}
	return at, ok
}

// kept returns the specs as work leaving k unspent sees them: every
// capacity smaller by what k leaves of it.
func (a active) kept(k keeper) []LimitSpec {
	if !k.holds() {
		return a.specs
	}
	v := make([]LimitSpec, len(a.specs))
	for i, l := range a.specs {
		v[i] = l
		v[i].n -= k.of(l.n)
	}
	return v
}

// interval is the pace of the line: the smallest GCRA interval × cost
// among the limits (0 when all are fixed windows: they open at once).
func (a active) interval(cost int64) int64 {
	inc := int64(0)
	for _, l := range a.specs {
		if l.gcra() && (inc == 0 || l.per*cost < inc) {
			inc = l.per * cost
		}
	}
	return inc
}

// concurrent reports whether a concurrency limit is among the limits.
func (a active) concurrent() bool {
	return slices.ContainsFunc(a.specs, func(l LimitSpec) bool { return l.concurrent })
}

// full reports whether a concurrency limit has no room at now for cost of
// what k leaves of it.
func (a active) full(p Params, al alignment, k keeper, now, cost int64) bool {
	for i, l := range a.kept(k) {
		if l.concurrent && a.states[i].earliest(l, p, al, now, now, cost) > now {
			return true
		}
	}
	return false
}

// others are the limits but the concurrency limits.
func (a active) others() active {
	o := active{learned: a.learned}
	for i, l := range a.specs {
		if !l.concurrent {
			o.specs, o.states = append(o.specs, l), append(o.states, a.states[i])
		}
	}
	return o
}

// sliding reports whether a sliding log is among the limits.
func (a active) sliding() bool {
	return slices.ContainsFunc(a.specs, func(l LimitSpec) bool { return l.sliding })
}

// Refusal is what a Refusal tells the scope.
type Refusal struct {
	// Pause: ms, already clamped to [MinPause, MaxPause]; without a hint
	// (and not an operator's) the cap of the hintless episode's Pause
	// (see fallbackState.refuse)
	Pause  int64
	Hinted bool  // the provider said how long: the pause ends at its window's reset
	Prec   int64 // µs: the hint's precision (a second when read in whole seconds)
	// Operator: Gate.Pause, not a provider (it teaches nothing either)
	Operator bool
	// Hintless: a provider's refusal without a hint, taught as one hinted
	// with its episode's pause (Refusal.teaching); Probe: it refused a
	// Hintless episode's Probe
	Hintless, Probe bool
	// Alt: ms, the hint read as milliseconds, when it is a budget's reset
	// written as a whole number under a name of seconds (Observation.Alt;
	// clamped as pause is; 0: not in question): the pause of a scope whose
	// resets are milliseconds (budgetState.millis)
	Alt int64
	// Level: the requests in flight when the refused request was
	// admitted, itself included (Decision.Level; 0 unknown), and Mark,
	// the count of its admission (Decision.Mark; 0 none): what a
	// concurrency limit refused it for (flightState.told); Opens: its
	// admission's answer id (Decision.Opens; 0 none)
	Level, Mark, Opens int64
}

// Refuse records a refusal (or Gate.Pause, which is an unhinted refusal
// that teaches nothing) at now, and returns the deadline in force (ms) and
// whether it moved.
func (s *State) Refuse(p Params, now int64, r Refusal) (deadline int64, moved bool) {
	s.Normalize(p, now)
	r.Level = s.flight.told(r.Level, r.Mark)
	open := s.pause.earliest(p, now) <= now
	before := s.pause.untilMs
	paced := s.flight.paced(s.learn.since, s.learn.window) // the learned concurrency limit paced the cycle (learnRefusal)
	switch v, own := s.refuseFlight(p, now, r, open); v {
	case flightOwn:
		return own, false
	case flightSpent: // the learned window was spent, as known: it teaches nothing
		deadline = s.pause.refuse(now, r.Pause, false)
		return deadline, open || deadline > before
	}
	deadline = s.pause.refuse(now, s.refusedPause(p, now, &r, open), r.Operator)
	if !r.Operator {
		s.start.end(now)
	}
	for i, l := range p.Limits {
		s.limits[i].refuse(l, now, r.Hinted)
	}
	s.learnRefusal(p, now, deadline, r, open, paced)
	return deadline, open || deadline > before
}

// refusedPause is the pause (ms) a refusal r at now asks for: its hint,
// or read as milliseconds (Refusal.Alt), or the hintless episode's
// (fallbackState.refuse), or a counter's (budgetState.counterPause); it
// marks r a refusal of the hintless episode's probe (Refusal.Probe) and
// its precision.
func (s *State) refusedPause(p Params, now int64, r *Refusal, open bool) int64 {
	ms := r.Pause
	if r.Alt > 0 && s.budget.millis {
		ms, r.Prec = r.Alt, millisPrec
	}
	r.Probe = s.fall.level > 0 && s.fall.probeAt > 0
	if !r.Hinted && !r.Operator {
		ms = s.fall.refuse(now, r.Pause, open)
	}
	if r.Hinted && !r.Operator && len(p.Limits) == 0 {
		ms = s.budget.counterPause(now, ms, r.Prec)
	}
	return ms
}

// learnRefusal is what a refusal r at now, whose deadline in force is
// deadline (ms), teaches: the learned limit and its windows and log
// (learnState.refuse), and, once it taught a limit, the probation of the
// learned concurrency limit (flightState.begin).
//
// A refusal of a cycle the learned concurrency limit paced (paced:
// flightState.paced)
// teaches the learned limit its alignment only, as configured limits
// do: the learned window did not apply, so the cycle's admissions are
// what c let go, not what the provider's window accepted, and learning n
// from them would hold the scope below what the provider was seen to
// accept.
func (s *State) learnRefusal(p Params, now, deadline int64, r Refusal, open, paced bool) {
	w := s.learn.window
	over, probe := s.learn.refuse(now, deadline*1000, r.teaching(len(p.Limits) > 0), open, len(p.Limits) > 0 || paced, &s.lwin)
	if over {
		s.lwin = windowState{}
	}
	if probe > 0 { // the provider counted nothing for the refused probe: its slot is not taken
		s.llog.log = slidingDrop(s.llog.log, probe)
	}
	if s.learn.window != w { // the learned log's entries are of another window
		s.llog = limitState{sliding: true}
	}
	if l, ok := s.learn.spec(); ok && r.Hinted && !r.Operator && open {
		s.flight.begin(now, l.n, r.Level, s.start.most, len(p.Limits) > 0 || s.budget.known)
	}
}

// Observe records the budget a response advertised (see Observation).
func (s *State) Observe(p Params, now int64, o Observation) (announce bool) {
	s.Normalize(p, now)
	u, prec, announce := s.budget.observe(now, o)
	if o.Refused && o.Remaining > 0 {
		s.learn.contradicted(now)
	}
	if u > 0 && u-now <= s.alignsWithin(p)+prec {
		// Read late by up to the request's round trip: one reading
		// after the other the alignment moves by as much, which a
		// reset's precision of a millisecond does not cover
		// (windowState.usedAligned).
		s.learn.align(now, u, max(prec, o.RTT))
	}
	s.learn.answer(now, o.Opened, u)
	s.fall.answer(o.Opened)
	s.start.answer(now, o.Opened)
	s.flight.answer(now, o.Opened, s.learn.limit)
	return announce
}

// alignsWithin is how far ahead a reset may be and still end one of the
// scope's fixed windows (µs): the longest configured one, or, with none
// configured, the learned window, or, with neither, any distance. A reset
// farther ahead than the learned window is another quota's: GitHub's
// hour-long primary budget beside the secondary limit the scope learned,
// which, read on every response, would move the learned windows'
// alignment to the instant of the last response.
func (s *State) alignsWithin(p Params) int64 {
	w := p.longestWindow()
	if l, ok := s.learn.spec(); ok && w == math.MaxInt64/2 {
		w = l.per
	}
	return w
}

// longestWindow is the longest configured fixed window (µs), or, with
// none, any reset's distance: a reset farther ahead than every configured
// window ends none of them, so it does not align them. It is another
// quota's (GitHub's hour-long primary budget beside its secondary limit),
// or a misread (a reset in milliseconds below an hour read as seconds:
// hint's maxSaneResetSeconds).
func (p Params) longestWindow() int64 {
	w := int64(0)
	for _, l := range p.Limits {
		if l.fixed {
			w = max(w, l.per)
		}
	}
	if w == 0 {
		return math.MaxInt64 / 2
	}
	return w
}

// Resume lifts everything that holds the scope back now: the pause, the
// limits' state, the line, the advertised budget, the learned limit's
// window, the hintless episode and the slow start. What was learned (the limit itself)
// stays: it is knowledge, not a wait.
func (s *State) Resume(p Params) {
	s.pause = pauseState{}
	s.line, s.iline = lineState{}, lineState{}
	s.class = classState{}
	s.limits = nil // normalize makes them whole
	s.budget = budgetState{}
	s.lwin, s.llog = windowState{}, limitState{sliding: true}
	s.fall = fallbackState{}
	s.start = startState{} // with the budget gone, the scope's first contact again
	s.flight, s.lease = flightState{}, limitState{}
}

// Normalize shapes s for p at now: one limit state per configured limit,
// of its kind, and nothing that the values say is over (a pause not in
// force, a past TAT or line slot, stale windows, forgotten records): the
// state as the scripts load it. Each concern's rule is its own step, in
// this order: the learned limit's windows and log are shaped by what is
// left of the learned limit once it is forgotten.
func (s *State) Normalize(p Params, now int64) {
	s.normalizePause(p, now)
	s.normalizeLines(now)
	s.class.normalize(p, now)
	s.normalizeBudget(now)
	s.forgetExpired(now)
	s.normalizeLearned(p, now)
	s.normalizeLimits(p, now)
}

// normalizePause drops a deadline not in force (past, or farther ahead
// than MaxPause: malformed): it is no pause at all, as pause_load reads
// it.
func (s *State) normalizePause(p Params, now int64) {
	if !s.pause.inForce(p, now) {
		s.pause = pauseState{}
	}
}

// normalizeLines empties a line whose next slot has passed: a deferral
// takes its slot from the instant it asks for, so a past slot holds no one
// back (its key expires a margin after it).
func (s *State) normalizeLines(now int64) {
	if s.line.next <= now {
		s.line = lineState{}
	}
	if s.iline.next <= now {
		s.iline = lineState{}
	}
}

// normalizeBudget forgets an advertised budget past its expiry (a budget
// with no news is none: missing is open) and rolls what is left to now
// (budgetState.roll).
func (s *State) normalizeBudget(now int64) {
	if s.budget.expires <= now {
		s.budget = budgetState{}
	}
	s.budget.roll(now)
}

// forgetExpired forgets the learned limit, the hintless episode and the
// slow start each at its expires: what a scope learned or began long ago
// is a hint, not a law, and a scope with no news is open (a record past
// its expires is none, as hrecord reads it).
func (s *State) forgetExpired(now int64) {
	if s.learn.expires <= now {
		s.learn = learnState{}
	}
	if s.fall.expires <= now {
		s.fall = fallbackState{}
	}
	if s.start.expires <= now {
		s.start = startState{}
	}
	if s.flight.expires <= now {
		s.flight = flightState{}
	}
}

// normalizeLearned keeps the learned limit's window counts and its log
// only while there is a learned limit of their shape, and of them only
// what is live at now: with no limit learned (or it forgotten), its
// counts are of no window, and with a window no longer than the hold, of
// no log (learnState.logSpec).
func (s *State) normalizeLearned(p Params, now int64) {
	if l, ok := s.learn.spec(); ok {
		s.lwin.live(l, now)
	} else {
		s.lwin = windowState{}
	}
	if ll, ok := s.learn.logSpec(p); ok {
		s.llog = limitState{sliding: true, log: slidingLive(s.llog.log, ll, now)}
	} else {
		s.llog = limitState{sliding: true}
	}
}

// normalizeLimits keeps one state per configured limit, in order: a limit
// added starts whole, one removed is forgotten, and each is normalized for
// its limit (normalizeLimit).
func (s *State) normalizeLimits(p Params, now int64) {
	for len(s.limits) < len(p.Limits) {
		s.limits = append(s.limits, limitState{})
	}
	s.limits = s.limits[:len(p.Limits)]
	for i, l := range p.Limits {
		normalizeLimit(&s.limits[i], l, now)
	}
	normalizeLimit(&s.lease, s.flight.spec(), now)
}

// normalizeLimit shapes st for the configured limit l at now. A state of
// another kind (the limit was reconfigured) starts whole: its values mean
// nothing for l. Of l's kind, nothing over is kept: a fixed window's stale
// windows, a sliding log's entries past its window, a concurrency limit's
// expired leases, a GCRA TAT in the past (the bucket is full).
func normalizeLimit(st *limitState, l LimitSpec, now int64) {
	if st.fixed != l.fixed || st.sliding != l.sliding || st.concurrent != l.concurrent || st.win == nil {
		*st = limitState{fixed: l.fixed, sliding: l.sliding, concurrent: l.concurrent, win: &windowState{}}
	}
	switch {
	case l.fixed:
		st.win.live(l, now)
	case l.sliding:
		st.log = slidingLive(st.log, l, now)
	case l.concurrent:
		st.leases = concLive(st.leases, now)
	case st.tat <= now:
		st.tat = 0
	}
}

// ceilMs is the millisecond at or after the instant us.
func ceilMs(us int64) int64 { return floorDiv(us+999, 1000) }

// floorDiv is a / b rounded toward negative infinity (b > 0), as Lua's
// math.floor(a / b) is for the integers the model uses.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// luaCompose is the composition's part of the scripts: the configured
// limits read from the arguments (limits_args, the Lua's own: the Go
// has them in p.Limits and s.limits), each a limit table made of its key
// and spec and loaded (limit_with), and the limits that apply
// (State.active), the learned windows and log loaded from keys only when
// they do. An active is the list of its limit tables, with active's
// learned.
const luaCompose = `
local function limit_with(key, l)
  l.key = key
  limit_load(l)
  return l
end
local function limits_args(k0, a0, n)
  local out = {}
  for i = 1, n do
    local j = a0 + (i - 1) * 3
    local kind = tonumber(ARGV[j + 1])
    out[i] = limit_with(KEYS[k0 + i], {fixed = kind == C.kindFixed, sliding = kind == C.kindSliding, concurrent = kind == C.kindConcurrent,
      per = tonumber(ARGV[j + 2]), n = tonumber(ARGV[j + 3])})
  end
  return out
end
local function state_active(s, keys)
  if C.limits > 0 then return s.limits end
  if s.flight.phase == C.flightConfirmed then return {s.lease, flight = true} end
  local l, ok = learn_spec(s.learn)
  if ok and (not s.budget.known or s.learn.secondary > 0) then
    l.learned, l.paced = true, s.learn.paced > 0
    s.lwin = limit_with(keys.lwin, l) -- the learned windows' counts, which a learned log's admissions count too
    local a = {s.lwin, learned = true}
    local ll, logs = learn_log_spec(s.learn)
    if logs then
      s.llog = limit_with(keys.llog, ll)
      a[1] = s.llog
    end
    if s.flight.phase == C.flightProbation or s.flight.phase == C.flightBoth then a[2], a.flight = s.lease, true end -- beside the learned window (flight.go)
    return a
  end
  return {}
end
`

// luaActive is active's arithmetic in the scripts (active.kept, earliest,
// interval, concurrent, sliding, full, others): the earliest instant all
// the limits admit (the same search and final check as admit, of what k
// leaves of each), the line's pace, and the kinds among them. kept
// answers the capacities k leaves, the n of each of the Go's kept specs.
const luaActive = `
local function active_kept(a, k)
  local view = {}
  for i, l in ipairs(a) do
    view[i] = l.n
    if keeper_holds(k) then view[i] = l.n - keeper_of(k, l.n) end
  end
  return view
end
local function active_earliest(a, al, k, cost)
  local view = active_kept(a, k)
  local at = now_us
  for _ = 1, C.maxRounds do
    local before = at
    for i, l in ipairs(a) do at = math.max(at, limit_earliest(l, al, at, cost, view[i])) end
    if at == before then break end
  end
  local ok = true
  for i, l in ipairs(a) do ok = ok and limit_earliest(l, al, at, cost, view[i]) == at end
  return at, ok
end
local function active_interval(a, cost)
  local inc = 0
  for _, l in ipairs(a) do
    if limit_spec_gcra(l) and (inc == 0 or l.per * cost < inc) then inc = l.per * cost end
  end
  return inc
end
local function active_concurrent(a)
  for _, l in ipairs(a) do if l.concurrent then return true end end
  return false
end
local function active_full(a, al, k, cost)
  local view = active_kept(a, k)
  for i, l in ipairs(a) do
    if l.concurrent and limit_earliest(l, al, now_us, cost, view[i]) > now_us then return true end
  end
  return false
end
local function active_others(a)
  local o = {learned = a.learned}
  for _, l in ipairs(a) do if not l.concurrent then o[#o + 1] = l end end
  return o
end
local function active_sliding(a)
  for _, l in ipairs(a) do if l.sliding then return true end end
  return false
end
`

// luaAdmitCommit is the commit of an admission at at (admission.commit):
// the learned limit's part (admission_commit_learned), every limit spent,
// the budget spent, the learned cycle counted, a hintless episode's probe
// marked, the slow start counted, and whether the open cache may hold the
// scope (admission_opens_cache). The records changed are saved.
const luaAdmitCommit = `
local function admission_commit_learned(a, d, at)
  if not a.lim.learned then return end
  local s = a.s
  if learn_opens(s.learn, s.lwin, a.al, at) then
    s.learn.probeAt, d.opens = at, at
    s.learn.expires, s.learn.dirty = math.max(s.learn.expires, at + C.learnTTL), true
  end
  learn_grow(s.learn, s.lwin, a.al, at)
  if active_sliding(a.lim) then window_spend(s.lwin, a.al, at, a.cost); limit_save(s.lwin) end
end
local function admission_opens_cache(a, probes, starts)
  return #a.lim == 0 and C.limits == 0 and budget_quiet(a.s.budget) and not probes and not starts
end
local function admission_commit(a, d, at, h)
  local s = a.s
  admission_commit_learned(a, d, at)
  for _, l in ipairs(a.lim) do limit_spend(l, a.al, at, a.cost, a.id); limit_save(l) end
  if C.limits == 0 then
    d.probe, d.seq = budget_spend(s.budget, a.cost, h.budget)
    learn_count(s.learn, at, a.cost)
    budget_save(s.budget)
  end
  learn_save(s.learn)
  local probes = fallback_probes(s.fall)
  if probes then s.fall.probeAt, s.fall.dirty, d.opens = at, true, at; fallback_save(s.fall) end
  if h.starts then
    start_spend(s.start, at, a.cost); start_save(s.start)
    d.opens = at -- its answer is reported
  end
  d.leased, d.level = flight_leasing(s.flight), admission_level(a, at, h.starts)
  d.mark = flight_mark(s.flight, d.level, a.cost)
  flight_save(s.flight)
  d.cache = admission_opens_cache(a, probes, h.starts)
end
`

// The admission in the scripts is admitAs (state_admit_as), one local
// function per step of admission, each named as its Go twin
// (admission.deadline is admission_deadline, held.later held_later): the
// deadlines (luaAdmitDeadline), then the limits' earliest instant of what
// the class leaves and the verdict (luaAdmitLimits, and the learned
// concurrency limit's probes: luaAdmitFlight), then the commit
// (luaAdmitCommit); the reply starts with what it shows of the scope
// (luaAdmitShown). An admission a holds admission's fields (s the loaded
// state, as State names its records; lim the active limits; al, k, the
// line's key, the lease id) and dry (Gate.State: commit nothing, take no
// slot of the line); the decision d is Decision's fields, lower-cased
// (Until is deadline: until is Lua's), and the admission's named reply.

// luaAdmitShown is what the admission's reply shows of the scope, whatever
// the verdict (admission_shown): the fields Gate.State reads, the backlog
// of the first limit, and how many requests the scope can use when it
// reopens (state_reopen, State.reopen). It has no Go twin but reopen: the
// model answers State from its values.
const luaAdmitShown = `
local function state_reopen(s, lim)
  if s.budget.known and s.budget.limit > 0 then return s.budget.limit end
  if lim.learned then return lim[1].n end
  return 0
end
local function admission_shown(a)
  local s, lim = a.s, a.lim
  local d = {now = now_us, limited = #lim > 0, reopen = state_reopen(s, lim), budgetRemaining = s.budget.known and s.budget.remaining or -1,
    budgetReset = s.budget.reset, budgetLimit = s.budget.limit, learnedLimit = s.learn.limit, learnedWindow = s.learn.window}
  if s.flight.phase == C.flightConfirmed or s.flight.phase == C.flightBoth then d.learnedInFlight = s.flight.limit end
  local l = lim[1]
  if l and l.sliding and #l.log > 0 then d.backlog = l.log[#l.log] + l.per - now_us
  elseif l and limit_spec_gcra(l) and l.tat > now_us then d.backlog = l.tat - now_us end
  return d
end
`

// luaAdmitDeadline asks the concerns that hold a scope by a deadline
// (admission.deadline and its questions), and answers a request held by
// one (admission.paused, deferTo).
const luaAdmitDeadline = `
local function held_later(h, at, why)
  if at > math.max(h.at, now_us) then h.at, h.why = at, why end
end
local function admission_budget(a)
  if C.limits > 0 then return {at = 0} end
  return budget_earliest(a.s.budget, a.cost, a.k)
end
local function admission_learned(a)
  if not a.lim.learned then return 0 end
  return learn_earliest(a.s.learn)
end
local function admission_start(a, on)
  if not on or C.nowOnly then return 0 end
  return start_earliest(a.s.start, a.cost)
end
local function admission_deadline(a)
  local s = a.s
  local h = {at = pause_earliest(s.pause), why = C.reasonPause}
  h.budget = admission_budget(a)
  held_later(h, h.budget.at, h.budget.why)
  held_later(h, admission_learned(a), C.reasonProbe)
  held_later(h, fallback_earliest(s.fall), C.reasonProbe)
  local _, learned = learn_spec(s.learn)
  h.starts = start_on(s.start, s.budget, learned)
  held_later(h, admission_start(a, h.starts), C.reasonInFlight)
  return h
end
local function admission_defer_to(a, at)
  local inc = 0
  if not a.dry then inc = active_interval(a.lim, a.cost) end -- a dry run takes no slot
  return line_take(a.line, at, inc), inc > 0
end
local function admission_paused(a, d, h)
  d.code, d.reason = C.paused, h.why
  d.deadline = math.ceil(h.at / 1000)
  d.wait = h.at - now_us
  d.slots = a.s.flight.phase == C.flightProbation
  if h.why == C.reasonPause then d.deadline, d.byOp = a.s.pause.untilMs, pause_operator(a.s.pause) end
  if #a.lim > 0 then d.wait, d.spread = admission_defer_to(a, h.at) end
  return d
end
`

// luaAdmitLimits is the rest of admitAs: the search of the limits
// (admission.search), the verdict (unreserved, within, fullRetry,
// limited), and admitAs itself (state_admit_as).
const luaAdmitLimits = `
local function admission_search(a)
  local k = a.k
  local at, ok = active_earliest(a.lim, a.al, k, a.cost)
  if at > now_us and k.lent > 0 then
    k = {share = k.lent, claims = 0, lapse = 0, lent = 0}
    at, ok = active_earliest(a.lim, a.al, k, a.cost)
  end
  if k.lapse > 0 and at > k.lapse then at, ok = k.lapse, false end
  return at, ok, k
end
local function admission_unreserved(a, k, full)
  local lim = a.lim
  return C.nowOnly or lim.learned and not active_sliding(lim) or full
    or k.lapse > 0 and (active_interval(lim, a.cost) > 0 or active_sliding(lim) or active_concurrent(lim))
end
local function admission_within(a, at, ok, unreserved)
  return ok and at - now_us <= C.hold and not (unreserved and at > now_us)
end
local function admission_full_retry(a, k, at)
  local others = active_earliest(active_others(a.lim), a.al, k, a.cost)
  return math.min(at, math.max(others, now_us + C.concurrentPoll))
end
local function admission_limited(a, d, k, at, full, unreserved)
  d.code, d.reason, d.unreserved = C.limited, C.reasonLimit, unreserved
  if a.lim.learned then d.reason = C.reasonLearned end
  if full then d.reason, at = C.reasonInFlight, admission_full_retry(a, k, at) end
  d.wait, d.spread = admission_defer_to(a, at)
  return d
end
local function state_admit_as(s, cost, lim, k, line, id, dry)
  local a = {s = s, cost = cost, lim = lim, al = learn_alignment(s.learn), k = k, line = line, id = id, dry = dry}
  local d = admission_shown(a)
  if admission_retried(a, d) then return d end
  local h = admission_deadline(a)
  if h.at > now_us then return admission_paused(a, d, h) end
  local at, ok
  at, ok, k = admission_search(a)
  local full = active_full(lim, a.al, k, cost)
  local unreserved = admission_unreserved(a, k, full)
  if not admission_within(a, at, ok, unreserved) then
    if admission_beyond(a, at) then return admission_commit_beyond(a, d) end
    if admission_probing(a, at) then return admission_await_probe(a, d, at) end
    return admission_limited(a, d, k, at, full, unreserved)
  end
  d.wait = at - now_us
  if not dry then admission_commit(a, d, at, h) end
  return d
end
`

// Forget drops what the scope learned and observed: the budget, the
// learned limit and its windows, the hintless episode. What is left is
// the article's plain shared pause, which learns nothing (the simulations
// compare the two).
func (s *State) Forget() {
	s.learn, s.budget, s.lwin, s.fall = learnState{}, budgetState{}, windowState{}, fallbackState{}
	s.flight, s.lease = flightState{}, limitState{}
}

// Deadline is the pause deadline recorded, Unix ms (0: none).
func (s *State) Deadline() int64 { return s.pause.untilMs }

// PausedAt reports whether the pause is in force at now (µs).
func (s *State) PausedAt(p Params, now int64) bool { return s.pause.inForce(p, now) }

// Probing reports whether a budget probe is out: its answer will tell the
// budget.
func (s *State) Probing() bool { return s.budget.probeAt > 0 }

// String sums up what the scope learned and observed, for traces: the
// learned limit, the budget and the hintless episode.
func (s State) String() string {
	return fmt.Sprintf("pause %d; learned %d per %d µs (best %d, aligned at %d, probe %d); budget %d of %d (reset %d, window %d, a unit every %d µs); hintless level %d (probe %d); flight %d phase %d (probes %d, acks %d, held %d)",
		s.pause.untilMs, s.learn.limit, s.learn.window, s.learn.best, s.learn.alignAt, s.learn.probeAt,
		s.budget.remaining, s.budget.limit, s.budget.reset, s.budget.window, s.budget.per, s.fall.level, s.fall.probeAt,
		s.flight.limit, s.flight.phase, s.flight.sent, s.flight.acks, len(s.lease.leases))
}

// ReadsCounter reports whether the budget is read as a sliding window
// counter's (budgetState.counts).
func (s *State) ReadsCounter() bool { return s.budget.window > 0 }
