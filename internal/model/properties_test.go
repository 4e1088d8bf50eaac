package model

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestModelNeverAdmitsOverALimit: under stacked limits (a bucket and two
// fixed windows whose windows start with the scope's first admission), any
// sequence of admissions keeps every limit: no window of any length period
// holds more than its rate, and the bucket's conformance holds between any
// two admissions. (Before, the search for the earliest instant returned
// after a few rounds without a final check.)
func TestModelNeverAdmitsOverALimit(t *testing.T) {
	ls := []Limit{PerSecond(10, 3), FixedWindow(4, 2*time.Second), FixedWindow(7, 5*time.Second)}
	p := Params{Hold: 250_000, MaxPause: 3600_000}
	for _, l := range ls {
		p.Limits = append(p.Limits, specOf(l))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 50 {
		var m State
		m.Normalize(p, 0)
		now := int64(1_000_000_000_000)
		type adm struct{ at, cost int64 }
		var got []adm
		for range 400 {
			now += int64(r.IntN(300_000))
			cost := int64(1 + r.IntN(2))
			if d := m.Admit(p, now, cost, Background); d.Code == Admitted {
				got = append(got, adm{now + d.Wait, cost})
			}
		}
		for i := range got {
			for _, l := range ls {
				sum := int64(0)
				for j := i; j < len(got) && got[j].at < got[i].at+l.Period.Microseconds(); j++ {
					sum += got[j].cost
					if !l.Fixed && sum > int64(l.burst())+(got[j].at-got[i].at)/l.interval() {
						t.Fatalf("run %d: %v: %d units between %d and %d", run, l, sum, got[i].at, got[j].at)
					}
				}
				if l.Fixed && sum > int64(l.Rate) {
					t.Fatalf("run %d: %v: %d units within one period from %d", run, l, sum, got[i].at)
				}
			}
		}
	}
}

// TestModelLiveness: from any state a random sequence reaches (refusals
// with and without hints, budgets of every kind, probes never answered,
// learned limits, hintless episodes), once the pause, the budget's reset, a probe's timeout
// and one window have passed, a request is admitted: no reachable state
// keeps a scope from asking the provider: it is admitted, or (a limit,
// configured or learned) within one more window. And a deadline in force
// never moves earlier.
func TestModelLiveness(t *testing.T) {
	for i := range 400 {
		r := rand.New(rand.NewPCG(uint64(i), 3))
		ls := diffConfigs[i%len(diffConfigs)]
		p := Params{Hold: 250_000, MaxPause: 3600_000, Probe: 2_500_000 * int64(i%2), Answer: 1_250_000}
		for _, l := range ls {
			p.Limits = append(p.Limits, specOf(l))
		}
		var m State
		m.Normalize(p, 0)
		now := int64(1_000_000_000_000)
		for _, e := range diffEvents(r, 120, false, i%8 < 4) {
			switch e.kind {
			case 'a':
				m.Report(p, now, e.counts, e.age)
				m.Admit(p, now, e.cost, Background)
			case 'r':
				before := m.Deadline()
				inForce := m.pause.inForce(p, now)
				d, _ := m.Refuse(p, now, Refusal{Pause: e.pause, Hinted: e.hinted, Prec: e.prec, Operator: e.operator})
				if inForce && d < before {
					t.Fatalf("seq %d: the deadline moved earlier: %d → %d", i, before, d)
				}
			case 'o':
				m.Observe(p, now, e.obs)
			case 'z':
				m.Resume(p)
			case 't':
				now += e.advance.Microseconds()
			}
		}
		horizon := max(m.Deadline()*1000, m.budget.reset, m.budget.probeAt+p.Probe, m.learn.probeAt+p.Answer, m.fall.probeAt+p.Answer, m.line.next, now)
		window := m.learn.window
		for _, l := range p.Limits {
			window = max(window, l.per*l.n) // a bucket's whole burst, or a window
		}
		at := horizon + window + 1
		d := m.Admit(p, at, 1, Background)
		switch {
		case d.Code == Admitted:
		case d.Code == Limited && d.Wait <= window: // a window's last second (a reset read to the second), or a bucket's next token
		default:
			t.Fatalf("seq %d (limits %v): at %d, past every deadline and a window (%d): %+v; state %+v", i, ls, at, window, d, canonical(m))
		}
		// That admission may have been a probe, never answered: its
		// timeout and a window later, the scope asks again.
		at += p.Probe + p.Answer + window + 1
		if d := m.Admit(p, at, 1, Background); d.Code == Paused || d.Code == Limited && d.Wait > window {
			t.Fatalf("seq %d (limits %v): an unanswered probe holds the scope: %+v; state %+v", i, ls, d, canonical(m))
		}
	}
}

// TestSlotAheadKeepsTheWindowSpent: a fixed window spent whole, its
// windows realigned by a reset header since (its counts under two
// starts), and an admission a moment before the next window that takes a
// slot in it: the admissions after it still find the window of now
// spent. (Before, spending the slot dropped the counts older than one
// period before the slot's window, which the window of now still counted:
// the requests after it went at once into the provider's closed window.)
func TestSlotAheadKeepsTheWindowSpent(t *testing.T) {
	p := Params{Limits: []LimitSpec{{fixed: true, per: 5_000_000, n: 40}}, Hold: 1_500_000, MaxPause: 43_200_000}
	const t0 = 1_700_000_000_000_000
	var s State
	for i := range int64(40) {
		at := t0 + 6_000 + i*1_000
		if i >= 20 { // after a response's reset header: the provider's window ends at t0 + 5 s, read to the second
			at += 20_000
		}
		if i == 20 {
			s.learn.align(at, t0+5_040_000, 1_000_000)
		}
		if d := s.Admit(p, at, 1, Background); d.Code != Admitted || d.Wait != 0 {
			t.Fatalf("admission %d of the first window: %+v", i, d)
		}
	}
	now := int64(t0 + 4_020_000)
	if d := s.Admit(p, now, 1, Background); d.Code != Admitted || now+d.Wait != t0+5_040_000 {
		t.Fatalf("a moment before the next window: %+v, want its first slot", d)
	}
	for i := range int64(19) {
		if d := s.Admit(p, now+1_000*(i+1), 1, Background); d.Code == Admitted && d.Wait == 0 {
			t.Fatalf("admission %d after the slot ahead went at once, into the spent window", i)
		}
	}
}

// TestAlignedWindowLeavesItsPredecessor: a configured window of 40 per 5 s
// spends 14 at the head of its unaligned window, then a response's reset
// (in milliseconds) aligns the windows 25 ms after the origin's; the
// aligned window that opens at that reset counts none of the 14, which the
// provider counted in the window before it. (Before, it counted them as an
// overlapping predecessor's, and the first aligned window admitted only
// what the 14 left of its 40.) Nor does a window realigned a millisecond
// earlier count its predecessor.
func TestAlignedWindowLeavesItsPredecessor(t *testing.T) {
	p := Params{Limits: []LimitSpec{{fixed: true, per: 5_000_000, n: 40}}, Hold: 1_500_000, MaxPause: 43_200_000}
	const t0 = 1_700_000_000_000_000
	var s State
	for i := range int64(40) {
		at := t0 + 40_000 + i*2_000
		if i == 14 { // the first answer: the window ends 5.025 s after t0, read to the millisecond
			s.Observe(p, at, Observation{Remaining: 39, Reset: t0 + 5_025_000 - at, Limit: 40, Prec: 1_000})
		}
		if d := s.Admit(p, at, 1, Background); d.Code != Admitted || d.Wait != 0 {
			t.Fatalf("admission %d of the first window: %+v", i, d)
		}
	}
	if d := s.Admit(p, t0+200_000, 1, Background); d.Code == Admitted && d.Wait == 0 {
		t.Fatalf("a 41st admission in the first window: %+v", d)
	}
	for i := range int64(40) {
		if d := s.Admit(p, t0+5_025_000+i*1_000, 1, Background); d.Code != Admitted || d.Wait != 0 {
			t.Fatalf("admission %d of the aligned window: %+v", i, d)
		}
	}
	// The next reading of the reset is a millisecond earlier (its jitter):
	// the window it aligns overlaps the one recorded only by the tail where
	// that one admits nothing, and counts none of its 40.
	s.Observe(p, t0+5_100_000, Observation{Remaining: 0, Reset: 4_924_000, Limit: 40, Prec: 1_000})
	for i := range int64(40) {
		if d := s.Admit(p, t0+10_024_000+i*1_000, 1, Background); d.Code != Admitted || d.Wait != 0 {
			t.Fatalf("admission %d of the window realigned a millisecond earlier: %+v", i, d)
		}
	}
}
