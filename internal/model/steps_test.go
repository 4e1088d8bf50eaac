package model

import (
	"testing"
	"time"
)

// Step tables per concern, over fixed instants (µs), in the manner of
// x/time/rate's reserveN tests: each row is one transition of the
// concern's model and what it answers.

const ms = int64(1000)

// T0 is the instant the step tables start at: any instant but 0, which
// the model reads as "none".
const T0 = int64(1_700_000_000_000_000)

// TestBudgetSteps walks the advertised budget through its rules.
func TestBudgetSteps(t *testing.T) {
	p := Params{Probe: 2500 * ms}
	var b budgetState
	type step struct {
		name    string
		at      int64
		obs     *Observation // observe at at; else admit a cost of 1
		want    budgetVerdict
		probe   bool // the admission is a probe
		nowOnly bool // the task has no place to wait (Params.NowOnly)
	}
	for _, s := range []step{
		{name: "first contact: a probe", at: T0 + 0, want: budgetVerdict{probe: true}, probe: true},
		{name: "peers wait for its answer, looking every probePoll", at: T0 + 10*ms, want: budgetVerdict{at: T0 + 10*ms + probePoll, why: ReasonProbe}},
		{name: "one with no place to wait goes, spending nothing", at: T0 + 15*ms, want: budgetVerdict{}, nowOnly: true},
		{name: "answered: 1 left until 1 s", at: T0 + 30*ms, obs: &Observation{Remaining: 1, Reset: 970 * ms, Prec: ms, Seq: 1}},
		{name: "spend it", at: T0 + 40*ms, want: budgetVerdict{spend: true}},
		{name: "spent: wait for the reset", at: T0 + 50*ms, want: budgetVerdict{at: T0 + 1000*ms, why: ReasonBudget}},
		{name: "the reset passed: one probe asks", at: T0 + 1000*ms, want: budgetVerdict{probe: true}, probe: true},
		{name: "its answer never comes: peers wait out its timeout", at: T0 + 3000*ms, want: budgetVerdict{at: T0 + 3050*ms, why: ReasonProbe}},
		{name: "past the timeout: another probe", at: T0 + 3500*ms, want: budgetVerdict{probe: true}, probe: true},
		{name: "the probe's answer: 5 left, another admitted since? none", at: T0 + 3530*ms, obs: &Observation{Remaining: 5, Reset: 1500 * ms, Prec: ms, Seq: 4}},
		{name: "spend", at: T0 + 3540*ms, want: budgetVerdict{spend: true}},
	} {
		if s.obs != nil {
			b.observe(s.at, *s.obs)
			continue
		}
		pe := p
		pe.NowOnly = s.nowOnly
		v := b.earliest(pe, s.at, 1, keeper{})
		if v != s.want {
			t.Fatalf("%s: earliest = %+v, want %+v (state %+v)", s.name, v, s.want, b)
		}
		if v.at == 0 {
			if probe, _ := b.spend(p, s.at, 1, v); probe != s.probe {
				t.Fatalf("%s: probe %v, want %v", s.name, probe, s.probe)
			}
		}
	}
	if b.remaining != 4 || b.reset != T0+3530*ms+1500*ms {
		t.Errorf("final budget %+v, want 4 left until 5.03 s", b)
	}
	// A probe answered with no budget marks the provider silent: no probe
	// again, nothing held.
	var q budgetState
	q.spend(p, T0, 1, q.earliest(p, T0, 1, keeper{}))
	q.observe(T0+20*ms, Observation{Remaining: -1})
	if v := q.earliest(p, T0+30*ms, 1, keeper{}); !q.silent || v != (budgetVerdict{}) {
		t.Errorf("after a silent answer: %+v, %+v; want silent and open", q, v)
	}
	// In-flight answers lower remaining; a refusal leaves the budget as it
	// is (the pause holds the scope: a provider may refuse by a limit its
	// budget does not tell, as GitHub's secondary limits do).
	var r budgetState
	r.observe(T0, Observation{Remaining: 10, Reset: 5000 * ms, Prec: ms})
	for range 3 {
		r.spend(p, T0+ms, 1, r.earliest(p, T0+ms, 1, keeper{})) // seq 1..3
	}
	r.observe(T0+2*ms, Observation{Remaining: 9, Reset: 4998 * ms, Prec: ms, Seq: 1})
	if r.remaining != 7 {
		t.Errorf("answer of request 1 with 2 more on their way: remaining %d, want 7", r.remaining)
	}
	if v := r.earliest(p, T0+3*ms, 1, keeper{}); !v.spend {
		t.Errorf("with 7 left: %+v, want spent", v)
	}
}

// TestBudgetOvertakenSteps: requests reach the provider in another order
// than they were admitted. A provider of 10 per 5 s; requests 1..4 are
// admitted, 3 arrives before 2, and the answers come as they arrived. 3's
// answer counts 2 as arrived (7 left, one too many); 2's, after it,
// counted 3 already: 7 of its remaining less 4 on its way, and 3, whose
// answer came first: 6, as the provider has. So does the last answer of a
// burst that arrived in reverse order (budgetState.above). A reset within
// its precision (a bucket's next token, "1" second) is read as it is.
func TestBudgetOvertakenSteps(t *testing.T) {
	p := Params{Probe: 2500 * ms}
	const sec = 1_000_000
	for _, tc := range []struct {
		name        string
		reset, prec int64   // of every reading: the window's end, µs after T0
		obs         []int64 // remaining, seq: after request 1's answer, in the order answered
		want        int64   // remaining after them
	}{
		{"in order", 5 * sec, ms, []int64{8, 2, 7, 3}, 6},
		{"3 overtook 2: 2's answer comes second and counted 3", 5 * sec, ms, []int64{8, 3, 7, 2}, 6},
		{"a lower reading of a newer request is read", 5 * sec, ms, []int64{8, 3, 2, 4}, 2},
		{"4, 3 and 2 arrived in reverse order: 2's answer reads the burst whole", 5 * sec, ms, []int64{8, 4, 7, 3, 6, 2}, 6},
		{"in order, whole seconds", 5 * sec, sec, []int64{8, 2, 7, 3}, 6},
		{"3 overtook 2, whole seconds", 5 * sec, sec, []int64{8, 3, 7, 2}, 6},
		{"3 overtook 2, the reset within its precision: read as it is", sec, sec, []int64{8, 3, 7, 2}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b budgetState
			b.observe(T0, Observation{Remaining: 10, Reset: tc.reset, Prec: tc.prec})
			for range 4 {
				b.spend(p, T0+ms, 1, b.earliest(p, T0+ms, 1, keeper{})) // seq 1..4
			}
			b.observe(T0+5*ms, Observation{Remaining: 9, Reset: tc.reset - 5*ms, Prec: tc.prec, Seq: 1})
			if b.remaining != 6 {
				t.Fatalf("after request 1's answer: remaining %d, want 6", b.remaining)
			}
			for i := 0; i < len(tc.obs); i += 2 {
				at := T0 + 10*ms + int64(i)*ms
				b.observe(at, Observation{Remaining: tc.obs[i], Reset: T0 + tc.reset - at, Prec: tc.prec, Seq: tc.obs[i+1]})
			}
			if b.remaining != tc.want {
				t.Errorf("remaining %d, want %d (%+v)", b.remaining, tc.want, b)
			}
		})
	}
	// A spent window read last by an overtaken answer is spent: the
	// provider's 0 is read up by the requests after it that it counted
	// first, never above the 0 it said (4 left for 4 requests; they
	// arrived 1, 3, 4, 2).
	var spent budgetState
	spent.observe(T0, Observation{Remaining: 4, Reset: 5 * sec, Prec: ms})
	for range 4 {
		spent.spend(p, T0+ms, 1, spent.earliest(p, T0+ms, 1, keeper{}))
	}
	for i, o := range [][2]int64{{3, 1}, {2, 3}, {1, 4}, {0, 2}} {
		at := T0 + 10*ms + int64(i)*ms
		spent.observe(at, Observation{Remaining: o[0], Reset: T0 + 5*sec - at, Prec: ms, Seq: o[1]})
	}
	if spent.remaining != 0 {
		t.Errorf("a spent window read last by an overtaken answer: remaining %d, want 0 (%+v)", spent.remaining, spent)
	}
	// A reading of another window is read, whatever its order.
	var b budgetState
	b.observe(T0, Observation{Remaining: 10, Reset: 5 * sec, Prec: ms})
	for range 4 {
		b.spend(p, T0+ms, 1, b.earliest(p, T0+ms, 1, keeper{}))
	}
	b.observe(T0+10*ms, Observation{Remaining: 8, Reset: 4990 * ms, Prec: ms, Seq: 3})
	b.observe(T0+11*ms, Observation{Remaining: 9, Reset: 9989 * ms, Prec: ms, Seq: 2})
	if b.remaining != 7 {
		t.Errorf("2's answer in the next window: remaining %d, want 7 (%+v)", b.remaining, b)
	}
}

