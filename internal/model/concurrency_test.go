package model

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestConcurrentSteps walks a scope with a concurrency limit of 2 (leases
// of a second) through its rules: admissions, releases, expiry, a
// Refusal, the classes' reserve, a bucket beside it, and Resume.
func TestConcurrentSteps(t *testing.T) {
	conc := Concurrent(2)
	conc.Period = time.Second
	p := Params{Hold: 500_000, MaxPause: 3600_000, Reserve: 500, Lend: 10_000_000}
	type step struct {
		name  string
		at    int64
		op    byte // 'a' admit (id, cost, class), 'l' release id, 'r' hinted Refusal, 'z' resume
		id    string
		cost  int64
		class Class
		code  int64  // 'a': the verdict
		why   Reason // 'a': its reason
		wait  int64  // 'a': its wait
		held  int64  // the units the leases hold after the step
	}
	run := func(t *testing.T, ls []Limit, steps []step) {
		p := p
		for _, l := range ls {
			p.Limits = append(p.Limits, specOf(l))
		}
		var s State
		s.Normalize(p, T0)
		for _, st := range steps {
			switch st.op {
			case 'a':
				d := s.AdmitLease(p, st.at, max(st.cost, 1), st.class, st.id)
				if d.Code != st.code || d.Reason != st.why || d.Wait != st.wait {
					t.Fatalf("%s: code %d reason %d wait %d, want %d %d %d", st.name, d.Code, d.Reason, d.Wait, st.code, st.why, st.wait)
				}
				if d.Code == Limited && !d.Unreserved {
					t.Fatalf("%s: a slot reserved while every lease is taken", st.name)
				}
			case 'l':
				s.Release(p, st.at, st.id, true)
			case 'r':
				s.Refuse(p, st.at, Refusal{Pause: 1000, Hinted: true, Prec: 1000})
			case 'z':
				s.Resume(p)
				s.Normalize(p, st.at)
			}
			held := int64(0)
			for i, l := range p.Limits {
				if l.concurrent {
					held += concHeld(s.limits[i].leases, st.at)
				}
			}
			if held != st.held {
				t.Fatalf("%s: leases hold %d, want %d (%+v)", st.name, held, st.held, s.limits)
			}
		}
	}
	t.Run("alone", func(t *testing.T) {
		run(t, []Limit{conc}, []step{
			{name: "an empty limit admits at once", at: T0, op: 'a', id: "a", code: Admitted, held: 1},
			{name: "the second slot", at: T0 + 10*ms, op: 'a', id: "b", code: Admitted, held: 2},
			{name: "full: ask again a poll later, nothing reserved", at: T0 + 20*ms, op: 'a', id: "c", code: Limited, why: ReasonInFlight, wait: concurrentPoll, held: 2},
			{name: "a release frees its slot", at: T0 + 30*ms, op: 'l', id: "a", held: 1},
			{name: "a second release of the same lease changes nothing", at: T0 + 31*ms, op: 'l', id: "a", held: 1},
			{name: "a release of a lease never held changes nothing", at: T0 + 32*ms, op: 'l', id: "zz", held: 1},
			{name: "the freed slot is taken", at: T0 + 40*ms, op: 'a', id: "c", code: Admitted, held: 2},
			{name: "a cost of 2 waits for both", at: T0 + 50*ms, op: 'a', id: "d", cost: 2, code: Limited, why: ReasonInFlight, wait: concurrentPoll, held: 2},
			{name: "b never released expires a lease's life after its admission", at: T0 + 1010*ms, op: 'a', id: "f", code: Admitted, held: 2},
			{name: "c is still held: ask again at its expiry, before a poll", at: T0 + 1030*ms, op: 'a', id: "g", code: Limited, why: ReasonInFlight, wait: 10 * ms, held: 2},
			{name: "... when it has expired", at: T0 + 1040*ms, op: 'a', id: "g", code: Admitted, held: 2},
			{name: "a hinted refusal leaves the leases: the pause holds the scope", at: T0 + 1100*ms, op: 'r', held: 2},
			{name: "paused", at: T0 + 1110*ms, op: 'a', id: "h", code: Paused, why: ReasonPause, wait: 990 * ms, held: 2},
			{name: "Resume drops every lease", at: T0 + 1200*ms, op: 'z', held: 0},
			{name: "a cost of 2 after Resume", at: T0 + 1200*ms, op: 'a', id: "h", cost: 2, code: Admitted, held: 2},
		})
	})
	t.Run("classes", func(t *testing.T) {
		run(t, []Limit{conc}, []step{
			{name: "interactive work asks: its reserve is kept", at: T0, op: 'a', id: "i", class: Interactive, code: Admitted, held: 1},
			{name: "background work leaves one of 2: it has none while one is held", at: T0 + 10*ms, op: 'a', id: "b", code: Limited, why: ReasonInFlight, wait: concurrentPoll, held: 1},
			{name: "the interactive lease released", at: T0 + 20*ms, op: 'l', id: "i", held: 0},
			{name: "background work takes the one it may", at: T0 + 30*ms, op: 'a', id: "b", code: Admitted, held: 1},
			{name: "interactive work takes the reserve", at: T0 + 40*ms, op: 'a', id: "j", class: Interactive, code: Admitted, held: 2},
		})
	})
	t.Run("beside a bucket", func(t *testing.T) {
		run(t, []Limit{PerSecond(4, 1), conc}, []step{
			{name: "both admit", at: T0, op: 'a', id: "a", code: Admitted, held: 1},
			{name: "the bucket's slot 250 ms ahead is reserved, with its lease", at: T0 + 10*ms, op: 'a', id: "b", code: Admitted, wait: 240 * ms, held: 2},
			{name: "full: ask again at the bucket's next slot, nothing reserved", at: T0 + 20*ms, op: 'a', id: "c", code: Limited, why: ReasonInFlight, wait: 480 * ms, held: 2},
			{name: "a released", at: T0 + 30*ms, op: 'l', id: "a", held: 1},
			{name: "the bucket's slot, with the freed lease", at: T0 + 40*ms, op: 'a', id: "c", code: Admitted, wait: 460 * ms, held: 2},
		})
	})
}

// TestConcurrentNeverExceeds: under concurrency limits alone and stacked
// with a bucket and a sliding log, admissions of both classes with costs
// of 1 and 2, slots reserved ahead, releases, refusals and leases left to
// expire, the leases in force (from each admission until its release or
// expiry) never hold more than n at any instant: a ledger kept apart from
// the model's state.
func TestConcurrentNeverExceeds(t *testing.T) {
	short := Concurrent(3)
	short.Period = 800 * time.Millisecond
	for _, ls := range [][]Limit{
		{short},
		{Concurrent(4), PerSecond(20, 5)},
		{SlidingWindow(6, time.Second), short},
	} {
		p := Params{Hold: 400_000, MaxPause: 3600_000, Reserve: 300, Lend: 2_000_000}
		var cl LimitSpec
		for _, l := range ls {
			p.Limits = append(p.Limits, specOf(l))
			if specOf(l).concurrent {
				cl = specOf(l)
			}
		}
		type held struct{ from, until, cost int64 }
		r := rand.New(rand.NewPCG(5, uint64(len(ls))))
		admits, releases, full := 0, 0, 0
		for run := range 40 {
			var m State
			m.Normalize(p, 0)
			now := int64(1_000_000_000_000)
			ledger := map[string]*held{}
			var ids []string
			for i := range 400 {
				now += int64(r.IntN(60_000))
				switch x := r.IntN(20); {
				case x == 0:
					m.Refuse(p, now, Refusal{Pause: 200 + int64(r.IntN(800)), Hinted: r.IntN(2) == 0, Prec: 1000})
				case x < 8 && len(ids) > 0:
					j := r.IntN(len(ids))
					if h := ledger[ids[j]]; h.until > now {
						h.until = now
					}
					m.Release(p, now, ids[j], true)
					ids = append(ids[:j], ids[j+1:]...)
					releases++
				default:
					id := strconv.Itoa(i)
					cost := int64(1 + r.IntN(4)/3)
					d := m.AdmitLease(p, now, cost, classes[r.IntN(2)], id)
					if d.Reason == ReasonInFlight {
						full++
					}
					if d.Code != Admitted {
						continue
					}
					admits++
					ledger[id] = &held{from: now, until: now + d.Wait + cl.per, cost: cost}
					ids = append(ids, id)
					in := int64(0)
					for _, h := range ledger {
						if h.from <= now && now < h.until {
							in += h.cost
						}
					}
					if in > cl.n {
						t.Fatalf("%v run %d: %d units in flight at %d, limit %d", ls, run, in, now, cl.n)
					}
				}
			}
		}
		if admits < 1000 || releases < 1000 || full < 100 {
			t.Fatalf("%v: %d admissions, %d releases, %d found full: the sequences did not exercise the limit", ls, admits, releases, full)
		}
	}
}
