package quotagate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"
)

// oddScopes are scopes whose fields hold every character the key encoding
// escapes, and escapes themselves.
var oddScopes = []Scope{
	{Provider: "ups", Account: "acct:{1}%"},
	{Provider: "a:b", Account: "c"}, {Provider: "a", Account: "b:c"},
	{Provider: "a%3Ab", Account: "%7D"}, {Provider: "{a}", Account: ""},
	{Provider: "a}:{b", Account: "%%::{{}}"}, {Provider: "ups", Account: Fingerprint("secret")},
	{Provider: "ups"},
}

// TestScopeOfPauseKey: the decoder inverts scopeKeys for every scope, and
// refuses every key scopeKeys cannot have written.
func TestScopeOfPauseKey(t *testing.T) {
	for _, prefix := range []string{"quotagate", "q:x", "q%7B", "*"} {
		for _, s := range oddScopes {
			key := scopeKeys(prefix, s).Pause
			if got, ok := scopeOfPauseKey(prefix, key); !ok || got != s {
				t.Errorf("prefix %q: %q decodes to %+v, %v; want %+v", prefix, key, got, ok, s)
			}
		}
	}
	for _, key := range []string{
		"quotagate:{ups:acct}:tat",     // another kind
		"other:{ups:acct}:pause",       // another prefix
		"quotagate:x:{ups:acct}:pause", // a longer prefix
		"quotagate:{ups:a:b}:pause",    // a raw ':' in a field
		"quotagate:{ups}:pause",        // no field separator
		"quotagate:{ups:a%3ab}:pause",  // lowercase escape: scopeKeys writes %3A
		"quotagate:{ups:a%41}:pause",   // an escape scopeKeys never writes
		"quotagate:{ups:a%}:pause",     // a raw '%'
		"quotagate:{ups:a}b}:pause",    // a raw '}'
		"quotagate:{:acct}:pause",      // empty provider: invalid scope
		"quotagate:{ups:a\x01}:pause",  // control character: invalid scope
		"quotagate:{ups:acct}:pause:x", // trailing text
		"quotagate:{ups:acct}",         // no kind
		"quotagate:ups:acct:pause",     // no tag
		"",
	} {
		if s, ok := scopeOfPauseKey("quotagate", key); ok {
			t.Errorf("%q decodes to %+v; want refused", key, s)
		}
	}
}

// FuzzScopeOfPauseKey checks both directions: every valid scope comes back
// from its key, and every key that decodes is the key of what it decodes to.
func FuzzScopeOfPauseKey(f *testing.F) {
	for _, s := range oddScopes {
		f.Add(s.Provider, s.Account, scopeKeys("quotagate", s).Pause)
	}
	f.Add("ups", "a", "quotagate:{ups:a%3a}:pause")
	f.Fuzz(func(t *testing.T, provider, account, key string) {
		s := Scope{Provider: provider, Account: account}
		if s.Validate() == nil {
			if got, ok := scopeOfPauseKey("quotagate", scopeKeys("quotagate", s).Pause); !ok || got != s {
				t.Errorf("%+v round-trips to %+v, %v", s, got, ok)
			}
		}
		if got, ok := scopeOfPauseKey("quotagate", key); ok {
			if back := scopeKeys("quotagate", got).Pause; back != key {
				t.Errorf("%q decodes to %+v whose key is %q", key, got, back)
			}
		}
	})
}