// TestBudgetMillisSteps: a reset written as a whole number under a name
// of seconds, which may be milliseconds (Observation.Alt), is read as
// milliseconds once the scope's resets were, or when its milliseconds
// reading falls in the window in force where its seconds reading does not.
func TestBudgetMillisSteps(t *testing.T) {
	const sec = 1_000_000
	for _, tc := range []struct {
		name      string
		first     Observation // at T0
		late      Observation // at T0 + 18 s
		wantReset int64       // µs after T0
		millis    bool
	}{
		{"above an hour first (19987): the late 1947 is milliseconds",
			Observation{Remaining: 9, Reset: 19_987 * ms, Prec: ms, Millis: true},
			Observation{Remaining: 0, Reset: 1947 * sec, Prec: sec, Alt: 1947 * ms}, 18*sec + 1947*ms, true},
		{"an epoch's window first: 2000 in its last 2 s is milliseconds",
			Observation{Remaining: 9, Reset: 20 * sec, Prec: sec},
			Observation{Remaining: 0, Reset: 2000 * sec, Prec: sec, Alt: 2000 * ms}, 20 * sec, true},
		{"seconds that fall in the window in force stay seconds (900, then 882)",
			Observation{Remaining: 9, Reset: 900 * sec, Prec: sec, Alt: 900 * ms},
			Observation{Remaining: 0, Reset: 882 * sec, Prec: sec, Alt: 882 * ms}, 900 * sec, false},
		{"a bucket's time until full, 0.3 s in force, then 2: seconds",
			Observation{Remaining: 9, Reset: 18_300 * ms, Prec: sec, Alt: 18 * ms},
			Observation{Remaining: 0, Reset: 2 * sec, Prec: sec, Alt: 2 * ms}, 20 * sec, false},
		{"a first reading of at most an hour is seconds: nothing tells otherwise",
			Observation{Remaining: -1},
			Observation{Remaining: 0, Reset: 1947 * sec, Prec: sec, Alt: 1947 * ms}, 18*sec + 1947*sec, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b budgetState
			b.observe(T0, tc.first)
			b.observe(T0+18*sec, tc.late)
			if b.reset-T0 != tc.wantReset || b.millis != tc.millis {
				t.Errorf("reset at %.3f s, millis %v; want %.3f s, %v", float64(b.reset-T0)/sec, b.millis, float64(tc.wantReset)/sec, tc.millis)
			}
		})
	}
	// A refusal whose hint is such a reset pauses a scope whose resets are
	// milliseconds for the milliseconds, another scope for the seconds.
	p := Params{}
	for _, millis := range []bool{true, false} {
		var s State
		s.budget.observe(T0-18*sec, Observation{Remaining: 9, Reset: 19_987 * ms, Prec: ms, Millis: millis})
		deadline, _ := s.Refuse(p, T0, Refusal{Pause: 1947_000, Hinted: true, Prec: sec, Alt: 1947})
		want := T0/1000 + 1947_000
		if millis {
			want = T0/1000 + 1947
		}
		if deadline != want {
			t.Errorf("millis %v: the refusal's deadline %d ms after T0, want %d", millis, deadline-T0/1000, want-T0/1000)
		}
	}
}

