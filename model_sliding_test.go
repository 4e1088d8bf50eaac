package quotagate

import (
	"context"
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
		p := params{hold: 400_000, maxPause: 3600_000, reserve: 300, lend: 2_000_000}
		for _, l := range ls {
			p.limits = append(p.limits, specOf(l))
		}
		var sl limitSpec
		for _, l := range p.limits {
			if l.sliding {
				sl = l
			}
		}
		r := rand.New(rand.NewPCG(3, uint64(len(ls))))
		admits, refusals := 0, 0
		for run := range 40 {
			var m scopeState
			m.normalize(p, 0)
			now := int64(1_000_000_000_000)
			var got []int64 // one instant per unit of cost
			for range 300 {
				now += int64(r.IntN(250_000))
				if r.IntN(20) == 0 {
					m.refuse(p, now, refusal{pause: 200 + int64(r.IntN(1500)), hinted: r.IntN(2) == 0, prec: 1000})
					refusals++
					continue
				}
				cost := int64(1 + r.IntN(4)/3)
				c := classes[r.IntN(2)]
				if d := m.admit(p, now, cost, c); d.code == admitted {
					for range cost {
						got = append(got, now+d.wait)
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

// TestSlidingState: a sliding log spent whole defers the next task until
// its oldest entry leaves, State shows how long until the log is empty,
// and Resume deletes it.
func TestSlidingState(t *testing.T) {
	c, rdb := newMini(t)
	ctx := context.Background()
	s := Scope{Provider: "acme", Account: "a"}
	g := newWith(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"acme": {SlidingWindow(3, 10*time.Second)}}},
		hooks{now: func() time.Time { return c.now }})
	defer g.Close()
	for i := range 3 {
		if err := g.admit(ctx, s, 1, false); err != nil {
			t.Fatalf("admission %d: %v", i, err)
		}
		c.advance(time.Second)
	}
	if err := g.admit(ctx, s, 1, false); err == nil {
		t.Fatal("a fourth admitted within the window")
	}
	st, err := g.State(ctx, s)
	want := 10*time.Second + slidingSettle*time.Microsecond - time.Second // the last entry, a second old
	if err != nil || st.LimitBacklog != want {
		t.Fatalf("State = %+v, %v; want a limit backlog of %v", st, err, want)
	}
	k := scopeKeys("qgtest", s)
	if !c.mr.Exists(limitKey(k, 0, SlidingWindow(3, 10*time.Second))) {
		t.Fatal("no log in Redis")
	}
	if err := g.Resume(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := g.admit(ctx, s, 1, false); err != nil {
		t.Errorf("after Resume: %v, want admitted at once", err)
	}
}
