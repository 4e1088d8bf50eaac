package model

import "testing"

// TestStartSteps walks a slow start through its rules: a provider that
// advertises nothing (the first contact's probe answered with none).
func TestStartSteps(t *testing.T) {
	p := Params{Answer: 2500 * ms}
	silent := budgetState{silent: true}
	var s startState
	type step struct {
		name   string
		at     int64
		answer int64 // > 0: the answer of the admission at this instant; else admit a cost of 1
		want   int64 // earliest (0: now), for an admission
		on     bool  // the start is in force for the admission
	}
	for _, st := range []step{
		{name: "the first admission begins it", at: T0, on: true},
		{name: "a second before any answer", at: T0 + ms, on: true},
		{name: "a third waits for an answer, looking every concurrentPoll", at: T0 + 2*ms, want: T0 + 2*ms + concurrentPoll, on: true},
		{name: "the first is answered", at: T0 + 25*ms, answer: T0},
		{name: "two more go", at: T0 + 26*ms, on: true},
		{name: "and a fourth", at: T0 + 26*ms, on: true},
		{name: "the fifth waits", at: T0 + 27*ms, want: T0 + 27*ms + concurrentPoll, on: true},
		{name: "no answer for the answer timeout: a lost answer holds no scope", at: T0 + 25*ms + 2500*ms, on: false},
	} {
		switch {
		case st.answer > 0:
			s.answer(st.at, st.answer)
		default:
			if on := s.on(p, silent, false, st.at); on != st.on {
				t.Fatalf("%s: on %v, want %v (%+v)", st.name, on, st.on, s)
			}
			if !st.on {
				continue
			}
			if got := s.earliest(p, st.at, 1); got != st.want {
				t.Fatalf("%s: earliest %d, want %d (%+v)", st.name, got-T0, st.want-T0, s)
			}
			if st.want == 0 {
				s.spend(st.at, 1)
			}
		}
	}

	// Only a silent provider with nothing learned and nothing configured
	// starts slowly; a refusal ends it, and so do startAnswers answers.
	for _, tc := range []struct {
		name    string
		p       Params
		b       budgetState
		learned bool
		want    bool
	}{
		{"silent", p, silent, false, true},
		{"a budget advertised", p, budgetState{known: true, remaining: 3}, false, false},
		{"nothing known yet (the first contact's probe decides)", p, budgetState{}, false, false},
		{"a learned limit", p, silent, true, false},
		{"configured limits", Params{Answer: p.Answer, Limits: []LimitSpec{{fixed: true, per: 1_000_000, n: 5}}}, silent, false, false},
	} {
		if got := (startState{}).on(tc.p, tc.b, tc.learned, T0); got != tc.want {
			t.Errorf("%s: on %v, want %v", tc.name, got, tc.want)
		}
	}
	var r startState
	r.spend(T0, 1)
	r.end(T0 + 25*ms)
	if r.on(p, silent, false, T0+26*ms) {
		t.Errorf("a refused start is still on: %+v", r)
	}
	var a startState
	a.spend(T0, 1)
	for i := range startAnswers {
		if !a.on(p, silent, false, T0+int64(i)*ms) {
			t.Fatalf("over after %d answers, want %d", i, startAnswers)
		}
		a.answer(T0+int64(i)*ms, T0)
	}
	if a.on(p, silent, false, T0+startAnswers*ms) {
		t.Errorf("still on after %d answers: %+v", startAnswers, a)
	}
}

// TestStartRuns walks the start's runs: the answers of requests all
// admitted before the run's first answer, which were in flight together
// then (startState.most).
func TestStartRuns(t *testing.T) {
	var s startState
	s.spend(T0, 4)
	for _, st := range []struct {
		name      string
		now, at   int64 // the answer at now of the admission at at
		run, most int64
	}{
		{"the first answer begins a run", T0 + 25*ms, T0, 1, 1},
		{"one admitted before it is of its run", T0 + 26*ms, T0, 2, 2},
		{"and another", T0 + 26*ms, T0 + ms, 3, 3},
		{"one admitted at the run's first answer begins the next", T0 + 51*ms, T0 + 25*ms, 1, 3},
		{"one admitted before that answer is of it", T0 + 52*ms, T0 + 50*ms, 2, 3},
	} {
		s.answer(st.now, st.at)
		if s.along != st.run || s.most != st.most {
			t.Fatalf("%s: run %d, most %d; want %d, %d (%+v)", st.name, s.along, s.most, st.run, st.most, s)
		}
	}
}