// TestLearnSteps walks the learned limit through a provider of 3 per 2 s
// that refuses with "try again in N seconds".
func TestLearnSteps(t *testing.T) {
	const sec = 1_000_000
	hinted := Refusal{Hinted: true, Prec: sec}
	var l learnState
	var w windowState
	p := Params{Hold: 250 * ms}
	l.count(T0, 1) // the first contact starts the first cycle
	for range 4 {
		l.count(T0+10*ms, 1)
	}
	// A first contact refused at once (50 ms into it: the whole window,
	// within the hint's precision, is ahead) freezes the raises: a raise
	// refused with the same hint would pause the scope for a window.
	burst := l
	burst.refuse(T0+50*ms, T0+2*sec, hinted, true, false, &windowState{})
	if burst.limit != 4 || burst.frozen != T0+50*ms+raiseAfter {
		t.Errorf("a first contact refused at once: %+v, want n 4 and the raises frozen for raiseAfter", burst)
	}
	// The 4th request was refused at 1.2 s, the window ends at 2 s; the 5th
	// was already on its way.
	l.refuse(T0+1200*ms, T0+2*sec, hinted, true, false, &w)
	if l.limit != 4 || l.window != 2*sec || l.alignAt != T0+2*sec {
		t.Fatalf("after the first refusal: %+v, want 4 per 2 s from 2 s", l)
	}
	if l.frozen != 0 {
		t.Errorf("the first contact's cycle froze the raises (%+v): its window may have been partly spent", l)
	}
	l.refuse(T0+1210*ms, T0+2*sec, hinted, false, false, &w)
	if l.limit != 3 {
		t.Fatalf("after a refusal of a request on its way: n %d, want 3", l.limit)
	}
	spec, _ := l.spec()
	al := l.alignment()
	// Window 2..4 s spent whole without a refusal; the next opens with a probe
	// and grows n by one above best.
	for range 3 {
		w.spend(spec, p, al, T0+2*sec, 1)
	}
	if !l.opens(spec, p, &w, al, T0+4*sec) {
		t.Error("the window after one spent whole does not open with a probe")
	}
	l.grow(spec, p, &w, al, T0+4*sec)
	if l.limit != 4 || l.best != 3 {
		t.Errorf("after a window spent whole: n %d best %d, want 4 and 3", l.limit, l.best)
	}
	// The 4th of that window is refused at the window's end: n back to 3.
	for range 4 {
		w.spend(spec, p, al, T0+4*sec, 1)
	}
	l.refuse(T0+4*sec+50*ms, T0+6*sec, hinted, true, false, &w)
	if l.limit != 3 || l.window != 2*sec {
		t.Errorf("a refusal at the learned window's end: %+v, want 3 per 2 s", l)
	}
	// That refusal refused the level n (4, the window spent whole at it,
	// never sustained): no raise beyond what the windows get accepted for
	// raiseAfter; the windows spent whole meanwhile keep n at 3.
	if l.frozen != T0+4*sec+50*ms+raiseAfter || l.best != 0 {
		t.Errorf("after the level n was refused: frozen %d best %d, want raises frozen for raiseAfter", l.frozen-T0, l.best)
	}
	f, wf := l, windowState{} // a copy: the steps below go on from l
	spec, _ = l.spec()
	for i := int64(3); i < 6; i++ { // windows 6..8, 8..10, 10..12 s: spent whole
		for range 3 {
			wf.spend(spec, p, al, T0+2*i*sec, 1)
		}
		f.grow(spec, p, &wf, al, T0+2*(i+1)*sec)
	}
	if f.limit != 3 || f.best != 3 {
		t.Errorf("windows spent whole while frozen: n %d best %d, want 3 and 3", f.limit, f.best)
	}
	for range 3 { // 64..66 s, past raiseAfter: spent whole, it raises n again
		wf.spend(spec, p, al, T0+64*sec, 1)
	}
	if f.grow(spec, p, &wf, al, T0+66*sec); f.limit != 4 {
		t.Errorf("a window spent whole after raiseAfter: n %d, want 4", f.limit)
	}
	// A refusal whose deadline is not the learned window's end (read to the
	// millisecond: 8.5 s, where the learned window ends at 10 s), with too
	// few admissions since the last refusal to learn again from: realign,
	// keep n and w.
	var w2 windowState
	l.refuse(T0+8*sec+30*ms, T0+8*sec+500*ms, Refusal{Hinted: true, Prec: ms}, true, false, &w2)
	if l.limit != 3 || l.window != 2*sec || l.alignAt != T0+8*sec+500*ms {
		t.Errorf("a refusal off the window's end: %+v, want 3 per 2 s aligned at 8.5 s", l)
	}
	// A cycle that began at a deadline (8.5 s) spans the provider's window
	// from its start: the refusal it is learned again from (4 s on, off the
	// learned window's end, 10.5 s) refused the level it reached, which
	// freezes the raises.
	for range 6 {
		l.count(T0+8*sec+600*ms, 1)
	}
	l.refuse(T0+9*sec, T0+12*sec+500*ms, hinted, true, false, &w2)
	if l.limit != 5 || l.window != 4*sec || l.frozen != T0+9*sec+raiseAfter {
		t.Errorf("learned again from a cycle that began at a deadline: %+v, want 5 per 4 s, raises frozen", l)
	}
	// A window's probe refused, the refusal saying the whole window (a
	// sliding log's Retry-After): the window has not begun where the
	// learned one did, whatever it got accepted (nothing): realign, keep n
	// and w.
	pl := learnState{limit: 40, window: 5 * sec, best: 40, alignAt: T0, alignPrec: sec, since: T0, expires: T0 + LearnTTL}
	var pw windowState
	ps, _ := pl.spec()
	for range 40 {
		pw.spend(ps, p, pl.alignment(), T0+10*ms, 1)
	}
	if !pl.opens(ps, p, &pw, pl.alignment(), T0+5*sec) {
		t.Fatal("the window after one spent whole does not open with a probe")
	}
	pl.probeAt = T0 + 5*sec
	pw.spend(ps, p, pl.alignment(), T0+5*sec, 1)
	pl.refuse(T0+5*sec+30*ms, T0+10*sec+30*ms, hinted, true, false, &pw)
	if pl.limit != 40 || pl.window != 5*sec || pl.alignAt != T0+10*sec+30*ms || pl.absorb != 0 {
		t.Errorf("a refused probe: %+v, want 40 per 5 s aligned at 10.03 s", pl)
	}
	// Forgotten LearnTTL after the refusal that taught it.
	var m State
	m.learn = l
	m.Normalize(Params{MaxPause: 3600_000}, l.refused+LearnTTL)
	if _, ok := m.learn.spec(); ok {
		t.Errorf("learned state %+v outlived learnTTL", m.learn)
	}
}

// TestRelearnSteps: a learned window's probe refused after a window spent
// whole (40 of 40 per w accepted, no Refusal) learns w again, keeping n,
// when its wait says the provider's window ends inside the learned one and
// the window that accepted the 40 then lasted, beyond the hint's precision,
// longer than w; every refused probe realigns the windows to its deadline.
func TestRelearnSteps(t *testing.T) {
	const sec = 1_000_000
	p := Params{Hold: 250 * ms}
	for _, tc := range []struct {
		name   string
		w      int64 // the learned window; the one from T0 was spent whole
		late   int64 // the probe went at T0 + w + late
		answer int64 // its refusal came answer after it
		hint   int64 // ms, read to prec
		prec   int64 // µs
		want   int64 // the learned window after the refusal
	}{
		// TestModelLearningOnlyHelps' clock window met 2.7 s into it: the
		// first contact learned 40 per 3 s; the provider's window that
		// accepted the 40 began at T0 and ends 2 s after the probe.
		{"a clock window longer than learned: its length", 3 * sec, 0, 30 * ms, 2000, sec, 5 * sec},
		{"the same, read to the millisecond", 3 * sec, 0, 30 * ms, 1500, ms, 4530 * ms},
		{"the probe late in its window: from the window spent whole", 3 * sec, 900 * ms, 30 * ms, 2000, sec, 6 * sec},
		// A sliding log's Retry-After: its hint is always the whole window
		// (the learned one), whatever its oldest entry; D − T0 is two
		// windows.
		{"a sliding log's whole-window hint: keep", 5 * sec, 0, 30 * ms, 5000, sec, 5 * sec},
		// A window counted from its first request: the provider's window
		// began with the window's first request, up to a second after the
		// learned one; and a clock window whose reset is rounded down,
		// probed a little early: D − T0 is w within the hint's precision.
		{"a window that began up to a second after the learned one: keep", 5 * sec, 0, 30 * ms, 1000, sec, 5 * sec},
		{"a window a second longer than learned is not told from it: keep", 4 * sec, 0, 30 * ms, 1000, sec, 4 * sec},
		// A bucket in prose: "try again in 1 second", whatever the window
		{"a bucket's next token: keep", sec, 0, 30 * ms, 1000, sec, sec},
		{"a bucket's next token, a window of 2 s learned: keep", 2 * sec, 0, 30 * ms, 1000, sec, 2 * sec},
		{"a bucket's next token, the probe late in its window: keep", 2 * sec, 600 * ms, 30 * ms, 1000, sec, 2 * sec},
		{"a window ending 2 s after the learned one: 7 s (one counted from its first request, begun 2 s late, reads so too)", 5 * sec, 0, 30 * ms, 2000, sec, 7 * sec},
		// a refusal long after a probe whose answer never came is no
		// answer to it: the window spent whole is not the one before
		{"a refusal after the probe's window: keep", 3 * sec, 0, 3500 * ms, 2000, sec, 3 * sec},
		{"a window beyond an hour is a daily quota: keep", 3000 * sec, 0, 30 * ms, 1000 * 1000, sec, 3000 * sec},
	} {
		l := learnState{limit: 40, window: tc.w, best: 40, since: T0, alignAt: T0, alignPrec: sec, refused: T0 - tc.w, expires: T0 + LearnTTL}
		var lw windowState
		spec, _ := l.spec()
		for range 40 {
			lw.spend(spec, p, l.alignment(), T0+10*ms, 1)
		}
		at := T0 + tc.w + tc.late
		if !l.opens(spec, p, &lw, l.alignment(), at) {
			t.Fatalf("%s: the window after one spent whole does not open with a probe", tc.name)
		}
		l.probeAt = at
		lw.spend(spec, p, l.alignment(), at, 1)
		now := at + tc.answer
		D := (floorDiv(now, 1000) + tc.hint) * 1000 // the deadline in force (pauseState.refuse)
		if over, probe := l.refuse(now, D, Refusal{Pause: tc.hint, Hinted: true, Prec: tc.prec}, true, false, &lw); !over || probe != at {
			t.Fatalf("%s: the refusal did not end the learned windows, or named no refused probe (%v, %d)", tc.name, over, probe)
		}
		if l.window != tc.want || l.limit != 40 || l.alignAt != D || l.since != D || l.absorb != 0 || l.probeAt != 0 {
			t.Errorf("%s: %+v, want 40 per %d µs aligned at the deadline T0%+d", tc.name, l, tc.want, D-T0)
		}
	}
}

