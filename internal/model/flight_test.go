package model

import "testing"

// TestFlightSteps walks the learned concurrency limit through its rules
// (flight.go), one transition a step: the probation a refusal begins, the
// probes beyond the window and their verdicts, the confirmed limit's
// refusals and raises.
func TestFlightSteps(t *testing.T) {
	const sec = 1_000_000
	p := Params{Answer: 2500 * ms}
	type step struct {
		name string
		do   func(f *flightState) any // the transition; its answer, if any
		want any                      // what it answers (nil: nothing)
		then flightState              // the state after it (expires and frozen not compared unless set)
	}
	begun := flightState{limit: 4, phase: flightProbation}              // c tried
	untried := flightState{limit: 4, phase: flightProbation, raised: 3} // as a refusal begins it
	for _, tc := range []struct {
		name  string
		start flightState
		steps []step
	}{
		{"a window: the probe is refused", flightState{}, []step{
			{"a refusal at level 5 that taught n = 17 begins the probation, c one below the level, untried: a raise from 3",
				func(f *flightState) any { f.begin(T0, 17, 5, 0, false); return nil }, nil, untried},
			{"a refusal on its way, at level 7, lowers nothing below 4",
				func(f *flightState) any { return f.refuse(T0+ms, Refusal{Level: 7}, false, 0) }, flightPause, untried},
			{"one of the same moment's requests refused at level 3, the provider seen to accept 5 at once (none here): c below it, still untried",
				func(f *flightState) any {
					g := *f
					g.refuse(T0+ms, Refusal{Level: 3}, false, 0)
					return [2]int64{g.limit, g.raised}
				}, [2]int64{2, 1}, untried},
			{"the same, 3 seen accepted at once: c no lower than 3",
				func(f *flightState) any { g := *f; g.refuse(T0+ms, Refusal{Level: 3}, false, 3); return g.limit }, int64(3), untried},
			{"the same, 9 seen: c not raised by it",
				func(f *flightState) any { g := *f; g.refuse(T0+ms, Refusal{Level: 3}, false, 9); return g.limit }, int64(4), untried},
			{"reopened, the first refusal, at any level, refused the untried c: its own, c − 1, growth stopped",
				func(f *flightState) any {
					g := *f
					v := g.refuse(T0+sec, Refusal{Level: 6}, true, 0)
					return [3]int64{int64(v), g.limit, g.grown}
				},
				[3]int64{flightOwn, 3, T0 + sec + raiseAfter}, untried},
			{"c tried, a refusal at level 3: one too many in flight, c − 1, paused",
				func(f *flightState) any {
					g := *f
					g.raised = 0
					v := g.refuse(T0+sec, Refusal{Level: 3}, true, 0)
					return [2]int64{int64(v), g.limit}
				},
				[2]int64{flightPause, 3}, untried},
			{"the window spent, one still in flight: the first probe waits to go alone", func(f *flightState) any { return f.beyond(p, T0+sec, 1, 1) }, false, untried},
			{"nothing in flight: it goes", func(f *flightState) any { return f.beyond(p, T0+sec, 1, 0) }, true, untried},
			{"it is sent", func(f *flightState) any { f.probe(T0+sec, 1, T0); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, since: T0 + sec, sent: 1, last: T0 + sec, raised: 3}},
			{"a second waits for its answer", func(f *flightState) any { return f.beyond(p, T0+sec+ms, 1, 0) }, false,
				flightState{limit: 4, phase: flightProbation, since: T0 + sec, sent: 1, last: T0 + sec, raised: 3}},
			{"a hinted refusal of the probe: rate-limited, the window was spent",
				func(f *flightState) any {
					return f.refuse(T0+sec+25*ms, Refusal{Hinted: true, Level: 1, Opens: T0 + sec}, true, 0)
				},
				flightSpent, flightState{phase: flightRate}},
			{"no more probes", func(f *flightState) any { return f.beyond(p, T0+2*sec, 1, 0) }, false, flightState{phase: flightRate}},
		}},
		{"a concurrency limit: the probes are answered", begun, []step{
			{"a probe beyond the window that began half a second ago", func(f *flightState) any { f.probe(T0, 1, T0-sec/2); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, since: T0, sent: 1, last: T0}},
			{"answered: two more may go, beside each other", func(f *flightState) any { f.answer(T0+25*ms, T0, 3); return f.beyond(p, T0+25*ms, 2, 1) }, true,
				flightState{limit: 4, phase: flightProbation, since: T0, sent: 1, acks: 1, answered: 1, last: T0 + 25*ms}},
			{"the answer of a request admitted before the probes counts nothing",
				func(f *flightState) any { f.answer(T0+26*ms, T0-ms, 3); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, since: T0, sent: 1, acks: 1, answered: 1, last: T0 + 25*ms}},
			{"two more", func(f *flightState) any { f.probe(T0+25*ms, 2, T0-sec/2); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, since: T0, sent: 3, acks: 1, answered: 1, last: T0 + 25*ms}},
			{"both answered: n = 3, what the provider's next window could grant, is no verdict",
				func(f *flightState) any { f.answer(T0+50*ms, T0+25*ms, 3); f.answer(T0+51*ms, T0+25*ms, 3); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, since: T0, sent: 3, acks: 3, answered: 3, last: T0 + 51*ms}},
			{"a probe beyond the next window counts again from it",
				func(f *flightState) any { f.probe(T0+sec/2+ms, 1, T0+sec/2); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, since: T0 + sec/2 + ms, sent: 1, answered: 3, last: T0 + sec/2 + ms}},
			{"the answer of a probe beyond the window before counts nothing",
				func(f *flightState) any { f.answer(T0+sec/2+2*ms, T0+25*ms, 3); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, since: T0 + sec/2 + ms, sent: 1, answered: 3, last: T0 + sec/2 + ms}},
			{"three answered beyond it, and three more sent",
				func(f *flightState) any {
					f.answer(T0+sec/2+26*ms, T0+sec/2+ms, 3)
					f.probe(T0+sec/2+26*ms, 2, T0+sec/2)
					f.answer(T0+sec/2+51*ms, T0+sec/2+26*ms, 3)
					f.answer(T0+sec/2+51*ms, T0+sec/2+26*ms, 3)
					f.probe(T0+sec/2+51*ms, 1, T0+sec/2)
					return nil
				}, nil,
				flightState{limit: 4, phase: flightProbation, since: T0 + sec/2 + ms, sent: 4, acks: 3, answered: 6, last: T0 + sec/2 + 51*ms}},
			{"n + 1 answered beyond one window confirm the limit, c as it was",
				func(f *flightState) any { f.answer(T0+sec/2+76*ms, T0+sec/2+51*ms, 3); return nil }, nil,
				flightState{limit: 4, phase: flightConfirmed}},
			{"a refusal at level 5 is the limit's: c ≤ 4, and c − 1",
				func(f *flightState) any { return f.refuse(T0+sec, Refusal{Level: 5, Pause: 1000}, true, 0) }, flightOwn,
				flightState{limit: 3, phase: flightConfirmed, before: 4, frozen: T0 + sec + raiseAfter}},
			{"a refusal at level 2 lowers c to 1",
				func(f *flightState) any { return f.refuse(T0+2*sec, Refusal{Level: 2}, true, 0) }, flightOwn,
				flightState{limit: 1, phase: flightConfirmed, before: 4, frozen: T0 + 2*sec + raiseAfter}},
			{"a refusal of a request alone is no concurrency limit's but a window's, and so were those since c was confirmed: both, c as it was, paused",
				func(f *flightState) any { return f.refuse(T0+3*sec, Refusal{Level: 1}, true, 0) }, flightPause,
				flightState{limit: 4, phase: flightBoth}},
		}},
		{"a window and a concurrency limit: probes answered, then one refused", begun, []step{
			{"a probe beyond the window, answered", func(f *flightState) any { f.probe(T0, 1, T0-sec/2); f.answer(T0+25*ms, T0, 17); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, since: T0, sent: 1, acks: 1, answered: 1, last: T0 + 25*ms}},
			{"the next refused by a window: both, c kept beside the learned window",
				func(f *flightState) any {
					f.probe(T0+25*ms, 1, T0-sec/2)
					return f.refuse(T0+50*ms, Refusal{Hinted: true, Level: 1, Opens: T0 + 25*ms}, true, 0)
				},
				flightSpent, flightState{limit: 4, phase: flightBoth}},
			{"leases are taken, no probe goes", func(f *flightState) any { return f.leasing() && !f.beyond(p, T0+sec, 1, 0) }, true,
				flightState{limit: 4, phase: flightBoth}},
			{"a refusal at level 4 is the window's: paused, c as it was",
				func(f *flightState) any { return f.refuse(T0+5*sec, Refusal{Hinted: true, Level: 4}, true, 0) }, flightPause,
				flightState{limit: 4, phase: flightBoth}},
			{"c answers while full raise nothing",
				func(f *flightState) any {
					f.full = true
					for range 4 {
						f.released(T0+6*sec, true)
					}
					return nil
				}, nil, flightState{limit: 4, phase: flightBoth, full: true}},
			{"so is a refusal of a request alone: c as it was",
				func(f *flightState) any { return f.refuse(T0+7*sec, Refusal{Hinted: true, Level: 1}, true, 0) }, flightPause,
				flightState{limit: 4, phase: flightBoth, full: true}},
		}},
		{"on probation, a request alone refused after probes beyond an earlier window answered", begun, []step{
			{"a probe answered", func(f *flightState) any { f.probe(T0, 1, T0-sec/2); f.answer(T0+25*ms, T0, 17); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, since: T0, sent: 1, acks: 1, answered: 1, last: T0 + 25*ms}},
			{"a probe beyond the next window: its count starts again, what was answered stays",
				func(f *flightState) any { f.probe(T0+sec/2+ms, 1, T0+sec/2); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, since: T0 + sec/2 + ms, sent: 1, answered: 1, last: T0 + sec/2 + ms}},
			{"a request alone refused: the window's, and c the provider's too",
				func(f *flightState) any { return f.refuse(T0+sec, Refusal{Hinted: true, Level: 1}, true, 0) }, flightPause,
				flightState{limit: 4, phase: flightBoth}},
		}},
		{"raises", flightState{limit: 2, phase: flightConfirmed}, []step{
			{"an answer while the limit was never full counts nothing",
				func(f *flightState) any { f.released(T0, true); return nil }, nil, flightState{limit: 2, phase: flightConfirmed}},
			{"full: the first answer counts",
				func(f *flightState) any { f.full = true; f.released(T0, true); return nil }, nil,
				flightState{limit: 2, phase: flightConfirmed, full: true, acks: 1}},
			{"a refused one does not",
				func(f *flightState) any { f.released(T0, false); return nil }, nil,
				flightState{limit: 2, phase: flightConfirmed, full: true, acks: 1}},
			{"c answers raise c by one",
				func(f *flightState) any { f.released(T0, true); return nil }, nil, flightState{limit: 3, phase: flightConfirmed}},
			{"frozen, c answers raise nothing",
				func(f *flightState) any {
					f.frozen, f.full = T0+sec, true
					for range 3 {
						f.released(T0+ms, true)
					}
					return nil
				}, nil, flightState{limit: 3, phase: flightConfirmed, full: true, acks: 3, frozen: T0 + sec}},
			{"the next one after the freeze raises",
				func(f *flightState) any { f.released(T0+sec, true); return nil }, nil, flightState{limit: 4, phase: flightConfirmed, frozen: T0 + sec}},
		}},
		{"growth on probation: c held the scope, the window unspent", flightState{limit: 1, phase: flightProbation, held: T0}, []step{
			{"the window held ended with 4 of its 10: c goes up by one",
				func(f *flightState) any { f.grow(T0+2*sec, 4, 10); return nil }, nil,
				flightState{limit: 2, phase: flightProbation, raised: 1}},
			{"the next held window ended unspent: c up again",
				func(f *flightState) any { f.held = T0 + 2*sec; f.grow(T0+4*sec, 9, 10); return nil }, nil,
				flightState{limit: 3, phase: flightProbation, raised: 2}},
			{"a window ended spent raises nothing",
				func(f *flightState) any { f.held = T0 + 4*sec; f.grow(T0+6*sec, 10, 10); return nil }, nil,
				flightState{limit: 3, phase: flightProbation, raised: 2}},
			{"a refusal, at any level, refused the raise: its own, c − 1, growth stopped",
				func(f *flightState) any { return f.refuse(T0+7*sec, Refusal{Hinted: true, Level: 2, Mark: 2}, true, 0) }, flightOwn,
				flightState{limit: 2, phase: flightProbation, grown: T0 + 7*sec + raiseAfter}},
			{"a window held, then another refusal: one too many, c − 1, paused; the window was refused, not unspent",
				func(f *flightState) any {
					f.held = T0 + 7*sec
					return f.refuse(T0+7*sec+ms, Refusal{Hinted: true, Level: 2}, true, 0)
				}, flightPause,
				flightState{limit: 1, phase: flightProbation, grown: T0 + 7*sec + raiseAfter}},
		}},
		{"growth on probation: the raise refused", flightState{limit: 5, phase: flightProbation, raised: 4}, []step{
			{"a refusal above the level before the raise refused it: not paused, c below it, growth stops",
				func(f *flightState) any { return f.refuse(T0, Refusal{Hinted: true, Level: 5, Pause: 1000}, true, 0) }, flightOwn,
				flightState{limit: 4, phase: flightProbation, grown: T0 + raiseAfter}},
			{"a window held unspent within raiseAfter raises nothing",
				func(f *flightState) any { f.held = T0 + sec; f.grow(T0+3*sec, 2, 10); return nil }, nil,
				flightState{limit: 4, phase: flightProbation, grown: T0 + raiseAfter}},
			{"after it, one does",
				func(f *flightState) any { f.held = T0 + raiseAfter; f.grow(T0+raiseAfter+sec, 2, 10); return nil }, nil,
				flightState{limit: 5, phase: flightProbation, raised: 4, grown: T0 + raiseAfter}},
			{"no higher than n",
				func(f *flightState) any {
					f.held = T0 + raiseAfter + sec
					f.grow(T0+raiseAfter+2*sec, 2, 5)
					return nil
				}, nil,
				flightState{limit: 5, phase: flightProbation, raised: 4, grown: T0 + raiseAfter}},
		}},
		{"a raise forgets what c was before its lowerings", flightState{limit: 2, phase: flightConfirmed, before: 3, full: true, acks: 1}, []step{
			{"c answers raise c by one", func(f *flightState) any { f.released(T0, true); return nil }, nil, flightState{limit: 3, phase: flightConfirmed}},
		}},
		{"a refused level below what was accepted at once: c no lower than that", flightState{}, []step{
			{"a refusal at level 5, after 5 accepted at once, keeps c at 5, untried",
				func(f *flightState) any { f.begin(T0, 17, 5, 5, false); return nil }, nil, flightState{limit: 5, phase: flightProbation, raised: 4}},
		}},
		{"what was accepted at once, above n: c is n", flightState{}, []step{
			{"a refusal at level 5 that taught n = 3, after 6 accepted at once",
				func(f *flightState) any { f.begin(T0, 3, 5, 6, false); return nil }, nil, flightState{limit: 3, phase: flightProbation, raised: 2}},
		}},
		{"a request admitted alone, overtaken by three admitted after it", flightState{}, []step{
			{"admitted alone: level 1, the first unit counted", func(f *flightState) any { return f.mark(T0, 1, 1) }, int64(1),
				flightState{admitted: 1}},
			{"three more admitted", func(f *flightState) any { f.mark(T0+ms, 2, 1); f.mark(T0+ms, 3, 1); return f.mark(T0+ms, 4, 1) }, int64(4),
				flightState{admitted: 4}},
			{"an admission at no level counts nothing", func(f *flightState) any { return f.mark(T0+ms, 0, 1) }, int64(0),
				flightState{admitted: 4}},
			{"its refusal tells level 4: those admitted after it may have reached the provider first",
				func(f *flightState) any { return f.told(1, 1) }, int64(4), flightState{admitted: 4}},
			{"so it begins a probation, c below 4, no lower than what was seen accepted at once",
				func(f *flightState) any { f.begin(T0+30*ms, 10, f.told(1, 1), 2, false); return nil }, nil,
				flightState{limit: 3, phase: flightProbation, admitted: 4, raised: 2}},
			{"a level above 1 is told as it is", func(f *flightState) any { return f.told(2, 1) }, int64(2),
				flightState{limit: 3, phase: flightProbation, admitted: 4, raised: 2}},
			{"without a mark, a level 1 is told as it is", func(f *flightState) any { return f.told(1, 0) }, int64(1),
				flightState{limit: 3, phase: flightProbation, admitted: 4, raised: 2}},
			{"nor with a mark above the count (one forgotten since)", func(f *flightState) any { return f.told(1, 9) }, int64(1),
				flightState{limit: 3, phase: flightProbation, admitted: 4, raised: 2}},
			{"nothing admitted after it: alone, told 1", func(f *flightState) any { return f.told(1, 4) }, int64(1),
				flightState{limit: 3, phase: flightProbation, admitted: 4, raised: 2}},
		}},
		{"a lone request refused at first contact: rate-limited at once", flightState{}, []step{
			{"begin at level 1", func(f *flightState) any { f.begin(T0, 10, 1, 0, false); return nil }, nil, flightState{phase: flightRate}},
		}},
		{"configured limits or a budget, or an unknown level: nothing begins", flightState{}, []step{
			{"begin at level 0", func(f *flightState) any { f.begin(T0, 10, 0, 0, false); return nil }, nil, flightState{}},
			{"begin", func(f *flightState) any { f.begin(T0, 10, 5, 0, true); return nil }, nil, flightState{}},
		}},
	} {
		f := tc.start
		for _, st := range tc.steps {
			got := st.do(&f)
			if got != st.want {
				t.Fatalf("%s: %s: answered %v, want %v", tc.name, st.name, got, st.want)
			}
			cmp := f
			cmp.expires = 0
			if st.then.frozen == 0 {
				cmp.frozen = 0
			}
			if cmp != st.then {
				t.Fatalf("%s: %s: state %+v, want %+v", tc.name, st.name, cmp, st.then)
			}
		}
	}
}

