package model

import (
	"cmp"
	"slices"
)

// The learned concurrency limit: how many requests a scope may have in
// flight, learned when its provider limits requests in flight rather than
// requests per window.
//
// A concurrency limit and a window look the same at first contact: a
// fleet's first requests go together, the provider accepts some and
// refuses the rest with a short hint, and the learned limit learns them
// per the hint's window (learn.go). They differ in what decides a
// refusal. A concurrency limit of c refuses a request only while c others
// are in flight, and never one alone; a window refuses every request
// after its n-th until it resets, however few are in flight. So the model
// reads, for each refusal, the refused request's level: the requests the
// scope had in flight when it was admitted, itself included (Refusal.Level:
// the leases held, or the slow start's requests unanswered), and runs the
// experiment that tells the two apart. A request is alone only when
// nothing was in flight at its admission and nothing was admitted after it
// until its refusal (told): requests admitted one after the other reach
// the provider in any order, and a request admitted alone is refused as
// one too many in flight when those admitted after it overtook it.
//
//  1. Probation (begin). A hinted refusal that teaches a learned limit to
//     a scope with nothing configured and no budget advertised puts it on
//     probation, unless the refused request was alone (level 1, told:
//     no concurrency limit refuses it; the scope is rate-limited). The scope
//     then runs under its learned window and, beside it, a limit of c
//     requests in flight, c one below the lowest level refused (every
//     refusal on probation lowers it so), but no lower than the most
//     requests the slow start saw accepted at once by the refusals of the
//     moment that paused the scope (those that come while it is paused):
//     requests admitted in the same moment reach the provider in any
//     order, so one refused may be counted below the level the provider
//     refused it at. For the same reason, once the scope reopened, a
//     refusal on probation is one too many in flight whatever its level:
//     c goes one lower (refuseOpen), and the scope is paused. And nothing
//     says the provider accepts c at once: c is untried, a raise from
//     c − 1 (rule 6).
//     The leases are shared through Redis as a configured Concurrent(c)'s
//     are.
//  2. The probe beyond the window (beyond). On probation, a request that
//     only the learned window holds back (its window spent, a slot of c
//     free, nothing else holding the scope) goes at once as the flight's
//     probe, one at a time; its answer is awaited as a learned window's
//     probe's is (Decision.Opens).
//  3. The verdict. A window refuses the probe, or any request alone (no
//     concurrency limit refuses one): the scope is rate-limited (rate),
//     its learned window paces it as before, and it sends no more probes;
//     but if probes beyond a learned window were answered on this
//     probation, the provider accepted requests the learned window would
//     not have, so the window it refused at is not all that refused the
//     requests whose levels set c: the scope is limited by both (both),
//     and c stays, fixed, beside the learned window (verdictRate). More
//     than n probes beyond one learned window (n + 1, and
//     at least flightConfirm), answered without a refusal, say the
//     provider accepts requests its window would not, as long as fewer
//     than c are in flight: the scope is concurrency-limited (confirmed),
//     and its learned window no longer applies. Fewer say nothing: the
//     learned window lies where the refusal's deadline put it, not
//     necessarily where the provider's lies, and the provider's next
//     window may begin within the learned one and accept up to n of them;
//     but a fixed window of n, however it lies, accepts at most 2n within
//     one span of the learned window, whose own n took their share. The
//     count starts again with the first probe beyond a later window. A
//     probe costs a rate limit one refused request, once per what it
//     learns.
//  4. Confirmed, a refusal at a level above 1 is the limit's: it does not
//     pause the scope, the refused request waits its own hint, and c
//     becomes at most the level below the refused one, and c − 1 (lower).
//     A refusal of a request alone is no concurrency limit's but a
//     window's, and so were the refusals that lowered c since it was
//     confirmed or last raised: a window, once spent, refuses every
//     request, and c's refusals stop once c is low enough. So the scope is
//     limited by both, c back to what it was before them (before), and
//     the refusal pauses it. It teaches the learned window its alignment
//     only (State.learnRefusal): the cycle it ends was paced by c, not by
//     the window, so what it admitted is no window's quota; so does a
//     refusal on probation that ends a cycle in which c held a request
//     back (paced). Limited by
//     both, every refusal is the window's, as no more than c were in
//     flight: it pauses the scope and leaves c as it is, until the record
//     is forgotten.
//  5. Raise. Confirmed, every c answers without a refusal, counted while
//     the limit was full (an admission took its last slot), raise c by one
//     (raise): additive increase, at most once per round trip of the
//     limit, so a provider that allows more is found again. A refusal
//     freezes raises for raiseAfter, as it does the learned window's: the
//     refused level says where the provider's limit is, and each raise
//     above it costs a refused request and its task's retry. Limited by
//     both, c is not raised: the window refuses at every level up to c, so
//     no refusal would tell a raise above the provider's limit from the
//     window's end, and the scope would be paused for it.
//  6. Grow. On probation, a learned window that ended unspent while c
//     held a request back (an admission took the last slot, the window
//     had room) says c, not the window, paced the scope: c goes up by one
//     (grow), to at most n. The probation's experiment needs a spent
//     window (rule 2), and a c set by a first contact's refusals may be
//     far below what the provider accepts: a window's refusals come at
//     whatever level the requests were admitted at, and at a long
//     latency c requests at a time never spend the window. The first
//     refusal once the scope reopened after a raise (or after the
//     probation began, c untried) refused the raise, whatever its level:
//     it does not pause the scope (the refused request waits its own
//     hint), c goes one lower, and growth stops for raiseAfter, so a
//     provider that limits requests in flight pays one refused request a
//     minute for it. A window that ends refused was not left unspent by
//     c: it raises nothing (held is forgotten).
//
// Leases live flightLease unreleased: a worker that dies leaks none. A
// call that took a lease and whose answer was lost, asked again with the
// same lease id, is admitted again (admission.retried), so its task runs
// and releases it. What
// was learned is forgotten LearnTTL after it was last taught (a refusal,
// the confirmation), as the learned window is; Resume forgets it.
//
// Invariants: 1 ≤ c while learned; no admission makes the leases in
// flight sum to more than c; on probation at most one probe beyond the
// window is out.