// TestPauseSteps: the deadline only moves later; who moved it last is kept.
func TestPauseSteps(t *testing.T) {
	p := Params{MaxPause: 3600_000}
	var s pauseState
	for _, st := range []struct {
		at, pauseMs int64
		operator    bool
		want        int64
		byOp        bool
	}{
		{0, 30_000, false, 30_000, false},
		{1000 * ms, 5_000, true, 30_000, false}, // shorter: the later deadline stays, and who set it
		{2000 * ms, 60_000, true, 62_000, true},
		{3000 * ms, 60_000, false, 63_000, false},
	} {
		if got := s.refuse(st.at, st.pauseMs, st.operator); got != st.want || s.operator != st.byOp {
			t.Errorf("refuse(%d, %d) = %d (operator %v), want %d (%v)", st.at, st.pauseMs, got, s.operator, st.want, st.byOp)
		}
	}
	if s.earliest(p, 62_999*ms) != 63_000*ms || s.earliest(p, 63_000*ms) != 0 {
		t.Error("the pause is not in force exactly until its deadline")
	}
	if far := (pauseState{untilMs: 5_000_000}); far.inForce(p, 0) {
		t.Error("a deadline beyond MaxPause is in force; it is malformed")
	}
}

// TestSlidingSteps walks a sliding log of 3 in any second (its slots come
// back slidingSettle later) through its rules.
func TestSlidingSteps(t *testing.T) {
	l := specOf(SlidingWindow(3, 1_000_000_000))
	per := l.per // 1.05 s
	var s limitState
	s.sliding = true
	type step struct {
		name string
		at   int64
		op   byte // 'e' earliest (and spend when it is at), 'h' hinted Refusal, 'u' unhinted refusal
		cost int64
		n    int64 // what the class may spend (0: all 3)
		want int64 // the earliest instant ('e'), or the log's length after ('h', 'u')
	}
	for _, st := range []step{
		{name: "an empty log admits at once", at: T0, op: 'e', cost: 1, want: T0},
		{name: "a cost of 2 fits beside it", at: T0 + 100*ms, op: 'e', cost: 2, want: T0 + 100*ms},
		{name: "full: the oldest leaves a window (and the settling time) after it", at: T0 + 200*ms, op: 'e', cost: 1, want: T0 + per},
		{name: "the oldest left: its slot again", at: T0 + per, op: 'e', cost: 1, want: T0 + per},
		{name: "a cost of 2 waits for the second oldest", at: T0 + 1100*ms, op: 'e', cost: 2, want: T0 + 100*ms + per},
		{name: "background leaving 2 of 3 waits for the log to hold none", at: T0 + 100*ms + per, op: 'e', cost: 1, n: 1, want: T0 + 2*per},
		{name: "interactive work spends what background leaves", at: T0 + 100*ms + per, op: 'e', cost: 2, want: T0 + 100*ms + per},
		{name: "a cost above what the class may spend: never (an instant a window on)", at: T0 + 100*ms + per, op: 'e', cost: 2, n: 1, want: T0 + 100*ms + 2*per},
		{name: "an unhinted refusal keeps the log", at: T0 + 2000*ms, op: 'u', want: 3},
		{name: "a hinted refusal with the log full adds nothing", at: T0 + 2001*ms, op: 'h', want: 3},
		{name: "the oldest leaves", at: T0 + 50*ms + 2*per, op: 'e', cost: 1, want: T0 + 50*ms + 2*per},
		{name: "a hinted refusal when one is left fills the log at its instant", at: T0 + 100*ms + 2*per, op: 'h', want: 3},
		{name: "the log's own entry leaves as it would", at: T0 + 100*ms + 2*per, op: 'e', cost: 1, want: T0 + 50*ms + 3*per},
		{name: "the filled ones a window after the refusal", at: T0 + 100*ms + 2*per, op: 'e', cost: 2, want: T0 + 100*ms + 3*per},
	} {
		s.log = slidingLive(s.log, l, st.at)
		switch st.op {
		case 'e':
			v := l
			if st.n > 0 {
				v.n = st.n
			}
			got := s.earliest(v, Params{}, alignment{}, st.at, st.at, st.cost)
			if got != st.want {
				t.Fatalf("%s: earliest = %d, want T0%+d (log %v)", st.name, got, st.want-T0, s.log)
			}
			if got == st.at {
				s.spend(v, Params{}, alignment{}, st.at, st.at, st.cost, "")
			}
		case 'h', 'u':
			s.refuse(l, st.at, st.op == 'h')
			if int64(len(s.log)) != st.want {
				t.Fatalf("%s: log %v, want %d entries", st.name, s.log, st.want)
			}
		}
	}
}

// TestSecondarySteps: a budget the refusals contradict is not the quota
// that refuses (GitHub's secondary limit beside its primary budget): the
// learned limit applies beside it. A refusal that advertises its budget
// spent contradicts nothing.
func TestSecondarySteps(t *testing.T) {
	const sec = 1_000_000
	hinted := Refusal{Pause: 5000, Hinted: true, Prec: sec}
	p := Params{Hold: 250 * ms, MaxPause: 3600_000}
	for _, tc := range []struct {
		name      string
		remaining int64 // what the refusal's own headers advertise
		learned   bool  // the learned limit applies after it
	}{
		{"a refusal with budget left: the budget is not what refuses", 4000, true},
		{"a refusal with the budget spent: the budget refuses", 0, false},
	} {
		var m State
		m.Normalize(p, T0)
		m.Observe(p, T0, Observation{Remaining: 4995, Reset: 3600 * sec, Limit: 5000, Prec: sec})
		for range 4 {
			if d := m.Admit(p, T0+10*ms, 1, Background); d.Code != Admitted {
				t.Fatalf("%s: first window: %+v, want admitted", tc.name, d)
			}
		}
		m.Observe(p, T0+60*ms, Observation{Remaining: tc.remaining, Reset: 3600 * sec, Limit: 5000, Prec: sec, Refused: true})
		m.Refuse(p, T0+60*ms, hinted)
		_, ok := m.learn.spec()
		if ok && (m.learn.limit != 3 || m.learn.window != 5*sec) {
			t.Fatalf("%s: learned %+v, want 3 per 5 s", tc.name, m.learn)
		}
		if lim := m.active(p); lim.learned != tc.learned {
			t.Errorf("%s: the learned limit applies: %v, want %v (%+v)", tc.name, lim.learned, tc.learned, m.learn)
		}
	}
}

