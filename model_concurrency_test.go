package quotagate

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestConcurrentSteps walks a scope with a concurrency limit of 2 (leases
// of a second) through its rules: admissions, releases, expiry, a
// refusal, the classes' reserve, a bucket beside it, and Resume.
func TestConcurrentSteps(t *testing.T) {
	conc := Concurrent(2)
	conc.Period = time.Second
	p := params{hold: 500_000, maxPause: 3600_000, reserve: 500, lend: 10_000_000}
	type step struct {
		name  string
		at    int64
		op    byte // 'a' admit (id, cost, class), 'l' release id, 'r' hinted refusal, 'z' resume
		id    string
		cost  int64
		class Class
		code  int64  // 'a': the verdict
		why   reason // 'a': its reason
		wait  int64  // 'a': its wait
		held  int64  // the units the leases hold after the step
	}
	run := func(t *testing.T, ls []Limit, steps []step) {
		p := p
		for _, l := range ls {
			p.limits = append(p.limits, specOf(l))
		}
		var s scopeState
		s.normalize(p, T0)
		for _, st := range steps {
			switch st.op {
			case 'a':
				d := s.admitLease(p, st.at, max(st.cost, 1), st.class, st.id)
				if d.code != st.code || d.reason != st.why || d.wait != st.wait {
					t.Fatalf("%s: code %d reason %d wait %d, want %d %d %d", st.name, d.code, d.reason, d.wait, st.code, st.why, st.wait)
				}
				if d.code == limited && !d.unreserved {
					t.Fatalf("%s: a slot reserved while every lease is taken", st.name)
				}
			case 'l':
				s.release(p, st.at, st.id)
			case 'r':
				s.refuse(p, st.at, refusal{pause: 1000, hinted: true, prec: 1000})
			case 'z':
				s.resume(p)
				s.normalize(p, st.at)
			}
			held := int64(0)
			for i, l := range p.limits {
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
			{name: "an empty limit admits at once", at: T0, op: 'a', id: "a", code: admitted, held: 1},
			{name: "the second slot", at: T0 + 10*ms, op: 'a', id: "b", code: admitted, held: 2},
			{name: "full: ask again a poll later, nothing reserved", at: T0 + 20*ms, op: 'a', id: "c", code: limited, why: reasonInFlight, wait: concurrentPoll, held: 2},
			{name: "a release frees its slot", at: T0 + 30*ms, op: 'l', id: "a", held: 1},
			{name: "a second release of the same lease changes nothing", at: T0 + 31*ms, op: 'l', id: "a", held: 1},
			{name: "a release of a lease never held changes nothing", at: T0 + 32*ms, op: 'l', id: "zz", held: 1},
			{name: "the freed slot is taken", at: T0 + 40*ms, op: 'a', id: "c", code: admitted, held: 2},
			{name: "a cost of 2 waits for both", at: T0 + 50*ms, op: 'a', id: "d", cost: 2, code: limited, why: reasonInFlight, wait: concurrentPoll, held: 2},
			{name: "b never released expires a lease's life after its admission", at: T0 + 1010*ms, op: 'a', id: "f", code: admitted, held: 2},
			{name: "c is still held: ask again at its expiry, before a poll", at: T0 + 1030*ms, op: 'a', id: "g", code: limited, why: reasonInFlight, wait: 10 * ms, held: 2},
			{name: "... when it has expired", at: T0 + 1040*ms, op: 'a', id: "g", code: admitted, held: 2},
			{name: "a hinted refusal leaves the leases: the pause holds the scope", at: T0 + 1100*ms, op: 'r', held: 2},
			{name: "paused", at: T0 + 1110*ms, op: 'a', id: "h", code: paused, why: reasonPause, wait: 990 * ms, held: 2},
			{name: "Resume drops every lease", at: T0 + 1200*ms, op: 'z', held: 0},
			{name: "a cost of 2 after Resume", at: T0 + 1200*ms, op: 'a', id: "h", cost: 2, code: admitted, held: 2},
		})
	})
	t.Run("classes", func(t *testing.T) {
		run(t, []Limit{conc}, []step{
			{name: "interactive work asks: its reserve is kept", at: T0, op: 'a', id: "i", class: Interactive, code: admitted, held: 1},
			{name: "background work leaves one of 2: it has none while one is held", at: T0 + 10*ms, op: 'a', id: "b", code: limited, why: reasonInFlight, wait: concurrentPoll, held: 1},
			{name: "the interactive lease released", at: T0 + 20*ms, op: 'l', id: "i", held: 0},
			{name: "background work takes the one it may", at: T0 + 30*ms, op: 'a', id: "b", code: admitted, held: 1},
			{name: "interactive work takes the reserve", at: T0 + 40*ms, op: 'a', id: "j", class: Interactive, code: admitted, held: 2},
		})
	})
	t.Run("beside a bucket", func(t *testing.T) {
		run(t, []Limit{PerSecond(4, 1), conc}, []step{
			{name: "both admit", at: T0, op: 'a', id: "a", code: admitted, held: 1},
			{name: "the bucket's slot 250 ms ahead is reserved, with its lease", at: T0 + 10*ms, op: 'a', id: "b", code: admitted, wait: 240 * ms, held: 2},
			{name: "full: ask again at the bucket's next slot, nothing reserved", at: T0 + 20*ms, op: 'a', id: "c", code: limited, why: reasonInFlight, wait: 480 * ms, held: 2},
			{name: "a released", at: T0 + 30*ms, op: 'l', id: "a", held: 1},
			{name: "the bucket's slot, with the freed lease", at: T0 + 40*ms, op: 'a', id: "c", code: admitted, wait: 460 * ms, held: 2},
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
		p := params{hold: 400_000, maxPause: 3600_000, reserve: 300, lend: 2_000_000}
		var cl limitSpec
		for _, l := range ls {
			p.limits = append(p.limits, specOf(l))
			if specOf(l).concurrent {
				cl = specOf(l)
			}
		}
		type held struct{ from, until, cost int64 }
		r := rand.New(rand.NewPCG(5, uint64(len(ls))))
		admits, releases, full := 0, 0, 0
		for run := range 40 {
			var m scopeState
			m.normalize(p, 0)
			now := int64(1_000_000_000_000)
			ledger := map[string]*held{}
			var ids []string
			for i := range 400 {
				now += int64(r.IntN(60_000))
				switch x := r.IntN(20); {
				case x == 0:
					m.refuse(p, now, refusal{pause: 200 + int64(r.IntN(800)), hinted: r.IntN(2) == 0, prec: 1000})
				case x < 8 && len(ids) > 0:
					j := r.IntN(len(ids))
					if h := ledger[ids[j]]; h.until > now {
						h.until = now
					}
					m.release(p, now, ids[j])
					ids = append(ids[:j], ids[j+1:]...)
					releases++
				default:
					id := strconv.Itoa(i)
					cost := int64(1 + r.IntN(4)/3)
					d := m.admitLease(p, now, cost, classes[r.IntN(2)], id)
					if d.reason == reasonInFlight {
						full++
					}
					if d.code != admitted {
						continue
					}
					admits++
					ledger[id] = &held{from: now, until: now + d.wait + cl.per, cost: cost}
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

// TestConcurrentState: a concurrency limit with every slot taken defers a
// task (holding disabled) as in flight, State and Pauses show the scope
// waiting for that reason, a release lets the next task in, and Resume
// drops every lease.
func TestConcurrentState(t *testing.T) {
	c, rdb := newMini(t)
	ctx := context.Background()
	s := Scope{Provider: "acme", Account: "a"}
	l := Concurrent(2)
	g := newWith(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"acme": {l}}, Tuning: Tuning{MaxHold: -1}},
		hooks{now: func() time.Time { return c.now }})
	defer g.Close()
	k := scopeKeys("qgtest", s)
	var grants []grant
	for i := range 2 {
		gr, err := g.admission(ctx, s, k, 1, false, Background, false)
		if err != nil || gr.lease == "" {
			t.Fatalf("admission %d: %+v, %v; want admitted with a lease", i, gr, err)
		}
		grants = append(grants, gr)
	}
	_, err := g.admission(ctx, s, k, 1, false, Background, false)
	var d *Deferral
	if !errors.As(err, &d) || d.Reason != ReasonInFlight {
		t.Fatalf("a third with both slots taken: %v, want a deferral in flight", err)
	}
	st, err := g.State(ctx, s)
	if err != nil || st.Reason != ReasonInFlight || st.Until.IsZero() {
		t.Fatalf("State = %+v, %v; want waiting in flight", st, err)
	}
	ps, err := g.Pauses(ctx)
	if err != nil || len(ps) != 1 || ps[0].Scope != s || ps[0].Reason != ReasonInFlight {
		t.Fatalf("Pauses = %+v, %v; want the scope, in flight", ps, err)
	}
	g.release(ctx, s, k, grants[0])
	gr, err := g.admission(ctx, s, k, 1, false, Background, false)
	if err != nil || gr.lease == "" {
		t.Fatalf("after a release: %+v, %v; want admitted", gr, err)
	}
	if !c.mr.Exists(limitKey(k, 0, l)) {
		t.Fatal("no leases in Redis")
	}
	if err := g.Resume(ctx, s); err != nil {
		t.Fatal(err)
	}
	if c.mr.Exists(limitKey(k, 0, l)) {
		t.Fatal("Resume left the leases")
	}
	for i := range 2 {
		if _, err := g.admission(ctx, s, k, 1, false, Background, false); err != nil {
			t.Fatalf("after Resume, admission %d: %v", i, err)
		}
	}
	// A lease never released comes back a lease's life later.
	c.advance(DefaultLease)
	if _, err := g.admission(ctx, s, k, 1, false, Background, false); err != nil {
		t.Fatalf("a lease's life later: %v, want admitted", err)
	}
}

// TestConcurrentPanics: Concurrent refuses a limit of no request in
// flight, with a message that says why.
func TestConcurrentPanics(t *testing.T) {
	for _, n := range []int{0, -3} {
		func() {
			defer func() {
				if r, _ := recover().(string); r == "" {
					t.Errorf("Concurrent(%d) did not panic", n)
				}
			}()
			Concurrent(n)
		}()
	}
	if got := Concurrent(5).String(); got != "5 in flight" {
		t.Errorf("String = %q", got)
	}
}