// Phases of the learned concurrency limit (flightState.phase).
const (
	flightNone      = 0 // nothing learned
	flightProbation = 1 // a learned window's scope: leases taken, probes beyond the window sent
	flightConfirmed = 2 // concurrency-limited: the learned concurrency limit paces the scope
	flightRate      = 3 // rate-limited: the learned window paces the scope, no probes
	flightBoth      = 4 // rate- and concurrency-limited: the learned window and c, fixed, pace the scope
)

// flightLease is how long a lease of the learned concurrency limit lives
// unreleased (µs), as DefaultLease for a configured one: longer than any
// request a scope waits for, short enough that a dead worker's slot comes
// back within a minute.
const flightLease = 60_000_000

// flightConfirm is the fewest probes beyond a spent window, answered
// without a refusal, that confirm a concurrency limit, however small n
// (answer asks for n + 1): one could be a token a bucket refilled, or a
// slot a sliding log freed, while the window was spent; two in a row,
// each sent alone beyond the window, are what only a limit on requests in
// flight grants at once.
const flightConfirm = 2

// flightProbes is how many probes beyond the window go at a time once the
// first, sent alone, was answered: two, the fewest that still halves the
// probation's round trips, and a level every concurrency limit of two or
// more accepts (one of one is judged a window's: it paces the scope as
// one, at its latency's rate).
const flightProbes = 2

// flightState is the scope's learned concurrency limit.
type flightState struct {
	limit int64 // c: requests in flight (0: none learned)
	phase int64 // flightNone, flightProbation, flightConfirmed, flightRate
	// probation: the probes beyond the window: the first went at since
	// (µs, 0 none), sent of them, acks answered, the last sent or
	// answered at last (µs); confirmed: acks are the answers toward a raise
	since, sent, acks, last int64
	answered                int64 // probation: probes beyond a learned window answered, whichever window
	before                  int64 // confirmed: c before its first lowering since it was confirmed or raised (0: none since)
	full                    bool  // confirmed: an admission took the last slot since the last raise
	frozen                  int64 // µs: no raise before it (a refusal at the level)
	// admitted: the units admitted at a level (a slow start's, or a
	// lease's), whatever the phase: an admission's mark is the count once
	// it is admitted (Decision.Mark), which its refusal tells (told)
	admitted int64
	// probation: the learned window (its start, µs; 0 none) in which c
	// held a request back while the window had room (held); c before the
	// last raise of the probation, or c − 1 for the c it began with
	// (raised, 0 none: no refusal of the open scope since told it); no
	// raise before grown (µs; a raise refused)
	held, raised, grown int64
	expires             int64 // µs: forgotten at (0: empty)
}

