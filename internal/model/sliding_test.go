package model

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSlidingNeverExceeds: under a sliding log stacked with a bucket,
// admissions of both classes with costs of 1 and 2, slots reserved ahead
// and hinted refusals between them, no window of the log's length (the
// configured window and slidingSettle) ever holds more than its n.
func TestSlidingNeverExceeds(t *testing.T) {
	for _, ls := range [][]Limit{
		{SlidingWindow(5, time.Second)},
		{SlidingWindow(7, 3*time.Second), PerSecond(4, 3)},
		{FixedWindow(6, 2*time.Second), SlidingWindow(4, 700*time.Millisecond)},
	} {
		p := Params{Hold: 400_000, MaxPause: 3600_000, Reserve: 300, Lend: 2_000_000}
		for _, l := range ls {
			p.Limits = append(p.Limits, specOf(l))
		}
		var sl LimitSpec
		for _, l := range p.Limits {
			if l.sliding {
				sl = l
			}
		}
		r := rand.New(rand.NewPCG(3, uint64(len(ls))))
		admits, refusals := 0, 0
		for run := range 40 {
			var m State
			m.Normalize(p, 0)
			now := int64(1_000_000_000_000)
			var got []int64 // one instant per unit of cost
			for range 300 {
				now += int64(r.IntN(250_000))
				if r.IntN(20) == 0 {
					m.Refuse(p, now, Refusal{Pause: 200 + int64(r.IntN(1500)), Hinted: r.IntN(2) == 0, Prec: 1000})
					refusals++
					continue
				}
				cost := int64(1 + r.IntN(4)/3)
				c := classes[r.IntN(2)]
				if d := m.Admit(p, now, cost, c); d.Code == Admitted {
					for range cost {
						got = append(got, now+d.Wait)
					}
					admits++
				}
			}
			slices.Sort(got)
			for i := range got {
				j := i
				for j < len(got) && got[j] < got[i]+sl.per {
					j++
				}
				if int64(j-i) > sl.n {
					t.Fatalf("%v run %d: %d admissions within %dµs from %d", ls, run, j-i, sl.per, got[i])
				}
			}
		}
		if admits < 1000 || refusals == 0 {
			t.Fatalf("%v: %d admissions, %d refusals: the sequences did not exercise the log", ls, admits, refusals)
		}
	}
}
