package model

import (
	"testing"
	"time"
)

// TestKeeperOf is the reserve's arithmetic: a share rounded down, never
// all of a capacity, and the claims within it (more claims than the
// reserve are kept whole).
func TestKeeperOf(t *testing.T) {
	for _, c := range []struct {
		k    keeper
		n    int64
		want int64
	}{
		{keeper{share: 200}, 40, 8},
		{keeper{share: 200}, 10, 2},
		{keeper{share: 200}, 5, 1},
		{keeper{share: 200}, 9, 1}, // rounded down: the sweep keeps 8 of 9
		{keeper{share: 200}, 4, 1}, // at least one unit
		{keeper{share: 200}, 2, 1},
		{keeper{share: 200}, 1, 0}, // a capacity of one is never kept whole
		{keeper{share: 200}, 0, 0}, // an unknown size keeps nothing
		{keeper{share: 1000}, 10, 9},
		{keeper{share: 200, claims: 3}, 10, 3},
		{keeper{share: 200, claims: 1}, 10, 2}, // a claim within the reserve is its
		{keeper{share: 200, claims: 2}, 10, 2},
		{keeper{claims: 3}, 0, 3},
		{keeper{}, 10, 0},
	} {
		if got := c.k.of(c.n); got != c.want {
			t.Errorf("%+v.of(%d) = %d, want %d", c.k, c.n, got, c.want)
		}
	}
}

// TestClassSteps walks one scope, with a fixed window of 10 per second,
// through the classes' rules: the reserve background work leaves while
// interactive work asks, the lending once it has not for LendAfter, the
// claims of interactive work deferred by a pause and its own line.
func TestClassSteps(t *testing.T) {
	lend := 5 * time.Second.Microseconds()
	p := Params{Hold: 250 * ms, MaxPause: 3_600_000, Reserve: 200, Lend: lend,
		Limits: []LimitSpec{specOf(FixedWindow(10, time.Second))}}
	var s State
	type step struct {
		name  string
		at    int64
		class Class
		n     int   // admissions in a row (1 when 0)
		code  int64 // of the last
	}
	run := func(st step) Decision {
		var d Decision
		for range max(st.n, 1) {
			d = s.Admit(p, st.at, 1, st.class)
		}
		return d
	}
	for _, st := range []step{
		{name: "no interactive work yet: background spends the whole window", at: T0, class: Background, n: 10, code: Admitted},
		{name: "the window is spent for everyone", at: T0 + ms, class: Interactive, code: Limited},
		{name: "next window: interactive asks, and is admitted", at: T0 + 1000*ms, class: Interactive, code: Admitted},
		{name: "background takes 8 of the 9 left: 2 are the reserve", at: T0 + 1001*ms, class: Background, n: 7, code: Admitted},
		{name: "the reserve's first unit is not background's", at: T0 + 1002*ms, class: Background, code: Limited},
		{name: "interactive finds the reserve at once", at: T0 + 1003*ms, class: Interactive, n: 2, code: Admitted},
		{name: "lent: nothing interactive for LendAfter, background spends everything", at: T0 + 1003*ms + lend, class: Background, n: 10, code: Admitted},
	} {
		if d := run(st); d.Code != st.code {
			t.Fatalf("%s: code %d, want %d (%+v; state %+v)", st.name, d.Code, st.code, d, s.class)
		}
	}

	// A pause: the interactive task deferred by it claims its unit, takes
	// the first slot of its own line, and background work leaves the
	// reserve, which holds the claim, unspent until it is back.
	now := T0 + 20_000*ms
	s.Admit(p, now, 1, Interactive) // interactive work asks again (admitted)
	s.Refuse(p, now+ms, Refusal{Pause: 2000, Hinted: true, Prec: ms})
	for range 5 {
		if d := s.Admit(p, now+2*ms, 1, Background); d.Code != Paused {
			t.Fatalf("background during the pause: %+v", d)
		}
	}
	d := s.Admit(p, now+3*ms, 1, Interactive)
	if d.Code != Paused || now+3*ms+d.Wait != now+2001*ms || s.class.claims != 1 {
		t.Fatalf("interactive during the pause: %+v, back at %d, want the deadline %d; claims %d", d, now+3*ms+d.Wait, now+2001*ms, s.class.claims)
	}
	back := now + 2001*ms
	got := 0
	for range 10 {
		if d := s.Admit(p, back, 1, Background); d.Code == Admitted {
			got++
		}
	}
	if got != 10-2 {
		t.Errorf("background after the pause got %d of the window, want 10 - reserve 2 (the claim within it) = 8", got)
	}
	if d := s.Admit(p, back+ms, 1, Interactive); d.Code != Admitted || s.class.claims != 0 {
		t.Errorf("the interactive task back from the pause: %+v, claims %d", d, s.class.claims)
	}
	if d := s.Admit(p, back+2*ms, 1, Interactive); d.Code != Admitted {
		t.Errorf("a second interactive task finds the reserve's other unit: %+v", d)
	}
}

