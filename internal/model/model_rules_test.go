package model

import "testing"

// Step tables for the rules admission, Normalize and learnState.refuse are
// made of (model.go, learn.go), one rule per table, over fixed instants
// (µs) from T0, in the manner of x/time/rate's reserveN tests.

// TestHeldLaterSteps walks the deadlines of admission.deadline: the latest
// is the scope's, and of concerns asking for the same one, the first asked
// names it; an instant not after now holds nothing.
func TestHeldLaterSteps(t *testing.T) {
	now := T0
	h := held{why: ReasonPause} // no pause in force
	for _, s := range []struct {
		name    string
		at      int64
		why     Reason
		wantAt  int64
		wantWhy Reason
	}{
		{"nothing asked: no deadline", 0, ReasonBudget, 0, ReasonPause},
		{"now is no deadline", now, ReasonBudget, 0, ReasonPause},
		{"the budget's reset", now + 10*ms, ReasonBudget, now + 10*ms, ReasonBudget},
		{"a probe awaited until the same instant: the budget names it", now + 10*ms, ReasonProbe, now + 10*ms, ReasonBudget},
		{"an earlier one changes nothing", now + 5*ms, ReasonProbe, now + 10*ms, ReasonBudget},
		{"a later one is the deadline", now + 20*ms, ReasonInFlight, now + 20*ms, ReasonInFlight},
	} {
		h.later(now, s.at, s.why)
		if h.at != s.wantAt || h.why != s.wantWhy {
			t.Fatalf("%s: deadline %d (%v), want %d (%v)", s.name, h.at-now, h.why, s.wantAt-now, s.wantWhy)
		}
	}
}

// TestAdmitSearchSteps walks admission.search over one bucket of 2, a
// token every 100 ms: a lent reserve is lent for now only, and nothing is
// admitted past the keeper's lapse.
func TestAdmitSearchSteps(t *testing.T) {
	now := T0
	bucket := LimitSpec{per: 100 * ms, n: 2}
	for _, s := range []struct {
		name   string
		tat    int64 // the bucket's TAT
		k      keeper
		wantAt int64
		wantOK bool
		wantK  keeper
	}{
		{"a full bucket admits now", 0, keeper{}, now, true, keeper{}},
		{"spent: the next token", now + 200*ms, keeper{}, now + 100*ms, true, keeper{}},
		{"lent, admitted now: the whole bucket", 0, keeper{lent: 500}, now, true, keeper{lent: 500}},
		{"lent, admitted later: the slot ahead leaves the reserve", now + 200*ms, keeper{lent: 500}, now + 200*ms, true, keeper{share: 500}},
		{"a reserve lapsing first: ask again at its lapse", now + 200*ms, keeper{share: 500, lapse: now + 150*ms}, now + 150*ms, false, keeper{share: 500, lapse: now + 150*ms}},
		{"a reserve lapsing later holds", now + 200*ms, keeper{share: 500, lapse: now + 300*ms}, now + 200*ms, true, keeper{share: 500, lapse: now + 300*ms}},
	} {
		a := admission{now: now, cost: 1, k: s.k, lim: active{specs: []LimitSpec{bucket}, states: []*limitState{{tat: s.tat}}}}
		at, ok, k := a.search()
		if at != s.wantAt || ok != s.wantOK || k != s.wantK {
			t.Errorf("%s: search = %d, %v, %+v; want %d, %v, %+v", s.name, at-now, ok, k, s.wantAt-now, s.wantOK, s.wantK)
		}
	}
}

// TestAdmitUnreservedSteps walks admission.unreserved: which requests may
// not reserve a slot ahead of now.
func TestAdmitUnreservedSteps(t *testing.T) {
	bucket := LimitSpec{per: 100 * ms, n: 2}
	window := LimitSpec{fixed: true, per: 1000 * ms, n: 5}
	log := LimitSpec{sliding: true, per: 1000 * ms, n: 5}
	lapsing := keeper{share: 500, lapse: T0 + 1000*ms}
	for _, s := range []struct {
		name    string
		lim     active
		nowOnly bool
		k       keeper
		full    bool
		want    bool
	}{
		{"a bucket reserves ahead", active{specs: []LimitSpec{bucket}}, false, keeper{}, false, false},
		{"no place to wait", active{specs: []LimitSpec{bucket}}, true, keeper{}, false, true},
		{"the learned windows", active{specs: []LimitSpec{window}, learned: true}, false, keeper{}, false, true},
		{"the learned log reserves ahead", active{specs: []LimitSpec{log}, learned: true}, false, keeper{}, false, false},
		{"a reserve in force behind a bucket", active{specs: []LimitSpec{bucket}}, false, lapsing, false, true},
		{"a reserve in force behind a log", active{specs: []LimitSpec{log}}, false, lapsing, false, true},
		{"a reserve in force behind a fixed window reserves ahead", active{specs: []LimitSpec{window}}, false, lapsing, false, false},
		{"every slot in flight taken", active{specs: []LimitSpec{window}}, false, keeper{}, true, true},
	} {
		a := admission{p: Params{NowOnly: s.nowOnly}, now: T0, cost: 1, lim: s.lim}
		if got := a.unreserved(s.k, s.full); got != s.want {
			t.Errorf("%s: unreserved = %v, want %v", s.name, got, s.want)
		}
	}
}