// spec is the learned concurrency limit as a limit.
func (f flightState) spec() LimitSpec {
	return LimitSpec{concurrent: true, per: flightLease, n: f.limit}
}

// leasing reports whether the scope's admissions take a lease on the
// learned concurrency limit: on probation, confirmed, and limited by
// both.
func (f flightState) leasing() bool {
	return f.phase == flightProbation || f.phase == flightConfirmed || f.phase == flightBoth
}

// begin puts a scope on probation at now when a hinted refusal of a
// request at level (as told) taught it the learned limit n (rule 1), with
// nothing configured and no budget (configured), and nothing learned of
// its concurrency yet. A refusal whose level is unknown (0) begins nothing:
// without it no c can be set, nor the probation's experiment told. c is
// below the refused level, but not below seen, the most requests the
// provider was seen to accept at once (startState.most), at most n: a
// request's level counts those admitted before it, and those admitted
// with it in the same moment may reach the provider first, so a level
// alone would hold the scope below what the provider accepts. c is
// untried: a raise from c − 1 (raised, rule 6).
func (f *flightState) begin(now, n, level, seen int64, configured bool) {
	switch {
	case configured || f.phase != flightNone || n <= 0 || level <= 0:
	case level == 1:
		*f = flightState{phase: flightRate, admitted: f.admitted, expires: now + LearnTTL}
	default:
		*f = flightState{limit: n, phase: flightProbation, frozen: now + raiseAfter, admitted: f.admitted, expires: now + LearnTTL}
		f.belowSeen(level, seen)
		f.raised = f.limit - 1 // c is untried: a raise from c − 1 (rule 6)
	}
}

// belowSeen lowers c below a refused level (below), but not below seen,
// the most requests the provider was seen to accept at once
// (startState.most), nor above what c was: the refusal of a request
// admitted in the same moment as the one whose refusal began the
// probation, or paused the scope since, comes while the scope is paused,
// and the requests of one moment reach the provider in any order: one
// admitted third may have reached it last, so the level it was admitted
// at is no measure of the limit that refused it (rule 1).
// c stays untried (raised, rule 6), a raise from at most c − 1.
func (f *flightState) belowSeen(level, seen int64) {
	floor := min(f.limit, seen)
	f.below(level)
	f.limit = max(f.limit, floor)
	f.raised = min(f.raised, f.limit-1)
}

// below lowers c below a refused level (0: unknown, no change), to at
// least 1.
func (f *flightState) below(level int64) {
	if level > 0 {
		f.limit = max(1, min(f.limit, level-1))
	}
}

// mark counts an admission of cost at level (0: none, nothing counted)
// at now, and returns its mark: the units admitted at a level so far, its
// own included. A count begun before anything was learned lives
// LearnTTL, as what it teaches does.
func (f *flightState) mark(now, level, cost int64) int64 {
	if level <= 0 {
		return 0
	}
	f.admitted += cost
	if f.expires == 0 {
		f.expires = now + LearnTTL
	}
	return f.admitted
}

// told is the level a refusal of the request admitted at level with mark
// (Decision.Mark; 0: none, the level is this process's count) tells: its
// level, unless it was admitted alone (level 1) and others were admitted
// at a level after it until its refusal: then itself and those, the most
// it may have been refused with in flight. Requests admitted one after
// the other reach the provider in any order: one admitted alone and
// overtaken by those admitted after it is refused as one too many in
// flight, and its level alone would say rate-limited (begin, refuse),
// which no concurrency limit refuses. A level above 1 is told as it is:
// c goes below it (below), and those admitted after it may as well have
// reached the provider after it. A count forgotten since (a mark above
// it) tells nothing more.
func (f flightState) told(level, mark int64) int64 {
	if level != 1 || mark <= 0 {
		return level
	}
	return 1 + max(0, f.admitted-mark)
}

