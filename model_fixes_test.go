package quotagate

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/quotagate/quotagate/internal/model"
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
	g := newWith(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"ups": {PerSecond(1, 1)}}}, hooks{now: func() time.Time { return c.Now }})
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
		if c.MR.Exists(key) {
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
	for _, key := range c.MR.Keys() {
		if ttl := c.MR.TTL(key); ttl <= 0 || ttl > time.Duration(model.LearnTTL)*time.Microsecond+model.ExpiryMargin {
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
	if c.MR.Exists(scopeKeys("qgtest", s).Budget) {
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