// TestPausesList pauses a few scopes (with keys quotagate never writes
// around them) and lists them on both backends.
func TestPausesList(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			// Glob characters in the prefix must be matched literally.
			prefix := e.Prefix + ":g?[x]*"
			g := New(e.Rdb, Config{Prefix: prefix})
			defer g.Close()
			want := map[Scope]time.Duration{}
			for i, s := range oddScopes {
				d := time.Duration(i+2) * time.Minute
				if _, err := g.Pause(ctx, s, d); err != nil {
					t.Fatal(err)
				}
				want[s] = d
			}
			// Not pauses of this gate: another prefix that the unescaped
			// pattern would match, other kinds, a foreign key in the
			// pattern, a malformed and an expired record.
			other := New(e.Rdb, Config{Prefix: e.Prefix + ":gA[x]*"})
			if _, err := other.Pause(ctx, Scope{Provider: "elsewhere"}, time.Minute); err != nil {
				t.Fatal(err)
			}
			limited := Scope{Provider: "limited"}
			if err := e.Rdb.Set(ctx, scopeKeys(prefix, limited).Tat, "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			now := redistest.Time(t, e.Rdb)
			for key, v := range map[string]any{
				prefix + ":{foreign}:pause":                             now.Add(time.Hour).UnixMilli(),
				scopeKeys(prefix, Scope{Provider: "bad"}).Pause:         "soon",
				scopeKeys(prefix, Scope{Provider: "past"}).Pause:        now.Add(-time.Second).UnixMilli(),
				scopeKeys(prefix, Scope{Provider: "far"}).Pause:         now.Add(13 * time.Hour).UnixMilli(), // beyond MaxPause
				scopeKeys(prefix, Scope{Provider: "wrong"}).Pause + "x": now.Add(time.Hour).UnixMilli(),
			} {
				if err := e.Rdb.Set(ctx, key, v, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}

			ps, err := g.Pauses(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != len(want) {
				t.Errorf("listed %d pauses, want %d: %v", len(ps), len(want), ps)
			}
			for i, p := range ps {
				d, ok := want[p.Scope]
				if !ok {
					t.Errorf("listed %v, which was not paused", p)
					continue
				}
				if p.Remaining <= 0 || p.Remaining > d {
					t.Errorf("%v: remaining %v, want within (0, %v]", p.Scope, p.Remaining, d)
				}
				if p.Until.Sub(now) > d+time.Second || !p.Until.After(now) {
					t.Errorf("%v: until %v, Redis TIME %v, pause %v", p.Scope, p.Until, now, d)
				}
				if i > 0 {
					prev := ps[i-1].Scope
					if prev.Provider > p.Scope.Provider || prev.Provider == p.Scope.Provider && prev.Account >= p.Scope.Account {
						t.Errorf("not sorted: %v before %v", prev, p.Scope)
					}
				}
			}

			// Resumed scopes leave the list.
			for s := range want {
				if err := g.Resume(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			if ps, err := g.Pauses(ctx); err != nil || len(ps) != 0 {
				t.Errorf("after resume: %v, %v; want none", ps, err)
			}
		})
	}
}

// TestPausesLimitBacklog: a paused scope with a limit shows how far its
// limit is spent, as State reads it.
func TestPausesLimitBacklog(t *testing.T) {
	c, rdb := newMini(t)
	_ = c
	ctx := context.Background()
	s := Scope{Provider: "acme", Account: "a:1"}
	g := New(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"acme": {PerSecond(10, 1)}}})
	defer g.Close()
	if _, err := g.Pause(ctx, s, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The pause emptied the bucket at its instant; an admission during
	// the pause spends nothing.
	if err := g.admit(ctx, s, 1, false); err == nil {
		t.Fatal("admitted during a pause")
	}
	ps, err := g.Pauses(ctx)
	if err != nil || len(ps) != 1 {
		t.Fatalf("Pauses = %v, %v", ps, err)
	}
	p := ps[0]
	if p.Scope != s || p.Remaining != 5*time.Second {
		t.Errorf("listed %+v, want %v paused for 5s", p, s)
	}
	// The TAT is the pause's instant + interval × burst.
	if p.LimitBacklog != 100*time.Millisecond {
		t.Errorf("limit backlog %v, want 100ms (the bucket emptied by the pause)", p.LimitBacklog)
	}
	st, err := g.State(ctx, s)
	if err != nil || st != p {
		t.Errorf("State = %+v, %v; the listing read %+v", st, err, p)
	}
}

// TestPausesTruncated: past its bound the scan stops and says so, with the
// scopes it found.
func TestPausesTruncated(t *testing.T) {
	_, rdb := newMini(t)
	ctx := context.Background()
	g := New(rdb, Config{Prefix: "qgtest"})
	defer g.Close()
	for i := range 5 {
		if _, err := g.Pause(ctx, Scope{Provider: "p", Account: fmt.Sprint(i)}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	scopes, err := g.pausedScopes(ctx, 3)
	if !errors.Is(err, ErrTruncated) || len(scopes) != 3 {
		t.Errorf("pausedScopes(3) = %v, %v; want 3 scopes and ErrTruncated", scopes, err)
	}
	scopes, err = g.pausedScopes(ctx, 5)
	if err != nil || len(scopes) != 5 {
		t.Errorf("pausedScopes(5) = %v, %v; want all 5", scopes, err)
	}
}

// TestPausesStoreDown: a listing that cannot reach Redis fails, naming it.
func TestPausesStoreDown(t *testing.T) {
	g := New(refusingRedis(t), Config{Prefix: "qgtest", StoreTimeout: 5 * time.Second})
	defer g.Close()
	ps, err := g.Pauses(context.Background())
	if err == nil || ps != nil || !strings.Contains(err.Error(), "list pauses") {
		t.Errorf("Pauses = %v, %v; want the connection error", ps, err)
	}
}

// TestResumeLiftsLimitsConfiguredElsewhere: Resume, on a gate that
// configures nothing, deletes the state of every limit another gate
// configured for the scope, whatever its index or kind: here six, two of
// each kind beyond the first.
func TestResumeLiftsLimitsConfiguredElsewhere(t *testing.T) {
	c, rdb := newMini(t)
	s := Scope{Provider: "acme", Account: "a"}
	six := []Limit{PerSecond(100, 100), FixedWindow(100, time.Minute), SlidingWindow(100, time.Minute),
		PerSecond(200, 100), FixedWindow(200, time.Minute), SlidingWindow(200, time.Minute)}
	configured := newWith(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"acme": six}, Tuning: Tuning{MaxHold: -1}},
		hooks{now: func() time.Time { return c.Now }})
	defer configured.Close()
	bare := newWith(rdb, Config{Prefix: "qgtest"}, hooks{now: func() time.Time { return c.Now }})
	defer bare.Close()
	ctx := context.Background()
	if err := configured.admit(ctx, s, 1, false); err != nil {
		t.Fatalf("first admission: %v", err)
	}
	k := scopeKeys("qgtest", s)
	for i, l := range six {
		if !c.MR.Exists(limitKey(k, i, l)) {
			t.Fatalf("limit %d (%v): no state recorded at %s", i, l, limitKey(k, i, l))
		}
	}
	if err := bare.Resume(ctx, s); err != nil {
		t.Fatal(err)
	}
	for i, l := range six {
		if key := limitKey(k, i, l); c.MR.Exists(key) {
			t.Errorf("limit %d (%v): %s left after Resume", i, l, key)
		}
	}
}

// TestTooManyLimitsIsArchived: a scope with more limits than a scope may
// have (Resume could not find them all) is refused with ErrLimits.
func TestTooManyLimitsIsArchived(t *testing.T) {
	c, rdb := newMini(t)
	s := Scope{Provider: "acme", Account: "a"}
	many := make([]Limit, schema.MaxLimits+1)
	for i := range many {
		many[i] = PerSecond(100+i, 10)
	}
	g := newWith(rdb, Config{Prefix: "qgtest", Limits: map[string][]Limit{"acme": many}}, hooks{now: func() time.Time { return c.Now }})
	defer g.Close()
	err := g.checkCost(s, NewTask("poll", nil, s))
	if !errors.Is(err, ErrLimits) {
		t.Fatalf("checkCost with %d limits = %v, want ErrLimits", len(many), err)
	}
}

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
	if _, ok := g.record(ctx, s, k, 30*time.Second, 0, grant{}); !ok {
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

// TestPauseStringOpen: an open scope's Pause says so. (Before: "paused for
// 0s (until 0001-01-01…)".)
func TestPauseStringOpen(t *testing.T) {
	if got := (Pause{Scope: Scope{Provider: "ups", Account: "a"}}).String(); got != "ups/a is open" {
		t.Errorf("String() = %q", got)
	}
}
