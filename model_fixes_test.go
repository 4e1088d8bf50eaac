package quotagate

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// The correctness items of the model issue, one test each; every one
// failed on the admission before the model.

// TestResumeLiftsEverything: Resume lifts what holds a scope back, not only
// its pause: a refusal with a GCRA limit emptied the bucket and deferred
// tasks took slots of the line; after Resume the scope admits at once.
// (Before, Resume deleted the pause key only, and the scope stayed limited
// until the old deadline.)
func TestResumeLiftsEverything(t *testing.T) {
	c, rdb := newMini(t)
	s := Scope{Provider: "ups", Account: "a"}
	g := newWith(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"ups": {PerSecond(1, 1)}}}, hooks{now: func() time.Time { return c.now }})
	defer g.Close()
	ctx := context.Background()
	k := scopeKeys("qgtest", s)
	if _, ok := g.record(ctx, s, k, 30*time.Second, 0); !ok {
		t.Fatal("refusal not recorded")
	}
	for range 3 {
		if err := g.admit(ctx, s, 1, false); err == nil {
			t.Fatal("admitted while paused")
		}
	}
	if err := g.Resume(ctx, s); err != nil {
		t.Fatal(err)
	}
	st, err := g.State(ctx, s)
	if err != nil || !st.Until.IsZero() {
		t.Fatalf("State after Resume = %v, %v; want open", st, err)
	}
	if err := g.admit(ctx, s, 1, false); err != nil {
		t.Errorf("after Resume: %v, want admitted at once", err)
	}
	for _, key := range []string{k.Pause, k.Line} {
		if c.mr.Exists(key) {
			t.Errorf("%s left after Resume", key)
		}
	}
}

