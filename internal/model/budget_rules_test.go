package model

import "testing"

// Step tables of the budget's named rules (budget.go), one row a state and
// the rule that answers it.

// TestBudgetEarliestRules: earliest answers by the first of its rules that
// applies, in the order of budget.go's list; every earlier rule passes.
func TestBudgetEarliestRules(t *testing.T) {
	sec := 1000 * ms
	on := Params{Probe: 2500 * ms}
	type rule struct {
		name string
		f    func(s budgetState, p Params, now, cost int64, k keeper) (budgetVerdict, bool)
	}
	rules := []rule{
		{"silent", func(s budgetState, _ Params, _, _ int64, _ keeper) (budgetVerdict, bool) {
			return budgetVerdict{}, s.silent
		}},
		{"untilReset", func(s budgetState, _ Params, now, cost int64, k keeper) (budgetVerdict, bool) {
			return s.untilReset(now, cost, k)
		}},
		{"awaitingProbe", func(s budgetState, p Params, now, _ int64, _ keeper) (budgetVerdict, bool) {
			return s.awaitingProbe(p, now)
		}},
		{"probeUnanswered", func(s budgetState, _ Params, _, _ int64, _ keeper) (budgetVerdict, bool) {
			return budgetVerdict{silent: true}, s.probeUnanswered()
		}},
		{"probeAsks", func(s budgetState, p Params, now, _ int64, k keeper) (budgetVerdict, bool) {
			return s.probeAsks(p, now, k)
		}},
	}
	now := T0 + 10*sec
	window := budgetState{known: true, remaining: 3, reset: now + sec, limit: 10}
	spent := window
	spent.remaining = 0
	bucket := spent
	bucket.per, bucket.at = 100*ms, now-50*ms
	past := window
	past.reset = now - ms
	keep := keeper{share: 500, lapse: now + 300*ms} // keeps 5 of 10 until 0.3 s
	claims := keeper{claims: 1, lapse: now + 20*ms}
	for _, c := range []struct {
		name string
		s    budgetState
		p    Params
		cost int64
		k    keeper
		rule string
		want budgetVerdict
	}{
		{"a silent provider: nothing held", budgetState{silent: true, known: true, reset: now + sec}, on, 1, keeper{}, "silent", budgetVerdict{}},
		{"budget left before the reset: spend", window, on, 1, keeper{}, "untilReset", budgetVerdict{spend: true}},
		{"no reset advertised: spend while known", budgetState{known: true, remaining: 1}, on, 1, keeper{}, "untilReset", budgetVerdict{spend: true}},
		{"left, but kept for interactive work: until k's lapse", window, on, 1, keep, "untilReset", budgetVerdict{at: now + 300*ms, why: ReasonBudget}},
		{"kept, no reset: until k's lapse", budgetState{known: true, remaining: 3, limit: 10}, on, 1, keep, "untilReset", budgetVerdict{at: now + 300*ms, why: ReasonBudget}},
		{"spent: until the reset", spent, on, 1, keeper{}, "untilReset", budgetVerdict{at: now + sec, why: ReasonBudget}},
		{"spent, refilling: until its next unit", bucket, on, 1, keeper{}, "untilReset", budgetVerdict{at: now + 50*ms, why: ReasonBudget}},
		{"spent, no reset: the probe's rules", budgetState{known: true, probeAt: now - ms}, on, 1, keeper{}, "awaitingProbe", budgetVerdict{at: now + probePoll, why: ReasonProbe}},
		{"past the reset, a probe out: wait, looking every probePoll", func() budgetState { s := past; s.probeAt = now - 10*ms; return s }(), on, 1, keeper{}, "awaitingProbe", budgetVerdict{at: now + probePoll, why: ReasonProbe}},
		{"a probe out, its timeout sooner than the poll", func() budgetState { s := past; s.probeAt = now - 2480*ms; return s }(), on, 1, keeper{}, "awaitingProbe", budgetVerdict{at: now + 20*ms, why: ReasonProbe}},
		{"a probe out, no place to wait: go", func() budgetState { s := past; s.probeAt = now - 10*ms; return s }(), Params{Probe: 2500 * ms, NowOnly: true}, 1, keeper{}, "awaitingProbe", budgetVerdict{}},
		{"first contact's probe unanswered past its timeout: silent", budgetState{probeAt: now - 2500*ms}, on, 1, keeper{}, "probeUnanswered", budgetVerdict{silent: true}},
		{"a known budget's probe unanswered: another probe", func() budgetState { s := past; s.probeAt = now - 2500*ms; return s }(), on, 1, keeper{}, "probeAsks", budgetVerdict{probe: true}},
		{"first contact: a probe", budgetState{}, on, 1, keeper{}, "probeAsks", budgetVerdict{probe: true}},
		{"past the reset: a probe", past, on, 1, keeper{}, "probeAsks", budgetVerdict{probe: true}},
		{"past the reset, claims waiting: no probe until their lapse", past, on, 1, claims, "probeAsks", budgetVerdict{at: now + 20*ms, why: ReasonProbe}},
	} {
		if v := c.s.earliest(c.p, now, c.cost, c.k); v != c.want {
			t.Errorf("%s: earliest = %+v, want %+v", c.name, v, c.want)
		}
		for _, r := range rules {
			v, ok := r.f(c.s, c.p, now, c.cost, c.k)
			if r.name != c.rule {
				if ok {
					t.Errorf("%s: %s answered %+v before %s", c.name, r.name, v, c.rule)
				}
				continue
			}
			if !ok || v != c.want {
				t.Errorf("%s: %s = %+v, %v; want %+v", c.name, r.name, v, ok, c.want)
			}
			break
		}
	}
}