// beyond reports whether, on probation, a request of cost goes at now as
// a probe beyond the window, held units of the limit in flight (rule 2).
// The first goes alone, nothing else in flight: a window refuses it, a
// concurrency limit never does, whatever c is. Once one was answered,
// flightProbes go at a time, beside nothing but each other: levels any
// concurrency limit that takes more than one request at once accepts, so
// a refused probe is a window's, never a c set too high; or the last
// probe's answer is overdue (Params.Answer).
func (f flightState) beyond(p Params, now, cost, held int64) bool {
	switch {
	case f.phase != flightProbation:
		return false
	case now >= f.last+p.Answer && f.sent > 0:
		return true
	case f.acks == 0:
		return held == 0 && f.sent == 0
	}
	return f.sent-f.acks+cost <= flightProbes
}

// probe records a probe of cost admitted at at, beyond the learned window
// that began at start. The first beyond a window later than the one the
// probes counted went beyond starts their count again (since, sent,
// acks): only probes beyond one window tell a concurrency limit from a
// window (answer).
func (f *flightState) probe(at, cost, start int64) {
	if f.since < start {
		f.since, f.sent, f.acks = at, 0, 0
	}
	f.sent, f.last = f.sent+cost, at
}

// probed reports whether the request admitted at at (its answer id,
// Decision.Opens) is a probe beyond the window.
func (f flightState) probed(at int64) bool {
	return f.phase == flightProbation && f.since > 0 && at >= f.since
}

// answer records at now the answer, without a refusal, of the request
// admitted at at, n the learned window's limit: a probe's counts toward
// the verdict (rule 3), which n + 1 of them, beyond one learned window,
// confirm. A fixed window of n per w, however it lies across the learned
// one, accepts at most 2n requests within it, n of them the learned
// window's own: n probes beyond it may be the provider's next window's,
// and only one more is what no window of n grants.
func (f *flightState) answer(now, at, n int64) {
	if !f.probed(at) {
		return
	}
	f.acks, f.answered, f.last = f.acks+1, f.answered+1, now
	if f.acks >= max(n+1, flightConfirm) {
		*f = flightState{limit: f.limit, phase: flightConfirmed, frozen: f.frozen, admitted: f.admitted, expires: max(f.expires, now+LearnTTL)}
	}
}

// released records at now the end of a request of the confirmed limit,
// answered without a refusal or not (rule 5).
func (f *flightState) released(now int64, answered bool) {
	if f.phase != flightConfirmed || !answered || !f.full {
		return
	}
	f.acks++
	if f.acks < f.limit || now < f.frozen {
		return
	}
	f.limit++
	f.acks, f.full, f.before = 0, false, 0
}

// paced reports whether the learned concurrency limit, not the learned
// window, paced the cycle that began at since, of windows of w µs:
// confirmed, the window no longer applies (rule 4); on probation, c held
// a request back while a learned window of the cycle had room (held,
// rule 6). What such a cycle got accepted is what c let go, no window's
// quota (State.learnRefusal).
func (f flightState) paced(since, w int64) bool {
	return f.phase == flightConfirmed || f.phase == flightProbation && f.held > 0 && f.held+w > since
}

// What a refusal is to the learned concurrency limit (flightState.refuse).
const (
	flightPause = iota // a refusal as any other: it pauses the scope
	flightOwn          // the limit's: the refused request waits its own hint, the scope is not paused
	flightSpent        // the probe's, hinted: the learned window was spent, as known; the scope is paused, and nothing is learned
)

// refuse learns from a provider's refusal r at now, of a request at
// r.Level (as told; 0 unknown), the scope open or not, seen the most
// requests the provider was seen to accept at once, and tells what it is
// (flightPause, flightOwn, flightSpent): rules 1, 3, 4 and 6.
func (f *flightState) refuse(now int64, r Refusal, open bool, seen int64) int {
	level := r.Level
	switch {
	case f.probed(r.Opens): // rule 3: a window refused the probe
		*f = f.verdictRate()
		if r.Hinted {
			return flightSpent
		}
	case f.phase == flightProbation && level == 1:
		*f = f.verdictRate()
	case f.phase == flightProbation && open:
		return f.refuseOpen(now)
	case f.phase == flightProbation:
		f.belowSeen(level, seen)
	case f.phase == flightConfirmed && level == 1: // no concurrency limit refuses a request alone
		*f = f.reset(flightBoth, cmp.Or(f.before, f.limit))
	case f.phase == flightConfirmed && open:
		f.lower(now, level)
		return flightOwn
	}
	return flightPause
}