// TestFallbackSteps walks a hintless episode through its rules on the
// whole scope: the pause starts at a second, refusals of requests on their
// way move nothing, the pause's end admits one probe while the others wait
// for its answer, a refused probe doubles the pause up to its cap, an
// answered one ends the episode, and an unanswered one lets the others go
// after its timeout.
func TestFallbackSteps(t *testing.T) {
	p := Params{Hold: 1500 * ms, MaxPause: 3_600_000, Answer: 2500 * ms}
	const capMs = 5000 // Config.FallbackPause, as the refusal carries it
	var s State
	s.Normalize(p, T0)
	type step struct {
		name   string
		at     int64
		refuse bool  // a hintless refusal; else admit (or answer, with answer set)
		answer int64 // answer the probe admitted at this instant (observe)
		want   int64 // refuse: the deadline in force (ms); admit: 0 admitted, else the instant asked again (µs)
		probe  bool  // admitted as the probe
	}
	for _, st := range []step{
		{name: "open: admitted", at: T0, want: 0},
		{name: "the first hintless refusal: a second", at: T0 + 50*ms, refuse: true, want: (T0 + 1050*ms) / ms},
		{name: "a request on its way: moves nothing", at: T0 + 70*ms, refuse: true, want: (T0 + 1050*ms) / ms},
		{name: "paused", at: T0 + 500*ms, want: T0 + 1050*ms},
		{name: "the pause's end: one probe", at: T0 + 1050*ms, want: 0, probe: true},
		{name: "the others wait for its answer", at: T0 + 1060*ms, want: T0 + 1060*ms + probePoll},
		{name: "the probe refused: two seconds", at: T0 + 1100*ms, refuse: true, want: (T0 + 3100*ms) / ms},
		{name: "the next probe", at: T0 + 3100*ms, want: 0, probe: true},
		{name: "refused: four", at: T0 + 3150*ms, refuse: true, want: (T0 + 7150*ms) / ms},
		{name: "the next probe", at: T0 + 7150*ms, want: 0, probe: true},
		{name: "refused: the cap", at: T0 + 7200*ms, refuse: true, want: (T0 + 12200*ms) / ms},
		{name: "the next probe", at: T0 + 12200*ms, want: 0, probe: true},
		{name: "refused: the cap again", at: T0 + 12250*ms, refuse: true, want: (T0 + 17250*ms) / ms},
		{name: "the next probe", at: T0 + 17250*ms, want: 0, probe: true},
		{name: "answered: the episode is over", at: T0 + 17300*ms, answer: T0 + 17250*ms},
		{name: "open: admitted, no probe", at: T0 + 17310*ms, want: 0},
		{name: "a hintless refusal: a second again", at: T0 + 17400*ms, refuse: true, want: (T0 + 18400*ms) / ms},
		{name: "its probe", at: T0 + 18400*ms, want: 0, probe: true},
		{name: "no answer: the others wait out its timeout", at: T0 + 20800*ms, want: T0 + 20850*ms},
		// (the refusal at 17.4 s taught the cycle's 2 admissions less itself:
		// 1 per second, paced, its windows aligned to 18.4 s: Refusal.teaching)
		{name: "past the timeout: admitted, no second probe", at: T0 + 20900*ms, want: 0},
		{name: "refused after all: the episode goes on, two seconds", at: T0 + 21000*ms, refuse: true, want: (T0 + 23000*ms) / ms},
	} {
		switch {
		case st.refuse:
			if d, _ := s.Refuse(p, st.at, Refusal{Pause: capMs}); d != st.want {
				t.Fatalf("%s: deadline %d, want %d (state %+v)", st.name, d, st.want, s.fall)
			}
		case st.answer > 0:
			s.Observe(p, st.at, Observation{Remaining: -2, Opened: st.answer})
		default:
			d := s.Admit(p, st.at, 1, Background)
			got := int64(0)
			if d.Code != Admitted {
				got = st.at + d.Wait
			}
			if got != st.want || (d.Opens > 0) != st.probe || st.probe && (d.Opens != st.at || d.Cache) {
				t.Fatalf("%s: %+v, want asked again at %d (0: admitted), probe %v (state %+v)", st.name, d, st.want, st.probe, s.fall)
			}
		}
	}
}

// TestHintlessLearnSteps walks what a hintless refusal teaches the scope
// (Refusal.teaching): the cycle's admissions less the refusals per the
// episode's pause rounded to a second, as a hint of a second would; nothing
// when the cycle got nothing accepted (an outage: the episode's pauses
// answer it), nothing from an operator's pause, and nothing beside
// configured limits (their windows stay where they were).
func TestHintlessLearnSteps(t *testing.T) {
	const sec = 1000 * ms
	const capMs = 60_000 // Config.FallbackPause, as the refusal carries it
	p := Params{Hold: 1500 * ms, MaxPause: 3_600_000, Answer: 2500 * ms}
	hintless := Refusal{Pause: capMs}
	fresh := func(p Params) *State {
		var s State
		s.Normalize(p, T0)
		return &s
	}

	// A bucket's first contact: 12 admitted, the 9th refused first (the
	// episode's second: deadline 1.1 s), 3 more on their way.
	s := fresh(p)
	for i := range 12 {
		if d := s.Admit(p, T0+10*ms+int64(i)*ms, 1, Background); d.Code != Admitted {
			t.Fatalf("first contact: %+v, want admitted", d)
		}
	}
	if d, _ := s.Refuse(p, T0+100*ms, hintless); d != (T0+1100*ms)/ms {
		t.Fatalf("the first hintless refusal: deadline %d, want a second", d)
	}
	if s.learn.limit != 11 || s.learn.window != sec || s.learn.alignAt != T0+1100*ms {
		t.Fatalf("learned %+v, want 11 per 1 s aligned at 1.1 s", s.learn)
	}
	for range 3 {
		if d, _ := s.Refuse(p, T0+110*ms, hintless); d != (T0+1100*ms)/ms {
			t.Fatalf("a request on its way: deadline %d, want the pause in force", d)
		}
	}
	if s.learn.limit != 8 {
		t.Fatalf("after the refusals on their way: n %d, want 8 (what the cycle got accepted)", s.learn.limit)
	}
	// The pause's end: the episode's probe, then the learned window.
	if d := s.Admit(p, T0+1100*ms, 1, Background); d.Code != Admitted || d.Opens == 0 {
		t.Fatalf("the pause's end: %+v, want the episode's probe", d)
	}
	s.Observe(p, T0+1130*ms, Observation{Remaining: -1, Opened: T0 + 1100*ms})
	// Paced: the k-th admission of a window at k·w/n (125 ms) into it.
	if d := s.Admit(p, T0+1140*ms, 1, Background); d.Code != Limited || d.Reason != ReasonLearned || d.Wait != 85*ms {
		t.Fatalf("the learned window's 2nd before its pace: %+v, want limited until 1.225 s", d)
	}
	for i := range 7 {
		if d := s.Admit(p, T0+1225*ms+int64(i)*125*ms, 1, Background); d.Code != Admitted {
			t.Fatalf("the learned window's %d-th at its pace: %+v, want admitted", i+2, d)
		}
	}
	if d := s.Admit(p, T0+2000*ms, 1, Background); d.Code != Limited || d.Wait != 100*ms {
		t.Fatalf("the learned window's 9th: %+v, want limited until its next window (2.1 s)", d)
	}
	// The next window opens with its probe (its predecessor was spent
	// whole; no raise: the first contact, refused within a second of its
	// start, froze them); its 3rd refused without a hint says the pace is
	// above the provider's: n − 1, raises frozen. The episode's probe
	// refused after the pause keeps n (the provider's window has not
	// begun).
	if d := s.Admit(p, T0+2100*ms, 1, Background); d.Code != Admitted || d.Opens == 0 || s.learn.limit != 8 {
		t.Fatalf("the next window: %+v, n %d, want its probe, n 8", d, s.learn.limit)
	}
	s.Observe(p, T0+2130*ms, Observation{Remaining: -1, Opened: T0 + 2100*ms})
	for i := 1; i < 3; i++ {
		if d := s.Admit(p, s.learn.alignAt+int64(i)*125_000, 1, Background); d.Code != Admitted {
			t.Fatalf("the next window's %d-th at its pace: %+v, want admitted", i+1, d)
		}
	}
	s.Refuse(p, T0+2400*ms, hintless)
	if s.learn.limit != 7 || s.learn.frozen != T0+2400*ms+raiseAfter || s.learn.paced != 1 {
		t.Fatalf("a paced window refused: %+v, want 7, frozen", s.learn)
	}
	if d := s.Admit(p, T0+3400*ms, 1, Background); d.Code != Admitted || d.Opens == 0 {
		t.Fatalf("the pause's end: %+v, want the episode's probe", d)
	}
	s.Refuse(p, T0+3430*ms, hintless)
	if s.learn.limit != 7 {
		t.Fatalf("the episode's probe refused: n %d, want 7 kept", s.learn.limit)
	}
	// An operator's pause teaches nothing.
	before := s.learn
	s.Refuse(p, T0+1200*ms, Refusal{Pause: 5000, Operator: true})
	if s.learn.limit != before.limit || s.learn.window != before.window || s.learn.alignAt != before.alignAt {
		t.Fatalf("an operator's pause taught %+v (was %+v)", s.learn, before)
	}

	// An outage from the first contact: every request refused. The cycle
	// got nothing accepted, so it teaches no limit.
	s = fresh(p)
	for i := range 5 {
		s.Admit(p, T0+10*ms+int64(i)*ms, 1, Background)
	}
	for range 5 {
		s.Refuse(p, T0+100*ms, hintless)
	}
	if _, ok := s.learn.spec(); ok {
		t.Fatalf("an outage taught %+v, want nothing", s.learn)
	}

	// Beside a configured limit: nothing learned, the windows not realigned.
	pc := p
	pc.Limits = []LimitSpec{specOf(FixedWindow(10, 5*time.Second))}
	s = fresh(pc)
	for i := range 5 {
		s.Admit(pc, T0+10*ms+int64(i)*ms, 1, Background)
	}
	s.Refuse(pc, T0+100*ms, hintless)
	if s.learn.limit != 0 || s.learn.alignAt != 0 {
		t.Fatalf("beside a configured limit a hintless refusal taught %+v, want nothing", s.learn)
	}
}