// TestBudgetObserveGuards: the rules that decide before a reading is read:
// a probe answered with nothing, and the evidence of resets rounded down.
func TestBudgetObserveGuards(t *testing.T) {
	sec := 1000 * ms
	probing := budgetState{probeAt: T0}
	known := budgetState{known: true, reset: T0 + sec, probeAt: T0, refilled: 3, seq: 4}
	for _, c := range []struct {
		name string
		s    budgetState
		o    Observation
		rule func(budgetState, Observation) bool
		want bool
	}{
		{"first contact's probe answered with no budget: nothing", probing, Observation{Remaining: -1}, budgetState.answersNothing, true},
		{"no response seen: not an answer", probing, Observation{Remaining: -2}, budgetState.answersNothing, false},
		{"no budget advertised, none out asking", budgetState{}, Observation{Remaining: -1}, budgetState.answersNothing, false},
		{"no budget advertised to a scope that knows one", known, Observation{Remaining: -1}, budgetState.answersNothing, false},
		{"the probe refused, spent, its reset within a second: rounded down", known, Observation{Remaining: 0, Reset: sec, Prec: sec, Refused: true}, budgetState.roundsDown, true},
		{"an acceptance", known, Observation{Remaining: 0, Reset: sec, Prec: sec}, budgetState.roundsDown, false},
		{"a refusal with budget left", known, Observation{Remaining: 1, Reset: sec, Prec: sec, Refused: true}, budgetState.roundsDown, false},
		{"a reset seconds ahead", known, Observation{Remaining: 0, Reset: 3 * sec, Prec: sec, Refused: true}, budgetState.roundsDown, false},
		{"no probe out", budgetState{known: true}, Observation{Remaining: 0, Reset: sec, Prec: sec, Refused: true}, budgetState.roundsDown, false},
		{"first contact's probe refused", probing, Observation{Remaining: 0, Reset: sec, Prec: sec, Refused: true}, budgetState.roundsDown, false},
	} {
		if got := c.rule(c.s, c.o); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestBudgetInMillis: a reset that may be milliseconds is read so when
// readsMillis says it is, and the scope then reads its resets so.
func TestBudgetInMillis(t *testing.T) {
	sec := 1000 * ms
	now := T0
	window := budgetState{known: true, reset: now + 1947*ms}
	for _, c := range []struct {
		name   string
		s      budgetState
		o      Observation
		want   Observation
		millis bool
	}{
		{"seconds, not in question", window, Observation{Reset: 2 * sec, Prec: sec}, Observation{Reset: 2 * sec, Prec: sec}, false},
		{"milliseconds under a name of seconds: the window in force", window,
			Observation{Reset: 1947 * sec, Prec: sec, Alt: 1947 * ms}, Observation{Reset: 1947 * ms, Prec: millisPrec, Alt: 1947 * ms, Millis: true}, true},
		{"a scope that reads milliseconds", budgetState{millis: true},
			Observation{Reset: 3 * sec, Prec: sec, Alt: 3 * ms}, Observation{Reset: 3 * ms, Prec: millisPrec, Alt: 3 * ms, Millis: true}, true},
		{"first contact: read as seconds", budgetState{},
			Observation{Reset: 1947 * sec, Prec: sec, Alt: 1947 * ms}, Observation{Reset: 1947 * sec, Prec: sec, Alt: 1947 * ms}, false},
		{"milliseconds read by the hint package", budgetState{},
			Observation{Reset: 5000 * ms, Prec: millisPrec, Millis: true}, Observation{Reset: 5000 * ms, Prec: millisPrec, Millis: true}, true},
	} {
		s := c.s
		if got := s.inMillis(now, c.o); got != c.want || s.millis != c.millis {
			t.Errorf("%s: %+v, millis %v; want %+v, %v", c.name, got, s.millis, c.want, c.millis)
		}
	}
}

// TestBudgetLowered: an answer's remaining less the admissions after it,
// read up by those that overtook it (overtaken, above).
func TestBudgetLowered(t *testing.T) {
	sec := 1000 * ms
	now := T0 + 10*ms
	// 10 per 5 s, read at 0 (seq 0); requests 1..4 admitted since; the
	// newest read is request 3's (distSeq), with 2 readings since.
	s := budgetState{known: true, remaining: 6, reset: T0 + 5*sec, limit: 10, seq: 4, distSeq: 3, answered: 2}
	for _, c := range []struct {
		name string
		s    budgetState
		o    Observation
		same bool
		want int64
	}{
		{"2 admitted after it: lowered by them", s, Observation{Remaining: 8, Reset: 5 * sec, Prec: ms, Seq: 4 - 2}, false, 6},
		{"the newest: as it is", s, Observation{Remaining: 6, Reset: 5 * sec, Prec: ms, Seq: 4}, true, 6},
		{"an unknown request: as it is", s, Observation{Remaining: 8, Reset: 5 * sec, Prec: ms}, true, 8},
		{"never below 0", s, Observation{Remaining: 1, Reset: 5 * sec, Prec: ms, Seq: 1}, false, 0},
		{"3 overtook 2: read up by it", s, Observation{Remaining: 7, Reset: 5 * sec, Prec: ms, Seq: 2}, true, 6},
		{"overtaken, read up: never above what the budget had", func() budgetState { b := s; b.remaining = 5; return b }(),
			Observation{Remaining: 7, Reset: 5 * sec, Prec: ms, Seq: 2}, true, 5},
		{"of another window: not overtaken", s, Observation{Remaining: 7, Reset: 5 * sec, Prec: ms, Seq: 2}, false, 5},
		{"a reset within its precision: read as it is", s, Observation{Remaining: 7, Reset: sec, Prec: sec, Seq: 2}, true, 5},
	} {
		if got := c.s.lowered(now, c.o, c.same); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestBudgetFillsUntilFull: a bucket's "until full" moves its reset later
// with every request spent; a window's end does not, nor does a bucket's
// next token but by a token's time as the budget rises.
func TestBudgetFillsUntilFull(t *testing.T) {
	sec := 1000 * ms
	now := T0 + 30*ms
	// a bucket of 11: 3 left until 0.97 s read at seq 8 ("1" s), 2 spent since
	bucket := budgetState{known: true, remaining: 1, reset: T0 + 1020*ms, limit: 11, seq: 10, dist: sec, distSeq: 8}
	for _, c := range []struct {
		name string
		s    budgetState
		o    Observation
		want bool
	}{
		{"the reset grew as 2 were spent: until full", bucket, Observation{Remaining: 1, Reset: 2 * sec, Limit: 11, Prec: sec, Seq: 10}, true},
		{"the reset held: a window's end", bucket, Observation{Remaining: 1, Reset: sec, Limit: 11, Prec: sec, Seq: 10}, false},
		{"an older request's reading", bucket, Observation{Remaining: 1, Reset: 2 * sec, Limit: 11, Prec: sec, Seq: 8}, false},
		{"the budget rose: a token came", bucket, Observation{Remaining: 3, Reset: 2 * sec, Limit: 11, Prec: sec, Seq: 10}, false},
		{"whole: nothing to refill", bucket, Observation{Remaining: 11, Reset: 2 * sec, Limit: 11, Prec: sec, Seq: 10}, false},
		{"past the reset in force", func() budgetState { b := bucket; b.reset = now; return b }(), Observation{Remaining: 1, Reset: 2 * sec, Limit: 11, Prec: sec, Seq: 10}, false},
		{"a counter's budget", func() budgetState { b := bucket; b.window = 5 * sec; return b }(), Observation{Remaining: 1, Reset: 2 * sec, Limit: 11, Prec: sec, Seq: 10}, false},
		{"no reading before", func() budgetState { b := bucket; b.distSeq = 0; return b }(), Observation{Remaining: 1, Reset: 2 * sec, Limit: 11, Prec: sec, Seq: 10}, false},
		// a bucket of 10 telling its next token to the millisecond: 0 left
		// at 0.1 s read at seq 1, and the token that came taken by seq 2
		{"a next token moved a whole token's time", budgetState{known: true, reset: T0 + 100*ms, limit: 10, seq: 2, dist: 80 * ms, distSeq: 1},
			Observation{Remaining: 0, Reset: 110 * ms, Limit: 10, Prec: ms, Seq: 2}, false},
	} {
		rd := c.s.readingOf(now, c.o)
		rd.r = c.s.lowered(now, c.o, c.s.sameWindow(now, rd.u, c.o.Prec))
		if got := c.s.fillsUntilFull(now, c.o, rd); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestBudgetKeptReset: of two readings of the window in force the earlier
// reset is kept, or the first where resets are rounded down; a refilling
// budget and a new window keep the reading's.
func TestBudgetKeptReset(t *testing.T) {
	in := T0 + 5090*ms
	for _, c := range []struct {
		name string
		down bool
		rd   reading
		want int64
	}{
		{"a later reading of the window: the earlier kept", false, reading{u: in + 200*ms, same: true}, in},
		{"an earlier reading of the window: kept", false, reading{u: in - 200*ms, same: true}, in - 200*ms},
		{"rounded down: the first reading stays", true, reading{u: in - 200*ms, same: true}, in},
		{"a new window", true, reading{u: in + 5000*ms}, in + 5000*ms},
		{"a refilling budget: its fill time", false, reading{u: in + 200*ms, same: true, refills: true}, in + 200*ms},
	} {
		s := budgetState{known: true, reset: in, down: c.down}
		if got := s.keptReset(c.rd); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got-T0, c.want-T0)
		}
	}
}

// TestBudgetPace: how the budget refills from a reading on (pace,
// becomesCounter).
func TestBudgetPace(t *testing.T) {
	sec := 1000 * ms
	now := T0 + 5125*ms
	counter := budgetState{known: true, remaining: 2, reset: now + 4*sec, limit: 10, window: 5 * sec, per: 100 * ms, at: now - 250*ms}
	for _, c := range []struct {
		name    string
		s       budgetState
		o       Observation
		rd      reading
		per, at int64
		window  int64
	}{
		{"a counter's reading of its window: the pace's count, anchored now", counter, Observation{Remaining: 5, Prec: sec},
			reading{u: now + 4*sec, lim: 10, r: 5, same: true}, 100 * ms, now, 5 * sec},
		{"a counter's new window: anchored now", counter, Observation{Remaining: 7, Prec: sec},
			reading{u: now + 9*sec, lim: 10, r: 7}, 100 * ms, now, 5 * sec},
		{"first read as a counter: the previous window's weight decays", budgetState{known: true, reset: T0 + 5025*ms, limit: 10, refilled: 10, seq: 11},
			Observation{Remaining: 0, Prec: sec, Seq: 11}, reading{u: now + 5*sec, lim: 10, counter: true}, (5*sec + 8) / 9, now, 5 * sec},
		{"the reset grew: a bucket full at it", budgetState{known: true, per: 300 * ms}, Observation{Remaining: 1, Prec: sec},
			reading{u: now + 2*sec, lim: 11, r: 1, refills: true, grew: true}, 200 * ms, now, 0},
		{"a refilling budget read again: the same pace, anchored now", budgetState{known: true, per: 300 * ms}, Observation{Remaining: 1, Prec: sec},
			reading{u: now + 2*sec, lim: 11, r: 1, refills: true}, 300 * ms, now, 0},
		{"a window's budget: no refill", budgetState{known: true}, Observation{Remaining: 1, Prec: sec},
			reading{u: now + 2*sec, lim: 11, r: 1}, 0, 0, 0},
	} {
		s := c.s
		s.pace(now, c.o, c.rd)
		if s.per != c.per || s.at != c.at || s.window != c.window {
			t.Errorf("%s: per %d at %d window %d; want %d, %d, %d", c.name, s.per, s.at-T0, s.window, c.per, c.at-T0, c.window)
		}
	}
}