// TestSpentBudgetIsVisible: a budget the provider said is spent holds the
// scope until its reset, and State, Pauses and the deferral say so
// (ReasonBudget); Resume lifts it. (Before, such a scope deferred tasks as
// "paused by the provider" while State and Pauses showed it open, and Resume
// could not lift it.)
func TestSpentBudgetIsVisible(t *testing.T) {
	_, rdb := newMini(t)
	s := Scope{Provider: "gh", Account: "a"}
	g := New(rdb, Config{Prefix: "qgtest"})
	defer g.Close()
	ctx := context.Background()
	h := http.Header{"X-Ratelimit-Limit": {"60"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"60"}}
	if err := g.Observe(ctx, s, &http.Response{StatusCode: http.StatusOK, Header: h}); err != nil {
		t.Fatal(err)
	}
	st, err := g.State(ctx, s)
	if err != nil || st.Reason != ReasonBudget || st.Remaining != time.Minute || st.Budget == nil || st.Budget.Remaining != 0 {
		t.Fatalf("State = %+v, %v; want waiting a minute for the budget's reset", st, err)
	}
	ps, err := g.Pauses(ctx)
	if err != nil || len(ps) != 1 || ps[0].Scope != s || ps[0].Reason != ReasonBudget {
		t.Errorf("Pauses = %v, %v; want the scope, waiting for its budget", ps, err)
	}
	var d *Deferral
	if err := g.admit(ctx, s, 1, false); !errors.As(err, &d) || d.Reason != ReasonBudget {
		t.Errorf("admit = %v, want a deferral for the spent budget", err)
	}
	if err := g.Resume(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st, err := g.State(ctx, s); err != nil || !st.Until.IsZero() || st.Budget != nil {
		t.Errorf("State after Resume = %+v, %v; want open, no budget", st, err)
	}
}

// TestUnhintedRefusalKeepsExpiry: what a scope learned always expires, also
// after an unhinted refusal following its first contact. (Before, that
// refusal left the learned hash without a TTL.)
func TestUnhintedRefusalKeepsExpiry(t *testing.T) {
	c, rdb := newMini(t)
	s := Scope{Provider: "acme", Account: "a"}
	g := New(rdb, Config{Prefix: "qgtest", Tuning: Tuning{OpenCache: -1}})
	defer g.Close()
	ctx := context.Background()
	if err := g.admit(ctx, s, 1, false); err != nil {
		t.Fatal(err)
	}
	k := scopeKeys("qgtest", s)
	if _, ok := g.record(ctx, s, k, 0, 0); !ok {
		t.Fatal("refusal not recorded")
	}
	for _, key := range c.mr.Keys() {
		if ttl := c.mr.TTL(key); ttl <= 0 || ttl > time.Duration(learnTTL)*time.Microsecond+expiryMargin {
			t.Errorf("%s: TTL %v, want within the learned state's life", key, ttl)
		}
	}
}

// TestProbeAfterVerdict: a first contact that is not admitted is no probe:
// it marks nothing, so its peers do not wait for an answer that never
// comes. (Before, the probe was marked before the verdict.)
func TestProbeAfterVerdict(t *testing.T) {
	c, rdb := newMini(t)
	s := Scope{Provider: "acme", Account: "a"}
	g := New(rdb, Config{Prefix: "qgtest"})
	defer g.Close()
	g.Transport(nil) // responses are observed: first contacts probe
	ctx := context.Background()
	if _, err := g.Pause(ctx, s, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.admit(ctx, s, 1, false); err == nil {
		t.Fatal("admitted while paused")
	}
	if c.mr.Exists(scopeKeys("qgtest", s).Budget) {
		t.Error("a deferred first contact marked a probe")
	}
}

// TestCostBeyondCapacityIsArchived: a task whose cost no limit can ever
// admit is archived at once, with ErrCost, instead of deferred forever.
func TestCostBeyondCapacityIsArchived(t *testing.T) {
	_, rdb := newMini(t)
	s := Scope{Provider: "acme", Account: "a"}
	for _, l := range []Limit{FixedWindow(3, time.Second), PerSecond(2, 2), SlidingWindow(5, time.Second)} {
		g := New(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"acme": {l}}, Cost: func(*asynq.Task) int { return 6 }})
		ran := false
		h := g.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran = true; return nil }))
		err := h.ProcessTask(context.Background(), NewTask("poll", nil, s))
		if !errors.Is(err, ErrCost) || !errors.Is(err, asynq.SkipRetry) || ran {
			t.Errorf("%v: ProcessTask = %v (handler ran %v); want archived with ErrCost", l, err, ran)
		}
		g.Close()
	}
}