// TestAdmitWithinSteps walks admission.within: admitted only at an instant
// every limit admits, within the hold, and now when unreserved.
func TestAdmitWithinSteps(t *testing.T) {
	a := admission{p: Params{Hold: 1000 * ms}, now: T0}
	for _, s := range []struct {
		name       string
		at         int64
		ok         bool
		unreserved bool
		want       bool
	}{
		{"now", T0, true, false, true},
		{"within the hold", T0 + 1000*ms, true, false, true},
		{"beyond the hold", T0 + 1001*ms, true, false, false},
		{"the limits do not agree", T0, false, false, false},
		{"unreserved, now", T0, true, true, true},
		{"unreserved, ahead", T0 + 1*ms, true, true, false},
	} {
		if got := a.within(s.at, s.ok, s.unreserved); got != s.want {
			t.Errorf("%s: within = %v, want %v", s.name, got, s.want)
		}
	}
}

// TestNormalizeLimitSteps walks normalizeLimit: a state of another kind
// starts whole, and a bucket's past TAT is a full bucket.
func TestNormalizeLimitSteps(t *testing.T) {
	now := T0
	bucket := LimitSpec{per: 100 * ms, n: 2}
	for _, s := range []struct {
		name    string
		st      limitState
		l       LimitSpec
		wantTAT int64
	}{
		{"a TAT ahead stays", limitState{win: &windowState{}, tat: now + 1}, bucket, now + 1},
		{"a TAT passed: full", limitState{win: &windowState{}, tat: now}, bucket, 0},
		{"a window's state for a bucket: whole", limitState{fixed: true, win: &windowState{}, tat: now + 1}, bucket, 0},
		{"no counts: whole", limitState{tat: now + 1}, bucket, 0},
	} {
		st := s.st
		normalizeLimit(&st, s.l, now)
		if st.tat != s.wantTAT || st.fixed != s.l.fixed || st.win == nil {
			t.Errorf("%s: %+v, want TAT %d of the limit's kind", s.name, st, s.wantTAT)
		}
	}
}

// TestRefusingSteps walks learnState.refusing: what an open scope's
// refusal refused.
func TestRefusingSteps(t *testing.T) {
	hinted := Refusal{Hinted: true}
	hintless := Refusal{Hinted: true, Hintless: true}
	episodeProbe := Refusal{Hinted: true, Hintless: true, Probe: true}
	for _, s := range []struct {
		name         string
		s            learnState
		r            Refusal
		pacedOut, pr bool
	}{
		{"a hinted refusal, nothing out", learnState{limit: 3}, hinted, false, false},
		{"a hinted refusal of a window's probe", learnState{limit: 3, probeAt: T0}, hinted, false, true},
		{"a hintless one of a paced window", learnState{limit: 3, paced: 1}, hintless, true, false},
		{"... with the window's probe out: its pace, not its probe", learnState{limit: 3, paced: 1, probeAt: T0}, hintless, true, false},
		{"... of the episode's probe", learnState{limit: 3, paced: 1}, episodeProbe, true, true},
		{"a hintless one, nothing learned: no pace", learnState{paced: 1}, hintless, false, false},
		{"a hintless one of an unpaced window's probe", learnState{limit: 3, probeAt: T0}, hintless, false, true},
	} {
		if pacedOut, probed := s.s.refusing(s.r); pacedOut != s.pacedOut || probed != s.pr {
			t.Errorf("%s: refusing = %v, %v; want %v, %v", s.name, pacedOut, probed, s.pacedOut, s.pr)
		}
	}
}