// spender returns a function that spends n admissions of cost 1 of b at
// at, failing t if one is not admitted.
func spender(t *testing.T, p Params, b *budgetState) func(at int64, n int) {
	return func(at int64, n int) {
		t.Helper()
		for range n {
			v := b.earliest(p, at, 1, keeper{})
			if !v.spend {
				t.Fatalf("at %d: %+v, want spent (state %+v)", at-T0, v, *b)
			}
			b.spend(p, at, 1, v)
		}
	}
}

// TestBudgetRefillSteps: a bucket of 11 refilling one every 125 ms, whose
// reset is the time until it is full (throttled's GCRA), read in whole
// seconds rounded up; and the readings that do not refill: a window's end,
// and a bucket's next token.
func TestBudgetRefillSteps(t *testing.T) {
	p := Params{Probe: 2500 * ms}
	sec := 1000 * ms
	var b budgetState
	spend := spender(t, p, &b)
	b.observe(T0, Observation{Remaining: 10, Reset: sec, Limit: 11, Prec: sec, Seq: 1})
	spend(T0+ms, 9) // seq 1..9
	b.observe(T0+20*ms, Observation{Remaining: 3, Reset: sec, Limit: 11, Prec: sec, Seq: 8})
	if b.per != 0 {
		t.Fatalf("a reset that has not moved: refills every %d µs, want a window's budget", b.per)
	}
	b.observe(T0+30*ms, Observation{Remaining: 1, Reset: 2 * sec, Limit: 11, Prec: sec, Seq: 10})
	// 1 left; the reset 2 s ahead moved 1 s later as 2 more were spent:
	// the budget refills 10 by 2.03 s, one every 200 ms.
	if b.per != 200*ms || b.remaining != 1 || b.reset != T0+2030*ms {
		t.Fatalf("after the reset moved later: %+v, want 1 left, one more every 200 ms until 2.03 s", b)
	}
	spend(T0+31*ms, 1)
	if v := b.earliest(p, T0+32*ms, 1, keeper{}); v != (budgetVerdict{at: T0 + 230*ms, why: ReasonBudget}) {
		t.Fatalf("spent: %+v, want the next unit at 0.23 s", v)
	}
	spend(T0+450*ms, 2) // refilled 2 by 0.43 s
	if v := b.earliest(p, T0+450*ms, 1, keeper{}); v.at != T0+630*ms {
		t.Fatalf("spent again: %+v, want the next unit at 0.63 s (the part of a unit refilled kept)", v)
	}
	// A reading with more left than the refill says anchors it again (the
	// bucket refilled faster), at the same pace: its reset did not grow.
	b.observe(T0+460*ms, Observation{Remaining: 3, Reset: 2 * sec, Limit: 11, Prec: sec, Seq: 13})
	if b.avail(T0+460*ms) != 3 || b.per != 200*ms || b.at != T0+460*ms {
		t.Fatalf("a fuller reading: %+v, want 3 left at 0.46 s, one more every 200 ms", b)
	}
	// Past the reset a probe asks, as for every budget.
	if v := b.earliest(p, T0+2460*ms, 1, keeper{}); !v.probe {
		t.Fatalf("past the reset: %+v, want a probe", v)
	}

	// A window's end never moves later before it passes (read against the
	// Date header, its distance only shrinks), and a bucket telling its
	// next token moves it later only as the budget rises: neither refills.
	for _, c := range []struct {
		name string
		obs  []Observation
	}{
		{"a window's end, epoch seconds against Date", []Observation{
			{Remaining: 39, Reset: 5 * sec, Limit: 40, Prec: sec, Seq: 1},
			{Remaining: 20, Reset: 5 * sec, Limit: 40, Prec: sec, Seq: 20},
			{Remaining: 0, Reset: 4 * sec, Limit: 40, Prec: sec, Seq: 40}}},
		{"a bucket's next token", []Observation{
			{Remaining: 0, Reset: 100 * ms, Limit: 10, Prec: ms, Seq: 1},
			{Remaining: 1, Reset: 120 * ms, Limit: 10, Prec: ms, Seq: 2}}},
		{"a bucket's next token, taken by the request that reads it", []Observation{
			{Remaining: 0, Reset: 80 * ms, Limit: 10, Prec: ms, Seq: 1},
			{Remaining: 0, Reset: 110 * ms, Limit: 10, Prec: ms, Seq: 2}}},
	} {
		var w budgetState
		for i, o := range c.obs {
			for w.seq < o.Seq {
				w.spend(p, T0+int64(i)*10*ms, 1, budgetVerdict{spend: true})
			}
			w.observe(T0+int64(i)*10*ms+ms, o)
			if w.per != 0 {
				t.Errorf("%s: reading %d refills every %d µs, want none", c.name, i, w.per)
			}
		}
	}
}