// TestRetriedSteps walks an admission asked again with the lease id its
// lost answer took (admission.retried): on probation with c = 2, a lease
// "a" held and the scope paused by a refusal since, the call retried with
// "a" is admitted again at its level, and commits nothing; another id is
// paused.
func TestRetriedSteps(t *testing.T) {
	p := Params{MaxPause: 3600 * 1000, Hold: 500 * ms, Answer: 1500 * ms}
	var s State
	s.flight = flightState{limit: 2, phase: flightProbation, expires: T0 + LearnTTL}
	s.lease = limitState{concurrent: true, leases: []lease{{exp: T0 + flightLease, id: "a", cost: 1}}, win: &windowState{}}
	s.pause = pauseState{untilMs: T0/1000 + 1000}
	for _, st := range []struct {
		name   string
		id     string
		code   int64
		leased bool
		level  int64
	}{
		{"the lease's own id: admitted again, at its level", "a", Admitted, true, 1},
		{"another id: paused", "b", Paused, false, 0},
		{"no id: paused", "", Paused, false, 0},
	} {
		before := s
		d := s.AdmitLease(p, T0+ms, 1, Background, st.id)
		if d.Code != st.code || d.Leased != st.leased || d.Level != st.level {
			t.Errorf("%s: code %d leased %v level %d, want %d %v %d", st.name, d.Code, d.Leased, d.Level, st.code, st.leased, st.level)
		}
		if len(s.lease.leases) != 1 || s.flight != before.flight {
			t.Errorf("%s: committed: leases %v, flight %+v", st.name, s.lease.leases, s.flight)
		}
	}
}

// TestFlightPaced walks flightState.paced: which cycles the learned
// concurrency limit, not the learned window, paced.
func TestFlightPaced(t *testing.T) {
	const w = 1_000_000
	for _, tc := range []struct {
		name string
		f    flightState
		want bool
	}{
		{"nothing learned", flightState{}, false},
		{"confirmed: the window no longer applies", flightState{limit: 3, phase: flightConfirmed}, true},
		{"on probation, c held nothing back", flightState{limit: 3, phase: flightProbation}, false},
		{"on probation, c held one back in a window of the cycle", flightState{limit: 3, phase: flightProbation, held: T0 + w}, true},
		{"on probation, c held one back in a window that ended before the cycle", flightState{limit: 3, phase: flightProbation, held: T0 - w}, false},
		{"rate-limited: the window paced it", flightState{phase: flightRate, held: T0}, false},
		{"limited by both: the window's refusals teach it", flightState{limit: 3, phase: flightBoth, held: T0}, false},
	} {
		if got := tc.f.paced(T0, w); got != tc.want {
			t.Errorf("%s: paced %v, want %v", tc.name, got, tc.want)
		}
	}
}