// refuseOpen learns, at now, from a refusal of a request sent once the
// scope reopened on probation (rules 1 and 6): one too many in flight, so
// c goes one lower, whatever the refused request's level (the requests
// sent together reach the provider in any order, so its level is no
// measure of the limit). The first since c was raised, or begun, untried
// (raised), refused the raise: the scope is not paused (the refused
// request waits its own hint), and growth stops for raiseAfter. Any
// other pauses the scope, and the window it ends was refused, not left
// unspent by c (held).
func (f *flightState) refuseOpen(now int64) int {
	f.limit = max(1, f.limit-1)
	if f.raised > 0 {
		f.grown, f.raised = now+raiseAfter, 0
		return flightOwn
	}
	f.held = 0
	return flightPause
}

// verdictRate is the learned concurrency limit once a window refused its
// probe, or a request alone, on probation (rule 3): rate-limited
// (flightRate), or, when probes beyond a learned window were answered on
// this probation (answered), rate- and concurrency-limited (flightBoth),
// c kept.
func (f flightState) verdictRate() flightState {
	if f.answered > 0 {
		return f.reset(flightBoth, f.limit)
	}
	return f.reset(flightRate, 0)
}

// reset is f begun again in phase with c = limit: what it counted of
// the probation or the raises forgotten, the levels' count and the
// record's life kept (flight_reset, its frozen 0).
func (f flightState) reset(phase, limit int64) flightState {
	return flightState{limit: limit, phase: phase, admitted: f.admitted, expires: f.expires}
}

// lower sets c below the refused level, and to c − 1, at least 1, and
// freezes raises (rule 4).
func (f *flightState) lower(now, level int64) {
	if f.before == 0 {
		f.before = f.limit
	}
	f.limit = max(1, f.limit-1)
	f.below(level)
	f.acks, f.full = 0, false
	f.frozen = now + raiseAfter
	f.expires = max(f.expires, now+LearnTTL)
}

// beyond reports whether the request, which the limits admit only at at
// (later than now, or not within the hold), goes at once as the learned
// concurrency limit's probe beyond the learned window (rule 2): the
// learned window is what holds it (not a paced one's pace: its
// admissions are spread, not spent), the limit has a slot for it, and the
// probation lets it go.
func (a admission) beyond(at int64) bool {
	s := a.s
	if !a.probing(at) || !s.flight.beyond(a.p, a.now, a.cost, concHeld(s.lease.leases, a.now)) {
		return false
	}
	return concEarliest(s.lease.leases, s.flight.spec(), a.now, a.cost) == a.now
}

// probing reports whether, on probation, the request that the limits
// admit only at at is held by the learned window, unpaced: a probe beyond
// it may go as soon as a slot or the probes' ramp lets it (beyond).
func (a admission) probing(at int64) bool {
	return a.lim.learned && a.lim.flight && !a.lim.states[0].paced && at > a.now && a.s.flight.phase == flightProbation
}

// awaitProbe is the verdict of a request that waits for a probe's room
// (probing): limited by what is in flight, as by a concurrency limit
// with every slot taken, it asks again concurrentPoll from now (or at at,
// if sooner), or when a release or an answer in its process wakes it,
// instead of waiting for the learned window's next.
func (a admission) awaitProbe(d Decision, at int64) Decision {
	d.Code, d.Reason, d.Unreserved = Limited, ReasonInFlight, true
	d.Wait, d.Spread = a.deferTo(min(at, a.now+concurrentPoll))
	return d
}

// commitBeyond admits the probe beyond the learned window at now: it takes
// its lease, and its answer is awaited. It does not count in the learned
// cycle: it is beyond the window, and teaches the window nothing.
func (a admission) commitBeyond(d Decision) Decision {
	s := a.s
	l, _ := s.learn.spec()
	start, _ := s.lwin.window(l, a.p, a.al, a.now)
	s.flight.probe(a.now, a.cost, start)
	d.Opens = a.now
	s.lease.spend(s.flight.spec(), a.p, a.al, a.now, a.now, a.cost, a.id)
	d.Leased, d.Level = true, concHeld(s.lease.leases, a.now)
	d.Mark = s.flight.mark(a.now, d.Level, a.cost)
	return d
}