// TestBudgetCounterSteps: a sliding window counter of 10 per 5 s
// (go-chi/httprate), its reset the window's end in epoch seconds read
// against Date: the first window spent whole under a reset that held, the
// probe after it answered with the previous window still weighing in, the
// budget paced as that weight decays and rolled on at its reset without a
// probe; and the budgets that are not whole after their reset but are no
// counter.
func TestBudgetCounterSteps(t *testing.T) {
	p := Params{Probe: 2500 * ms}
	sec := 1000 * ms
	var b budgetState
	spend := func(at int64) budgetVerdict {
		v := b.earliest(p, at, 1, keeper{})
		if v.spend || v.probe {
			b.spend(p, at, 1, v)
		}
		return v
	}
	if v := spend(T0); !v.probe {
		t.Fatalf("first contact: %+v, want a probe", v)
	}
	b.observe(T0+25*ms, Observation{Remaining: 9, Reset: 5 * sec, Limit: 10, Prec: sec, Seq: 1})
	for i := range int64(9) { // seq 2..10, each read under the same reset
		if v := spend(T0 + 30*ms); !v.spend {
			t.Fatalf("the first window: %+v, want spent", v)
		}
		b.observe(T0+55*ms, Observation{Remaining: 8 - i, Reset: 5 * sec, Limit: 10, Prec: sec, Seq: 2 + i})
	}
	if b.window != 0 || !b.held || b.reset != T0+5025*ms {
		t.Fatalf("the first window spent: %+v, want a window's budget (its reset held) until 5.025 s", b)
	}
	spent := b // the first window spent, for a probe sent late (below)
	if v := spend(T0 + 5100*ms); !v.probe {
		t.Fatalf("past the reset: %+v, want a probe", v)
	}
	// The probe's answer: 0 left, the next window's end 5 s on. Beyond the
	// probe, 9 are the previous window's weight: back by 10.125 s.
	b.observe(T0+5125*ms, Observation{Remaining: 0, Reset: 5 * sec, Limit: 10, Prec: sec, Seq: 11})
	per := (5*sec + 8) / 9
	if b.window != 5*sec || b.per != per || b.remaining != 0 || b.reset != T0+10125*ms {
		t.Fatalf("the probe answered: %+v, want a counter of a 5 s window (5.1 s between the resets read, to the second), one unit every %d µs until 10.125 s", b, per)
	}
	if v := spend(T0 + 5200*ms); v != (budgetVerdict{at: T0 + 5125*ms + per, why: ReasonBudget}) {
		t.Fatalf("spent: %+v, want the next unit of the decay", v)
	}
	for k := int64(1); k <= 8; k++ { // the decay spent as it comes
		if v := spend(T0 + 5125*ms + k*per); !v.spend {
			t.Fatalf("unit %d of the decay: %+v, want spent", k, v)
		}
	}
	// At the reset what had not come back (the probe, 8 of the decay, and
	// its ninth unit, due a few µs after the reset: per is rounded up)
	// becomes the previous window's weight: no probe, one back every
	// 5 s / 10 until the next reset.
	var s State
	s.budget = b
	s.Normalize(p, T0+10200*ms)
	b = s.budget
	if per = (5*sec + 9) / 10; b.reset != T0+15125*ms || b.per != per || b.remaining != 0 || b.at != T0+10125*ms {
		t.Fatalf("rolled: %+v, want 0 left at 10.125 s, one more every %d µs until 15.125 s", b, per)
	}
	if v := spend(T0 + 10125*ms + per); !v.spend || v.probe {
		t.Fatalf("after the roll: %+v, want spent, no probe", v)
	}
	// A refusal hinted the whole window (httprate's Retry-After) pauses
	// until the next unit, at least MinPause; a longer hint is kept, and a
	// budget that is not a counter's keeps every hint.
	now := T0 + 10125*ms + per + ms
	if got := b.counterPause(now, 5000, sec); got != MinPause.Milliseconds() {
		t.Errorf("a whole-window hint: pause %d ms, want MinPause", got)
	}
	if got := b.counterPause(now, 60_000, sec); got != 60_000 {
		t.Errorf("a hint longer than the window: pause %d ms, want the hint", got)
	}
	if w := (budgetState{known: true, reset: now + 5*sec, limit: 10}); w.counterPause(now, 5000, sec) != 5000 {
		t.Errorf("a window's budget: the hint shortened, want it kept")
	}

	// Not whole after the reset, but no counter: a bucket telling its next
	// token (the reset read only while the budget stayed spent: it did not
	// hold while the budget moved), and a bucket's next token rounded up to
	// the second (the new reset less than two precisions after the old).
	for _, c := range []struct {
		name      string
		prec      int64
		reads     []int64 // remaining of the readings of the first window, under one reset
		reset     int64
		afterRem  int64
		afterDist int64
		late      int64 // the probe went this long after the reset
	}{
		{"a bucket's next token", ms, []int64{0, 0}, 120 * ms, 0, 125 * ms, 10 * ms},
		{"a next token rounded up to the second", sec, []int64{2, 1, 0}, sec, 7, sec, 10 * ms},
		// Discord's X-RateLimit-Reset-After: the burst spent under one next
		// token (its reset held while the budget moved), the probe at it
		// answered 0 left, the next token 125 ms on (minCounterWindow).
		{"a next token to the millisecond, read while the burst was spent", ms, []int64{2, 1, 0}, 120 * ms, 0, 125 * ms, 10 * ms},
		// A refusal's pause held the scope past the reset: the first
		// reading after it lies two seconds after the reset (a bucket
		// telling its next token in delta seconds: read as a counter of a
		// 2 s window, it would be paced below its rate).
		{"a next token rounded up to the second, read a second after the reset", sec, []int64{2, 1, 0}, sec, 7, sec, 1030 * ms},
		{"a next token to the millisecond, read a second after the reset", ms, []int64{2, 1, 0}, 120 * ms, 7, 125 * ms, 1030 * ms},
	} {
		var w budgetState
		w.spend(p, T0, 1, budgetVerdict{probe: true})
		w.observe(T0+25*ms, Observation{Remaining: 9, Limit: 10, Prec: c.prec, Seq: 1})
		for i, r := range c.reads {
			for w.seq < int64(2+i) {
				w.spend(p, T0+30*ms, 1, budgetVerdict{spend: true})
			}
			w.observe(T0+50*ms, Observation{Remaining: r, Reset: c.reset, Limit: 10, Prec: c.prec, Seq: w.seq})
		}
		at := w.reset + c.late
		w.spend(p, at, 1, budgetVerdict{probe: true})
		w.observe(at+25*ms, Observation{Remaining: c.afterRem, Reset: c.afterDist, Limit: 10, Prec: c.prec, Seq: w.seq})
		if w.window != 0 {
			t.Errorf("%s: read as a counter: %+v", c.name, w)
		}
	}
	// A counter whose probe a pause held 2 s past the reset: its answer,
	// 3 s from the next window's end, is still read as a counter's (5 s
	// between the resets).
	late := spent
	late.spend(p, T0+7025*ms, 1, budgetVerdict{probe: true})
	late.observe(T0+7050*ms, Observation{Remaining: 4, Reset: 3 * sec, Limit: 10, Prec: sec, Seq: 11})
	if late.window != 5*sec {
		t.Errorf("a counter read 2 s into its window: %+v, want a counter of a 5 s window", late)
	}
	// A fixed window whose last request, sent before the reset, arrives
	// after the window's end and counts in the next: the probe finds one
	// short of whole beyond itself, and one of the window before is still
	// unanswered. No counter.
	var f budgetState
	f.spend(p, T0, 1, budgetVerdict{probe: true})
	f.observe(T0+25*ms, Observation{Remaining: 9, Reset: 5 * sec, Limit: 10, Prec: sec, Seq: 1})
	for i := range int64(9) { // seq 2..10; seq 10's answer comes after the probe's
		f.spend(p, T0+30*ms, 1, budgetVerdict{spend: true})
		if i < 8 {
			f.observe(T0+55*ms, Observation{Remaining: 8 - i, Reset: 5 * sec, Limit: 10, Prec: sec, Seq: 2 + i})
		}
	}
	f.spend(p, T0+5100*ms, 1, budgetVerdict{probe: true})
	f.observe(T0+5125*ms, Observation{Remaining: 8, Reset: 5 * sec, Limit: 10, Prec: sec, Seq: 11})
	if f.window != 0 {
		t.Errorf("a fixed window with a request counted in the next: read as a counter: %+v", f)
	}
}