// TestModelNeverAdmitsOverALimit: under stacked limits (a bucket and two
// fixed windows whose windows start with the scope's first admission), any
// sequence of admissions keeps every limit: no window of any length period
// holds more than its rate, and the bucket's conformance holds between any
// two admissions. (Before, the search for the earliest instant returned
// after a few rounds without a final check.)
func TestModelNeverAdmitsOverALimit(t *testing.T) {
	ls := []Limit{PerSecond(10, 3), FixedWindow(4, 2*time.Second), FixedWindow(7, 5*time.Second)}
	p := params{hold: 250_000, maxPause: 3600_000}
	for _, l := range ls {
		p.limits = append(p.limits, specOf(l))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 50 {
		var m scopeState
		m.normalize(p, 0)
		now := int64(1_000_000_000_000)
		type adm struct{ at, cost int64 }
		var got []adm
		for range 400 {
			now += int64(r.IntN(300_000))
			cost := int64(1 + r.IntN(2))
			if d := m.admit(p, now, cost, Background); d.code == admitted {
				got = append(got, adm{now + d.wait, cost})
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

// TestPauseStringOpen: an open scope's Pause says so. (Before: "paused for
// 0s (until 0001-01-01…)".)
func TestPauseStringOpen(t *testing.T) {
	if got := (Pause{Scope: Scope{Provider: "ups", Account: "a"}}).String(); got != "ups/a is open" {
		t.Errorf("String() = %q", got)
	}
}

// TestHoldersCapInAll: waiters of many scopes take at most half the tasks
// inside a process's middleware, whatever the number of scopes pausing at
// once; one scope's holders are capped by its own places only. (Before,
// holders were capped per scope only: with many scopes pausing briefly,
// every worker held.)
func TestHoldersCapInAll(t *testing.T) {
	var h holders
	now := time.Unix(1000, 0)
	const inside = 8
	held := 0
	for i := range 100 {
		k := string(rune('a'+i%26)) + "x"
		h.enter(k, now)
		if h.join(k, inside, now, false) {
			held++
		}
	}
	if held != inside/holdShare {
		t.Errorf("%d waiting across scopes with %d tasks inside, want %d", held, inside, inside/holdShare)
	}
	if !h.join("zz", inside, now, true) || h.total != inside/holdShare+1 {
		t.Errorf("a last attempt did not join whatever the count: total %d", h.total)
	}
	var one holders
	for range 10 {
		one.acquire("k", Background, 3)
	}
	if one.n["k"] != 3 {
		t.Errorf("one scope holds %d, want its cap 3", one.n["k"])
	}
	one.release("k", Background)
	if one.n["k"] != 2 {
		t.Errorf("after a release: scope %d", one.n["k"])
	}
	// Interactive work has places of its own, and counts as the scope's in
	// the share of all: background holders of its scope never keep it out.
	var mixed holders
	for range 12 {
		mixed.acquire("k", Background, 12)
	}
	if !mixed.acquire("k", Interactive, 12) || mixed.ni["k"] != 1 || mixed.n["k"] != 13 {
		t.Errorf("interactive with 12 background holders of its scope: ni %d n %d, want a place", mixed.ni["k"], mixed.n["k"])
	}
	if mixed.acquire("k", Background, 12) {
		t.Error("a 13th background holder took a place: interactive places are not background's")
	}
	mixed.release("k", Interactive)
	if mixed.ni["k"] != 0 || mixed.n["k"] != 12 {
		t.Errorf("after the interactive release: ni %d n %d", mixed.ni["k"], mixed.n["k"])
	}
}

// TestHoldersFairShare: one scope's waiters of every kind may take every
// task inside the middleware only while no task of another scope entered
// within fairFor; then they keep to one in holdShare, and fairFor after
// the other scope's last task the scope alone has every worker again.
func TestHoldersFairShare(t *testing.T) {
	now := time.Unix(1000, 0)
	const inside = 20
	fill := func(h *holders, at time.Time) int {
		n := 0
		for n < 2*inside && h.join("acme", inside, at, false) {
			n++
		}
		return n
	}
	var alone holders
	alone.enter("acme", now)
	if n := fill(&alone, now); n != 2*inside {
		t.Errorf("one scope alone: %d waiters of %d tasks inside, want every one", n, inside)
	}
	var shared holders
	shared.enter("swift", now)
	shared.enter("acme", now.Add(time.Second))
	at := now.Add(2 * time.Second)
	if n := fill(&shared, at); n != inside/holdShare {
		t.Errorf("beside swift: acme has %d waiters of %d tasks inside, want %d", n, inside, inside/holdShare)
	}
	// swift is still the other scope however many acme tasks enter since.
	for range 50 {
		shared.enter("acme", at)
	}
	if shared.join("acme", inside, at, false) {
		t.Error("acme joined past its share after more acme tasks entered")
	}
	if !shared.join("swift", inside, at, true) {
		t.Error("a last attempt did not join")
	}
	shared.leave("swift")
	later := now.Add(fairFor)
	if !shared.join("acme", inside, later, false) {
		t.Errorf("fairFor after swift's last task acme is alone, and may wait")
	}
	// A task without a scope counts as another scope's.
	var none holders
	none.enter("", now)
	none.enter("acme", now)
	if n := fill(&none, now); n != inside/holdShare {
		t.Errorf("beside a task without a scope: %d waiters, want %d", n, inside/holdShare)
	}
}

// TestSilentNotesPruned: the gate's notes of scopes whose provider
// advertises nothing are pruned of the old ones (accounts are unbounded).
func TestSilentNotesPruned(t *testing.T) {
	_, rdb := newMini(t)
	now := t0
	g := newWith(rdb, Config{Prefix: "qgtest"}, hooks{now: func() time.Time { return now }})
	defer g.Close()
	for i := range silentPrune - 1 {
		g.rememberSilent(string(rune(i)))
	}
	now = now.Add(silentFor)
	g.rememberSilent("last") // the silentPrune-th note prunes
	n := 0
	g.silent.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d notes kept, want only the fresh one", n)
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
		p := params{hold: 250_000, maxPause: 3600_000, probe: 2_500_000 * int64(i%2), answer: 1_250_000}
		for _, l := range ls {
			p.limits = append(p.limits, specOf(l))
		}
		var m scopeState
		m.normalize(p, 0)
		now := int64(1_000_000_000_000)
		for _, e := range diffEvents(r, 120, false, i%8 < 4) {
			switch e.kind {
			case 'a':
				m.report(p, now, e.counts)
				m.admit(p, now, e.cost, Background)
			case 'r':
				before := m.pause.untilMs
				inForce := m.pause.inForce(p, now)
				d, _ := m.refuse(p, now, refusal{pause: e.pause, hinted: e.hinted, prec: e.prec, operator: e.operator})
				if inForce && d < before {
					t.Fatalf("seq %d: the deadline moved earlier: %d → %d", i, before, d)
				}
			case 'o':
				m.observe(p, now, e.obs)
			case 'z':
				m.resume(p)
			case 't':
				now += e.advance.Microseconds()
			}
		}
		horizon := max(m.pause.untilMs*1000, m.budget.reset, m.budget.probeAt+p.probe, m.learn.probeAt+p.answer, m.fall.probeAt+p.answer, m.line.next, now)
		window := m.learn.window
		for _, l := range p.limits {
			window = max(window, l.per*l.n) // a bucket's whole burst, or a window
		}
		at := horizon + window + 1
		d := m.admit(p, at, 1, Background)
		switch {
		case d.code == admitted:
		case d.code == limited && d.wait <= window: // a window's last second (a reset read to the second), or a bucket's next token
		default:
			t.Fatalf("seq %d (limits %v): at %d, past every deadline and a window (%d): %+v; state %+v", i, ls, at, window, d, canonical(m))
		}
		// That admission may have been a probe, never answered: its
		// timeout and a window later, the scope asks again.
		at += p.probe + p.answer + window + 1
		if d := m.admit(p, at, 1, Background); d.code == paused || d.code == limited && d.wait > window {
			t.Fatalf("seq %d (limits %v): an unanswered probe holds the scope: %+v; state %+v", i, ls, d, canonical(m))
		}
	}
}

// TestOneLogLinePerPause: of the refusals of one pause, the one that moved
// the deadline logs at INFO; those of requests already on their way log at
// DEBUG, with a count.
func TestOneLogLinePerPause(t *testing.T) {
	_, rdb := newMini(t)
	var logs testLogBuffer
	g := New(rdb, Config{Prefix: "qgtest", Logger: logs.logger()})
	defer g.Close()
	s := Scope{Provider: "acme", Account: "a"}
	k := scopeKeys("qgtest", s)
	for range 4 {
		if _, ok := g.record(context.Background(), s, k, 10*time.Second, 0); !ok {
			t.Fatal("refusal not recorded")
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=INFO"); n != 1 {
		t.Errorf("%d INFO lines for one pause, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "absorbed=3") {
		t.Errorf("no DEBUG line counting the 3 absorbed refusals:\n%s", out)
	}
}

// TestSlotAheadKeepsTheWindowSpent: a fixed window spent whole, its
// windows realigned by a reset header since (its counts under two
// starts), and an admission a moment before the next window that takes a
// slot in it: the admissions after it still find the window of now
// spent. (Before, spending the slot dropped the counts older than one
// period before the slot's window, which the window of now still counted:
// 19 requests went at once into the provider's closed window on every
// configured fixed-window cell with budget headers of the matrix, and
// fixed/reset-ms stalled.)
func TestSlotAheadKeepsTheWindowSpent(t *testing.T) {
	p := params{limits: []limitSpec{{fixed: true, per: 5_000_000, n: 40}}, hold: 1_500_000, maxPause: 43_200_000}
	const t0 = 1_700_000_000_000_000
	var s scopeState
	for i := range int64(40) {
		at := t0 + 6_000 + i*1_000
		if i >= 20 { // after a response's reset header: the provider's window ends at t0 + 5 s, read to the second
			at += 20_000
		}
		if i == 20 {
			s.learn.align(at, t0+5_040_000, 1_000_000)
		}
		if d := s.admit(p, at, 1, Background); d.code != admitted || d.wait != 0 {
			t.Fatalf("admission %d of the first window: %+v", i, d)
		}
	}
	now := int64(t0 + 4_020_000)
	if d := s.admit(p, now, 1, Background); d.code != admitted || now+d.wait != t0+5_040_000 {
		t.Fatalf("a moment before the next window: %+v, want its first slot", d)
	}
	for i := range int64(19) {
		if d := s.admit(p, now+1_000*(i+1), 1, Background); d.code == admitted && d.wait == 0 {
			t.Fatalf("admission %d after the slot ahead went at once, into the spent window", i)
		}
	}
}

// TestAlignedWindowLeavesItsPredecessor: a configured window of 40 per 5 s
// spends 14 at the head of its unaligned window, then a response's reset
// (in milliseconds) aligns the windows 25 ms after the origin's; the
// aligned window that opens at that reset counts none of the 14, which the
// provider counted in the window before it. (Before, it counted them as an
// overlapping predecessor's: the first aligned window got 26 of its 40 and
// fixed/reset-ms took 25 s on the model, 30 s measured, for 20.) Nor does
// a window realigned a millisecond earlier count its predecessor.
func TestAlignedWindowLeavesItsPredecessor(t *testing.T) {
	p := params{limits: []limitSpec{{fixed: true, per: 5_000_000, n: 40}}, hold: 1_500_000, maxPause: 43_200_000}
	const t0 = 1_700_000_000_000_000
	var s scopeState
	for i := range int64(40) {
		at := t0 + 40_000 + i*2_000
		if i == 14 { // the first answer: the window ends 5.025 s after t0, read to the millisecond
			s.observe(p, at, observation{remaining: 39, reset: t0 + 5_025_000 - at, limit: 40, prec: 1_000})
		}
		if d := s.admit(p, at, 1, Background); d.code != admitted || d.wait != 0 {
			t.Fatalf("admission %d of the first window: %+v", i, d)
		}
	}
	if d := s.admit(p, t0+200_000, 1, Background); d.code == admitted && d.wait == 0 {
		t.Fatalf("a 41st admission in the first window: %+v", d)
	}
	for i := range int64(40) {
		if d := s.admit(p, t0+5_025_000+i*1_000, 1, Background); d.code != admitted || d.wait != 0 {
			t.Fatalf("admission %d of the aligned window: %+v", i, d)
		}
	}
	// The next reading of the reset is a millisecond earlier (its jitter):
	// the window it aligns overlaps the one recorded only by the tail where
	// that one admits nothing, and counts none of its 40.
	s.observe(p, t0+5_100_000, observation{remaining: 0, reset: 4_924_000, limit: 40, prec: 1_000})
	for i := range int64(40) {
		if d := s.admit(p, t0+10_024_000+i*1_000, 1, Background); d.code != admitted || d.wait != 0 {
			t.Fatalf("admission %d of the window realigned a millisecond earlier: %+v", i, d)
		}
	}
}