// level is an admission's level after its commit at at: the leases the
// learned concurrency limit holds, its own included, or, in a slow
// start, the start's requests unanswered (0: neither).
func (a admission) level(at int64, starts bool) int64 {
	s := a.s
	switch {
	case s.flight.leasing():
		h := concHeld(s.lease.leases, at)
		if s.flight.phase == flightConfirmed && h >= s.flight.limit {
			s.flight.full = true
		}
		if s.flight.phase == flightProbation {
			a.growFlight(at, h)
		}
		return h
	case starts:
		return s.start.sent - s.start.answered
	}
	return 0
}

// growFlight is the probation's additive increase at at, h requests in
// flight once admitted (rule 6): a learned window ended in which c held
// a request back and the window was not spent raises c by one (grow);
// and it notes the window of at when c holds one back now (h ≥ c)
// while the window has room.
func (a admission) growFlight(at, h int64) {
	s := a.s
	l, ok := s.learn.spec()
	if !ok {
		return
	}
	start, _ := s.lwin.window(l, a.p, a.al, at)
	if s.flight.held > 0 && s.flight.held < start {
		s.flight.grow(a.now, s.lwin.used(l, s.flight.held), l.n)
	}
	if h >= s.flight.limit && s.lwin.used(l, start) < l.n {
		s.flight.held = start
	}
}

// grow ends, at now, the learned window in which c held a request
// back, which got used of the learned window's n admitted: unspent, c
// was what held the scope, and c goes up by one, to at most n, unless a
// raise was refused within raiseAfter (rule 6).
func (f *flightState) grow(now, used, n int64) {
	if used < n && f.limit < n && now >= f.grown {
		f.raised, f.limit = f.limit, f.limit+1
	}
	f.held = 0
}

// retried reports whether the admission's lease id holds a lease of the
// learned concurrency limit already, and answers it as its first run was
// answered: admitted, at its level, committing nothing more. Only a call
// that took the lease and whose answer was lost asks with its id again
// (a Redis client retries a call that timed out reading it; the gate's
// next round asks with the same id): answered otherwise, limited by its
// own lease or paused by a refusal since, its task would be deferred and
// the lease hold a slot of c for its whole life (flightLease), and, on
// probation, keep the probe beyond the window, which goes with nothing
// else in flight, from ever going.
func (a admission) retried(d Decision) (Decision, bool) {
	s := a.s
	if a.id == "" || !s.flight.leasing() || !slices.ContainsFunc(s.lease.leases, func(x lease) bool { return x.id == a.id }) {
		return d, false
	}
	d.Leased, d.Level = true, concHeld(s.lease.leases, a.now)
	return d, true
}

// refuseFlight applies a provider's refusal at now to the learned
// concurrency limit (flightState.refuse), and tells what it is; a
// refusal of the limit (flightOwn) answers the refused request's own
// deadline (ms): its hint, or, without one, MinPause (Refusal.Pause is
// then the cap of a hintless episode, which is no request's own wait).
func (s *State) refuseFlight(p Params, now int64, r Refusal, open bool) (verdict int, own int64) {
	if r.Operator || len(p.Limits) > 0 {
		return flightPause, 0
	}
	ms := r.Pause
	if !r.Hinted {
		ms = MinPause.Milliseconds()
	}
	return s.flight.refuse(now, r, open, s.start.most), ceilMs(now) + ms
}