// TestBudgetRoundedDownSteps: a window of 40 counted from its first request
// whose reset is its end in epoch seconds rounded down, read against the
// whole-second Date header. Until a probe at the reset is refused, the
// earliest reading of a window is kept, as for resets rounded up; after it,
// the window's first reading, which its first request took.
func TestBudgetRoundedDownSteps(t *testing.T) {
	p := Params{Probe: 2500 * ms}
	sec := 1000 * ms
	var b budgetState
	spend := spender(t, p, &b)
	probe := func(at int64) {
		v := b.earliest(p, at, 1, keeper{})
		if !v.probe {
			t.Fatalf("at %d: %+v, want a probe (state %+v)", at-T0, v, b)
		}
		b.spend(p, at, 1, v)
	}
	// The window opened by the probe at 0.28 ends at 5.28; its answer at
	// 0.31 (Date 0, reset 5) reads 5.31, one at 1.09 (Date 1, reset 5)
	// reads 5.09: the earlier is kept, as for every scope so far.
	probe(T0 + 280*ms)
	b.observe(T0+310*ms, Observation{Remaining: 39, Reset: 5 * sec, Limit: 40, Prec: sec, Seq: b.seq})
	spend(T0+320*ms, 39)
	b.observe(T0+1090*ms, Observation{Remaining: 0, Reset: 4 * sec, Limit: 40, Prec: sec, Seq: b.seq})
	if b.reset != T0+5090*ms || b.down {
		t.Fatalf("two readings of a window: %+v, want the earlier, 5.09 s", b)
	}
	// The probe at 5.09 is refused: the window has not ended though its
	// reset has passed (Date 5, reset 5: a second at most).
	probe(T0 + 5090*ms)
	b.observe(T0+5120*ms, Observation{Remaining: 0, Reset: sec, Limit: 40, Prec: sec, Seq: b.seq, Refused: true})
	if !b.down || b.reset != T0+6120*ms {
		t.Fatalf("the probe at the reset refused: %+v, want resets rounded down, the budget spent until 6.12 s", b)
	}
	// The next window opens with the probe at 6.12 and ends at 11.12; its
	// first reading, 11.15, is kept over the later 11.05.
	probe(T0 + 6120*ms)
	b.observe(T0+6150*ms, Observation{Remaining: 39, Reset: 5 * sec, Limit: 40, Prec: sec, Seq: b.seq})
	spend(T0+6160*ms, 39)
	b.observe(T0+7050*ms, Observation{Remaining: 0, Reset: 4 * sec, Limit: 40, Prec: sec, Seq: b.seq})
	if b.reset != T0+11150*ms {
		t.Fatalf("rounded down, two readings of a window: %+v, want its first, 11.15 s", b)
	}
	if v := b.earliest(p, T0+11140*ms, 1, keeper{}); v.at != T0+11150*ms || v.why != ReasonBudget {
		t.Fatalf("before the first reading: %+v, want spent until 11.15 s", v)
	}
	// A refusal of a window spent whole that is not a probe, or whose
	// reset is farther than its precision, says nothing of the rounding.
	for _, c := range []struct {
		name string
		o    Observation
	}{
		{"not a probe", Observation{Remaining: 0, Reset: sec, Limit: 40, Prec: sec, Refused: true}},
		{"a reset seconds ahead", Observation{Remaining: 0, Reset: 3 * sec, Limit: 40, Prec: sec, Refused: true}},
		{"an acceptance", Observation{Remaining: 0, Reset: sec, Limit: 40, Prec: sec}},
	} {
		var w budgetState
		w.observe(T0, Observation{Remaining: 0, Reset: sec, Limit: 40, Prec: sec})
		if c.name != "not a probe" {
			v := w.earliest(p, T0+sec, 1, keeper{})
			w.spend(p, T0+sec, 1, v)
		}
		c.o.Seq = w.seq
		w.observe(T0+sec+30*ms, c.o)
		if w.down {
			t.Errorf("%s: resets rounded down, want not", c.name)
		}
	}
}

// TestLearnedWindowAlignsOnItsOwnResets: with nothing configured, a reset
// farther ahead than the learned window (GitHub's hour-long primary budget
// beside the secondary limit learned from its refusals) does not move the
// learned windows' alignment; one within it does, as before anything is
// learned.
func TestLearnedWindowAlignsOnItsOwnResets(t *testing.T) {
	p := Params{Probe: 2500 * ms}
	sec := 1000 * ms
	var s State
	s.Normalize(p, T0)
	s.Observe(p, T0, Observation{Remaining: 4999, Reset: 3600 * sec, Limit: 5000, Prec: sec, Seq: 1})
	if s.learn.alignAt != T0+3600*sec {
		t.Fatalf("nothing learned: aligned at %d, want the reset, an hour ahead", s.learn.alignAt-T0)
	}
	s.learn = learnState{limit: 40, window: 5 * sec, alignAt: T0 + 5*sec, alignPrec: sec, secondary: T0, expires: T0 + LearnTTL}
	s.Observe(p, T0+1300*ms, Observation{Remaining: 4990, Reset: 3600 * sec, Limit: 5000, Prec: sec, Seq: 2, Refused: false})
	if s.learn.alignAt != T0+5*sec {
		t.Fatalf("a 5 s window learned: an hour-long reset aligned it at %d, want 5 s kept", s.learn.alignAt-T0)
	}
	s.Observe(p, T0+1400*ms, Observation{Remaining: 3, Reset: 4 * sec, Limit: 40, Prec: sec, Seq: 3})
	if s.learn.alignAt != T0+5400*ms {
		t.Fatalf("a reset within the learned window: aligned at %d, want 5.4 s", s.learn.alignAt-T0)
	}
}

// TestRefusedProbeLeavesLearnedLog: a learned window longer than MaxHold
// is a sliding log; its probe refused (with a hint of the whole window,
// which keeps w) was counted by no provider, so its entry leaves the log,
// and the window after the refusal's deadline gets all of n at once.
// (Before: the probe's entry held a slot until a window after the probe,
// 20 ms past the deadline here, and learning was slower than the plain
// pause on a clock window met partway through.)
func TestRefusedProbeLeavesLearnedLog(t *testing.T) {
	p := Params{Hold: 250 * ms, MaxPause: 3600_000}
	var s State
	s.Normalize(p, T0)
	hint := Refusal{Pause: 3000, Hinted: true, Prec: 1_000_000}
	for i := range 5 { // the first contact: 5 sent, the 5th refused
		if d := s.Admit(p, T0, 1, Interactive); d.Code != Admitted {
			t.Fatalf("first contact %d: %+v", i, d)
		}
	}
	D1, _ := s.Refuse(p, T0+10*ms, hint)
	if s.learn.limit != 4 || s.learn.window != 3_000_000 {
		t.Fatalf("learned %d per %d µs, want 4 per 3 s", s.learn.limit, s.learn.window)
	}
	for i := range 4 { // the window from D1 spent whole
		if d := s.Admit(p, D1*1000, 1, Interactive); d.Code != Admitted || d.Wait != 0 {
			t.Fatalf("window from D1, admission %d: %+v", i, d)
		}
	}
	probeAt := D1*1000 + 3050*ms // the window after, once the log's slots came back (slidingSettle)
	if d := s.Admit(p, probeAt, 1, Interactive); d.Code != Admitted || d.Wait != 0 || d.Opens != probeAt {
		t.Fatalf("the probe: %+v", d)
	}
	if len(s.llog.log) != 1 || s.llog.log[0] != probeAt {
		t.Fatalf("the learned log after the probe: %v, want [%d]", s.llog.log, probeAt)
	}
	D2, _ := s.Refuse(p, probeAt+30*ms, hint) // a whole window's wait: w stays
	if s.learn.window != 3_000_000 || s.learn.limit != 4 {
		t.Fatalf("after the refused probe: %d per %d µs, want 4 per 3 s", s.learn.limit, s.learn.window)
	}
	if len(s.llog.log) != 0 {
		t.Errorf("the refused probe's entry stayed in the learned log: %v", s.llog.log)
	}
	for i := range 4 { // n at the deadline, none held for the probe's slot
		if d := s.Admit(p, D2*1000, 1, Interactive); d.Code != Admitted || d.Wait != 0 {
			t.Errorf("window from D2, admission %d: %+v", i, d)
		}
	}
}