// TestClassGCRA: behind a bucket, background work leaves the reserve in
// the bucket and still gets every token beyond it, so its pace is the
// bucket's.
func TestClassGCRA(t *testing.T) {
	p := Params{Hold: 0, MaxPause: 3_600_000, Reserve: 200, Lend: 30_000 * ms,
		Limits: []LimitSpec{specOf(PerSecond(10, 10))}}
	var s State
	s.Admit(p, T0, 1, Interactive)
	got := 0
	for range 20 {
		if s.Admit(p, T0+ms, 1, Background).Code == Admitted {
			got++
		}
	}
	if got != 10-1-2 {
		t.Fatalf("background took %d of a full bucket of 10 after 1 interactive, want 7 (2 kept)", got)
	}
	// A second later the bucket refilled 10: background takes all but the
	// reserve; over 10 s it takes the bucket's whole rate.
	taken := 0
	for i := range int64(100) {
		if s.Admit(p, T0+1001*ms+i*100*ms, 1, Background).Code == Admitted {
			taken++
		}
	}
	if taken < 100 {
		t.Errorf("background took %d of 100 tokens refilled one per 100 ms, want all of them (the reserve stays full)", taken)
	}
	if d := s.Admit(p, T0+11_000*ms, 1, Interactive); d.Code != Admitted || d.Wait != 0 {
		t.Errorf("interactive behind a sweep running at the bucket's pace: %+v, want admitted at once", d)
	}
}

// TestClassBudget: the advertised budget's reserve is a share of its
// advertised size, and while claims wait no background work probes.
func TestClassBudget(t *testing.T) {
	p := Params{Hold: 250 * ms, MaxPause: 3_600_000, Probe: 2500 * ms, Reserve: 200, Lend: 30_000 * ms}
	var s State
	s.Admit(p, T0, 1, Interactive) // first contact: its probe
	s.Observe(p, T0+30*ms, Observation{Remaining: 3, Reset: 10_000 * ms, Limit: 10, Prec: ms, Seq: 1})
	if d := s.Admit(p, T0+40*ms, 1, Background); d.Code != Admitted {
		t.Fatalf("background with 3 left of 10 (2 kept): %+v", d)
	}
	d := s.Admit(p, T0+50*ms, 1, Background)
	if d.Code != Paused || d.Reason != ReasonBudget || T0+50*ms+d.Wait != T0+10_030*ms {
		t.Fatalf("background with 2 left of 10, both kept: %+v, want deferred until the reset (the reserve lapses later)", d)
	}
	if d := s.Admit(p, T0+60*ms, 1, Interactive); d.Code != Admitted {
		t.Fatalf("interactive with 2 left: %+v", d)
	}
	// The reset passes with an interactive task deferred: background may
	// not be the probe.
	s.Admit(p, T0+70*ms, 1, Interactive)
	if d := s.Admit(p, T0+80*ms, 1, Interactive); d.Code != Paused || s.class.claims != 1 {
		t.Fatalf("interactive with the budget spent: %+v, claims %d", d, s.class.claims)
	}
	if d := s.Admit(p, T0+10_030*ms, 1, Background); d.Code != Paused || d.Reason != ReasonProbe {
		t.Fatalf("background at the reset with an interactive task waiting: %+v, want to wait (it is not the probe)", d)
	}
	if d := s.Admit(p, T0+10_040*ms, 1, Interactive); !d.Probe {
		t.Fatalf("the interactive task back at the reset: %+v, want the probe", d)
	}
}

// TestKeeperSteps is classState.keeper's rule: what background work leaves
// at an instant, from what the scope kept of its interactive work and
// whether interactive work is expected (Params.Expect).
func TestKeeperSteps(t *testing.T) {
	lend := 5_000 * ms
	for _, c := range []struct {
		name        string
		s           classState
		expect      bool
		interactive bool
		want        keeper
	}{
		{"no interactive work, none expected: nothing kept, nothing lent", classState{}, false, false, keeper{}},
		{"none seen, but expected: the reserve lent for now only", classState{}, true, false, keeper{lent: 200}},
		{"seen within LendAfter: the reserve kept until it lapses", classState{seen: T0 - ms}, false, false, keeper{share: 200, lapse: T0 - ms + lend}},
		{"seen before LendAfter: lent for now only", classState{seen: T0 - lend}, false, false, keeper{lent: 200}},
		{"claims waiting: kept until they lapse", classState{claims: 2, claimed: T0 + 2*ms}, true, false, keeper{claims: 2, lapse: T0 + 2*ms}},
		{"interactive work itself: nothing kept", classState{seen: T0 - ms}, true, true, keeper{}},
	} {
		p := Params{Reserve: 200, Lend: lend, Expect: c.expect}
		if got := c.s.keeper(p, T0, c.interactive); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestClassExpected: a sweep behind a fixed window of 10 per second
// reserves slots of the next window ahead; with interactive work expected
// (Params.Expect) it leaves the reserve of that window even before the
// scope's first interactive request, which then takes a slot of the next
// window (less than a second away) instead of asking again after it.
func TestClassExpected(t *testing.T) {
	for _, c := range []struct {
		expect   bool
		reserved int   // background slots taken in the next window
		code     int64 // the first interactive request's
		next     bool  // whose slot is in the next window
	}{
		{false, 10, Limited, false},
		{true, 8, Admitted, true},
	} {
		p := Params{Hold: 1500 * ms, MaxPause: 3_600_000, Reserve: 200, Lend: 5_000 * ms, Expect: c.expect,
			Limits: []LimitSpec{specOf(FixedWindow(10, time.Second))}}
		var s State
		for range 10 {
			s.Admit(p, T0, 1, Background)
		}
		reserved := 0
		for range 20 {
			if d := s.Admit(p, T0+ms, 1, Background); d.Code == Admitted && d.Wait > 0 {
				reserved++
			}
		}
		d := s.Admit(p, T0+500*ms, 1, Interactive)
		if reserved != c.reserved || d.Code != c.code || (d.Wait < 1000*ms) != c.next {
			t.Errorf("expect %v: background reserved %d of the next window, want %d; the first interactive request: %+v, want code %d, in the next window %v",
				c.expect, reserved, c.reserved, d, c.code, c.next)
		}
	}
}