// luaFlight is the learned concurrency limit's record, what a refusal
// tells (told) and its probation's start (luaFlightAnswer the rest),
// flightState's methods as
// flight_* functions of the record s (its fields as FlightFields name
// them, full a boolean, and conc, the key of its leases), each named as
// its Go twin. A scope with limits configured
// (nlim) has none, and reads nothing of it (flight_load); its leases are
// read only while admissions take them (flight_lease).
const luaFlight = `
local function flight_load(key, conc, nlim)
  local s = {key = key}
  if nlim > 0 then
    for _, f in ipairs(flightFields) do s[f] = 0 end
  else
    s = hrecord(key, flightFields)
  end
  s.full, s.conc = s.full == C.flagOn, conc
  return s
end
local function flight_save(s) hsave(s, flightFields) end
local function flight_reset(s, phase, limit, frozen, expires)
  local admitted = s.admitted
  for _, f in ipairs(flightFields) do s[f] = 0 end
  s.full, s.phase, s.limit, s.frozen, s.admitted, s.expires, s.dirty = false, phase, limit, frozen, admitted, expires, true
end
local function flight_spec(s)
  local l = {key = s.conc, concurrent = true, per = C.flightLease, n = s.limit}
  limit_load(l)
  return l
end
local function flight_leasing(s) return s.phase == C.flightProbation or s.phase == C.flightConfirmed or s.phase == C.flightBoth end
local function flight_lease(s)
  if flight_leasing(s) then return flight_spec(s) end
  return {key = s.conc, concurrent = true, per = C.flightLease, n = s.limit, leases = {}, adds = {}}
end
local function flight_below(s, level)
  if level > 0 then s.limit, s.dirty = math.max(1, math.min(s.limit, level - 1)), true end
end
local function flight_below_seen(s, level, seen)
  local floor = math.min(s.limit, seen)
  flight_below(s, level)
  s.limit = math.max(s.limit, floor)
  s.raised = math.min(s.raised, s.limit - 1)
end
local function flight_told(s, level, mark)
  if level ~= 1 or mark <= 0 then return level end
  return 1 + math.max(0, s.admitted - mark)
end
local function flight_begin(s, n, level, seen, configured)
  if configured or s.phase ~= C.flightNone or n <= 0 or level <= 0 then return end
  if level == 1 then flight_reset(s, C.flightRate, 0, 0, now_us + C.learnTTL); return end
  flight_reset(s, C.flightProbation, n, now_us + C.raiseAfter, now_us + C.learnTTL)
  flight_below_seen(s, level, seen)
  s.raised = s.limit - 1
end
local function flight_beyond(s, cost, held)
  if s.phase ~= C.flightProbation then return false end
  if now_us >= s.last + C.answer and s.sent > 0 then return true end
  if s.acks == 0 then return held == 0 and s.sent == 0 end
  return s.sent - s.acks + cost <= C.flightProbes
end
`

// luaFlightAnswer is the rest of the learned concurrency limit's
// transaction: the levels' count, a probe sent, the answers that confirm
// or raise the limit, and the refusals that lower it (flightState's mark,
// probe, answer, released, lower and refuse).
const luaFlightAnswer = `
local function flight_mark(s, level, cost)
  if level <= 0 then return 0 end
  s.admitted, s.dirty = s.admitted + cost, true
  if s.expires == 0 then s.expires = now_us + C.learnTTL end
  return s.admitted
end
local function flight_probe(s, at, cost, start)
  if s.since < start then s.since, s.sent, s.acks = at, 0, 0 end
  s.sent, s.last, s.dirty = s.sent + cost, at, true
end
local function flight_probed(s, at) return s.phase == C.flightProbation and s.since > 0 and at >= s.since end
local function flight_answer(s, at, n)
  if not flight_probed(s, at) then return end
  s.acks, s.answered, s.last, s.dirty = s.acks + 1, s.answered + 1, now_us, true
  if s.acks >= math.max(n + 1, C.flightConfirm) then
    flight_reset(s, C.flightConfirmed, s.limit, s.frozen, math.max(s.expires, now_us + C.learnTTL))
  end
end
local function flight_released(s, answered)
  if s.phase ~= C.flightConfirmed or not answered or not s.full then return end
  s.acks, s.dirty = s.acks + 1, true
  if s.acks < s.limit or now_us < s.frozen then return end
  s.limit, s.acks, s.full, s.before = s.limit + 1, 0, false, 0
end
local function flight_lower(s, level)
  if s.before == 0 then s.before = s.limit end
  s.limit = math.max(1, s.limit - 1)
  flight_below(s, level)
  s.acks, s.full, s.frozen, s.expires, s.dirty = 0, false, now_us + C.raiseAfter, math.max(s.expires, now_us + C.learnTTL), true
end
local function flight_verdict_rate(s)
  if s.answered > 0 then flight_reset(s, C.flightBoth, s.limit, 0, s.expires)
  else flight_reset(s, C.flightRate, 0, 0, s.expires) end
end
local function flight_paced(s, since, w)
  return s.phase == C.flightConfirmed or s.phase == C.flightProbation and s.held > 0 and s.held + w > since
end
local function flight_refuse_open(s)
  s.limit, s.dirty = math.max(1, s.limit - 1), true
  if s.raised > 0 then
    s.grown, s.raised = now_us + C.raiseAfter, 0
    return C.flightOwn
  end
  s.held = 0
  return C.flightPause
end
local function flight_refuse(s, r, open, seen)
  local probation, confirmed = s.phase == C.flightProbation, s.phase == C.flightConfirmed
  if flight_probed(s, r.opens) then
    flight_verdict_rate(s)
    if r.hinted then return C.flightSpent end
  elseif probation and r.level == 1 then flight_verdict_rate(s)
  elseif probation and open then return flight_refuse_open(s)
  elseif probation then flight_below_seen(s, r.level, seen)
  elseif confirmed and r.level == 1 then flight_reset(s, C.flightBoth, s.before > 0 and s.before or s.limit, 0, s.expires)
  elseif confirmed and open then flight_lower(s, r.level); return C.flightOwn
  end
  return C.flightPause
end
`