// TestRefusePausedSteps walks the refusals of a paused scope
// (absorbOne, followPause) after a refusal at T0 whose deadline D taught n
// = 2 and started the next cycle at D.
func TestRefusePausedSteps(t *testing.T) {
	D := T0 + 5000*ms
	s := learnState{limit: 2, window: 5000 * ms, absorb: D, since: D, alignAt: D}
	for _, st := range []struct {
		name  string
		at, D int64
		r     Refusal
		want  learnState
	}{
		{"one on its way: one fewer accepted", T0 + 10*ms, D, Refusal{Hinted: true},
			learnState{limit: 1, window: 5000 * ms, absorb: D, since: D, alignAt: D}},
		{"a hinted one moved the pause: the next cycle follows", T0 + 20*ms, D + 1000*ms, Refusal{Hinted: true},
			learnState{limit: 0, window: 0, absorb: D, since: D + 1000*ms, alignAt: D + 1000*ms}},
		{"nothing accepted: nothing more to take", T0 + 30*ms, D + 1000*ms, Refusal{},
			learnState{limit: 0, window: 0, absorb: D, since: D + 1000*ms, alignAt: D + 1000*ms}},
	} {
		s.absorbOne(st.at)
		s.followPause(st.D, st.r)
		if s != st.want {
			t.Fatalf("%s: %+v, want %+v", st.name, s, st.want)
		}
	}
	// Past absorb, and with the cycle not at the pause's end, nothing moves.
	q := learnState{limit: 2, window: 5000 * ms, absorb: D, since: T0, alignAt: D}
	q.absorbOne(D)
	q.followPause(D+1000*ms, Refusal{Hinted: true})
	if q.limit != 2 || q.since != T0 {
		t.Errorf("past absorb: %+v, want n 2 and the cycle since T0", q)
	}
}

// TestRefuseRulesSteps walks the rules of an open scope's hinted refusal
// at T0 with deadline D that lower nothing or n by one: refuseProbe and
// slowDown.
func TestRefuseRulesSteps(t *testing.T) {
	D := T0 + 5000*ms
	s := learnState{limit: 4, best: 4, absorb: T0, probeAt: T0 - 10*ms}
	if at := s.refuseProbe(T0, D, s.probeAt, Refusal{Hinted: true, Hintless: true}, &windowState{}); at != T0-10*ms || s.absorb != 0 || s.limit != 4 {
		t.Errorf("refuseProbe: %d, %+v; want the probe's instant, n 4, nothing absorbed", at, s)
	}
	for _, st := range []struct{ limit, want int64 }{{4, 3}, {1, 1}} {
		q := learnState{limit: st.limit, best: 4, absorb: D}
		q.slowDown(T0)
		if q.limit != st.want || q.best != 0 || q.frozen != T0+raiseAfter || q.absorb != 0 {
			t.Errorf("slowDown from %d: %+v; want n %d, best forgotten, frozen raiseAfter", st.limit, q, st.want)
		}
	}
}

// TestNextCycleSteps walks nextCycle: the cycle after a hinted refusal at
// T0 starts at its deadline D, aligned to the hint's precision; after a
// hintless one, aligned to none and paced.
func TestNextCycleSteps(t *testing.T) {
	D := T0 + 5000*ms
	for _, st := range []struct {
		name      string
		r         Refusal
		prec, pac int64
	}{
		{"hinted: aligned to the hint's precision", Refusal{Hinted: true, Prec: 1000 * ms}, 1000 * ms, 0},
		{"hintless: no precision, paced", Refusal{Hinted: true, Hintless: true, Prec: hintlessPrec}, 0, 1},
	} {
		q := learnState{admits: 7, paced: 1 - st.pac}
		q.nextCycle(T0, D, st.r)
		want := learnState{since: D, refused: T0, alignAt: D, alignPrec: st.prec, paced: st.pac}
		if q != want {
			t.Errorf("nextCycle, %s: %+v, want %+v", st.name, q, want)
		}
	}
}

// TestReportSteps walks learnState.report: n uncounted admissions, the
// first age before now, go to the cycle they belong to.
func TestReportSteps(t *testing.T) {
	now := T0 + 10_000*ms
	for _, st := range []struct {
		name   string
		before learnState
		n, age int64
		want   learnState
	}{
		{"nothing to report", learnState{}, 0, 5000 * ms, learnState{}},
		{"during the pause that closed a cycle: its n", learnState{limit: 4, absorb: now + ms}, 3, 0, learnState{limit: 7, absorb: now + ms}},
		{"a cycle in progress: its admissions", learnState{since: T0, admits: 2}, 3, 9000 * ms, learnState{since: T0, admits: 5}},
		{"no cycle: the first begins at the first of them", learnState{}, 3, 4000 * ms,
			learnState{since: now - 4000*ms, admits: 3, expires: now - 4000*ms + LearnTTL}},
		{"no cycle, no age: begins now", learnState{}, 2, 0, learnState{since: now, admits: 2, expires: now + LearnTTL}},
		{"a limit learned, its cycle not begun: nothing", learnState{limit: 5, since: now + 2000*ms}, 3, 0, learnState{limit: 5, since: now + 2000*ms}},
	} {
		q := st.before
		q.report(now, st.n, st.age)
		if q != st.want {
			t.Errorf("report, %s: %+v, want %+v", st.name, q, st.want)
		}
	}
}

