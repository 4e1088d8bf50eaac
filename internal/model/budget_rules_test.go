package model

import "testing"

// Step tables of the budget's named rules (budget.go), one row a state and
// the rule that answers it.

// TestBudgetEarliestRules: earliest answers by the first of its rules that
// applies, in the order of budget.go's list; every earlier rule passes.
func TestBudgetEarliestRules(t *testing.T) {
	sec := 1000 * ms
	on, off := Params{Probe: 2500 * ms}, Params{}
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
		{"refillsWhole", func(s budgetState, _ Params, _, cost int64, k keeper) (budgetVerdict, bool) {
			return s.refillsWhole(cost, k), true
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
		{"past the reset, probes off: whole again", past, off, 1, keeper{}, "refillsWhole", budgetVerdict{refill: true}},
		{"probes off, whole but kept: until k's lapse", past, off, 6, keep, "refillsWhole", budgetVerdict{at: now + 300*ms, why: ReasonBudget}},
		{"probes off, beyond the limit: nothing held", past, off, 11, keeper{}, "refillsWhole", budgetVerdict{}},
		{"probes off, nothing known: nothing held", budgetState{}, off, 1, keeper{}, "refillsWhole", budgetVerdict{}},
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