// luaAdmitRetried is an admission asked again with the lease id its lost
// answer took (admission.retried): admitted again, at its level.
const luaAdmitRetried = `
local function admission_retried(a, d)
  if a.id == '' or not flight_leasing(a.s.flight) then return nil end
  for _, x in ipairs(a.s.lease.leases) do
    if x.id == a.id then d.leased, d.level = true, conc_held(a.s.lease, now_us); return d end
  end
  return nil
end
`

// luaAdmitFlight is the learned concurrency limit's part of an admission
// and a refusal, as admission's and State's methods: the probe beyond the
// window (admission_probing, admission_beyond, admission_await_probe,
// admission_commit_beyond), an admission's level (admission_level) and
// the refusal's verdict (state_refuse_flight). s.lease is the limit's
// table (its leases, the flight spec's n and per).
const luaAdmitFlight = `
local function admission_probing(a, at)
  local lim = a.lim
  return lim.learned and lim.flight and not lim[1].paced and at > now_us and a.s.flight.phase == C.flightProbation
end
local function admission_beyond(a, at)
  local s = a.s
  if not admission_probing(a, at) or not flight_beyond(s.flight, a.cost, conc_held(s.lease, now_us)) then return false end
  return conc_earliest(s.lease, now_us, a.cost, s.lease.n) == now_us
end
local function admission_await_probe(a, d, at)
  d.code, d.reason, d.unreserved = C.limited, C.reasonInFlight, true
  d.wait, d.spread = admission_defer_to(a, math.min(at, now_us + C.concurrentPoll))
  return d
end
local function admission_commit_beyond(a, d)
  if a.dry then return d end
  local s = a.s
  flight_probe(s.flight, now_us, a.cost, window(s.lwin, a.al, now_us))
  d.opens = now_us
  limit_spend(s.lease, a.al, now_us, a.cost, a.id); limit_save(s.lease)
  d.leased, d.level = true, conc_held(s.lease, now_us)
  d.mark = flight_mark(s.flight, d.level, a.cost)
  flight_save(s.flight)
  return d
end
local function flight_grow(s, used, n)
  if used < n and s.limit < n and now_us >= s.grown then s.raised, s.limit = s.limit, s.limit + 1 end
  s.held, s.dirty = 0, true
end
local function admission_grow_flight(a, at, h)
  local s = a.s
  local l, learned = learn_spec(s.learn)
  if not learned then return end
  local start = window(s.lwin, a.al, at)
  if s.flight.held > 0 and s.flight.held < start then flight_grow(s.flight, window_used(s.lwin, s.flight.held), l.n) end
  if h >= s.flight.limit and window_used(s.lwin, start) < l.n and s.flight.held ~= start then s.flight.held, s.flight.dirty = start, true end
end
local function admission_level(a, at, starts)
  local s = a.s
  if flight_leasing(s.flight) then
    local h = conc_held(s.lease, at)
    if s.flight.phase == C.flightConfirmed and h >= s.flight.limit and not s.flight.full then s.flight.full, s.flight.dirty = true, true end
    if s.flight.phase == C.flightProbation then admission_grow_flight(a, at, h) end
    return h
  end
  if starts then return s.start.sent - s.start.answered end
  return 0
end
local function state_refuse_flight(s, r, open)
  if r.operator or C.limits > 0 then return C.flightPause, 0 end
  local ms = r.pause
  if not r.hinted then ms = C.minPause end
  local v = flight_refuse(s.flight, r, open, s.start and s.start.most or 0) -- start is read on probation only, where seen is used
  flight_save(s.flight)
  return v, math.ceil(now_us / 1000) + ms
end
`