// TestLearnFromSteps walks learnFrom's rules (fromWindowEnd, fromCycle)
// from a cycle that began at T0, each row a refusal at now with
// deadline D read to a second, of the state before it and the learned
// window's count of the window from T0.
func TestLearnFromSteps(t *testing.T) {
	sec := 1000 * ms
	learned := learnState{limit: 5, window: 10 * sec, best: 5, alignAt: T0, since: T0, admits: 8}
	first := learnState{since: T0, admits: 6} // nothing learned yet
	with := func(s learnState, f func(*learnState)) learnState { f(&s); return s }
	for _, st := range []struct {
		name   string
		s      learnState
		used   int64
		now, D int64
		want   learnState
	}{
		{"at the learned window's end: n is what it got accepted", learned, 4, T0 + 4*sec, T0 + 10*sec,
			with(learned, func(s *learnState) { s.limit, s.absorb = 3, T0+10*sec })},
		{"... spent whole at a level never sustained: best forgotten, raises frozen", learned, 6, T0 + 4*sec, T0 + 10*sec,
			with(learned, func(s *learnState) { s.limit, s.absorb, s.best, s.frozen = 5, T0+10*sec, 0, T0+4*sec+raiseAfter })},
		{"a deadline elsewhere: n and w from the cycle, frozen", learned, 4, T0 + 10*sec + 500*ms, T0 + 15*sec,
			with(learned, func(s *learnState) {
				s.limit, s.window, s.absorb, s.frozen = 7, 15*sec, T0+15*sec, T0+10*sec+500*ms+raiseAfter
			})},
		{"a first refusal: n and w from the cycle", first, 0, T0 + 3*sec, T0 + 5*sec,
			with(first, func(s *learnState) { s.limit, s.window, s.absorb = 5, 5*sec, T0+5*sec })},
		{"... refused within the hint's precision of its start: frozen", first, 0, T0 + 500*ms, T0 + 5*sec,
			with(first, func(s *learnState) { s.limit, s.window, s.absorb, s.frozen = 5, 5*sec, T0+5*sec, T0+500*ms+raiseAfter })},
		{"a cycle of one admission teaches nothing", with(first, func(s *learnState) { s.admits = 1 }), 0, T0 + 3*sec, T0 + 5*sec,
			with(first, func(s *learnState) { s.admits = 1 })},
		{"a cycle not begun before now teaches nothing", first, 0, T0, T0 + 5*sec, first},
	} {
		s := st.s
		s.absorb = T0 // a refusal before absorbed: learnFrom absorbs none unless it learns n
		s.learnFrom(st.now, st.D, sec, &windowState{counts: map[int64]int64{T0: st.used}})
		if s != st.want {
			t.Errorf("%s:\n got %+v\nwant %+v", st.name, s, st.want)
		}
	}
}

// TestLearnRefusalSteps walks what State.learnRefusal lets a refusal
// teach the learned window: n = 5 per second aligned at T0, one admission
// counted in the window from T0 + 1 s, and a request alone refused in it
// with "1 second". On probation the learned window paced the cycle: the
// refusal at its end says what it got accepted. Confirmed, the learned
// concurrency limit paced it: the refusal aligns the window to its
// deadline, n and w stay what the provider was seen to accept, and c
// stays beside the window (limited by both).
func TestLearnRefusalSteps(t *testing.T) {
	sec := 1000 * ms
	now := T0 + sec + 60*ms
	for _, st := range []struct {
		name      string
		phase     int64
		wantPhase int64
		wantN     int64
	}{
		{"on probation: n is what the window got accepted", flightProbation, flightRate, 1},
		{"confirmed: n and w stay, the window realigned, c beside it", flightConfirmed, flightBoth, 5},
	} {
		var s State
		s.learn = learnState{limit: 5, window: sec, alignAt: T0, alignPrec: sec, since: T0, refused: T0 - sec, expires: T0 + LearnTTL}
		s.lwin = windowState{counts: map[int64]int64{T0 + sec: 1}}
		s.flight = flightState{limit: 1, phase: st.phase, expires: T0 + LearnTTL}
		D, _ := s.Refuse(Params{MaxPause: 3600 * 1000}, now, Refusal{Pause: 1000, Hinted: true, Prec: sec, Level: 1})
		if s.flight.phase != st.wantPhase || s.learn.limit != st.wantN || s.learn.window != sec || s.learn.alignAt != D*1000 {
			t.Errorf("%s: phase %d, learned %d per %d aligned at %d; want phase %d, %d per %d aligned at the deadline %d",
				st.name, s.flight.phase, s.learn.limit, s.learn.window, s.learn.alignAt, st.wantPhase, st.wantN, sec, D*1000)
		}
	}
}
