package quotagate

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// step is one admission of a table: advance the miniredis clock, then admit
// with req; code and wait are what the script must answer.
type step struct {
	advance time.Duration
	req     admitRequest
	code    int64
	wait    time.Duration
}

func runSteps(t *testing.T, c *miniClock, st *store, k keys, steps []step) {
	t.Helper()
	for i, s := range steps {
		c.advance(s.advance)
		if s.req.cost == 0 {
			s.req.cost = 1
		}
		a, err := st.admit(context.Background(), k, s.req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if a.code != s.code || a.wait != s.wait {
			t.Errorf("step %d (t0+%v): code %d wait %v; want code %d wait %v", i, c.now.Sub(t0), a.code, a.wait, s.code, s.wait)
		}
	}
}

// TestAdmitFixedWindow: a fixed window spends its rate at once. Unaligned,
// the first admission starts the windows and a window admits only in its
// head (min(hold, period/2)); aligned to a reset a refusal taught, it
// admits until a second (the reset's precision) before the window ends.
func TestAdmitFixedWindow(t *testing.T) {
	const ms = time.Millisecond
	hold := 250 * ms
	fw := func(l Limit) admitRequest { return admitRequest{limits: []Limit{l}, hold: hold} }
	t.Run("unaligned", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		r := fw(FixedWindow(3, time.Second))
		runSteps(t, c, st, k, []step{
			{0, r, admitted, 0}, {0, r, admitted, 0}, {0, r, admitted, 0}, // the window's rate at once
			{0, r, limited, time.Second},      // full: the next window
			{0, r, limited, time.Second},      // fixed windows open at once: no spread
			{800 * ms, r, admitted, 200 * ms}, // past the head: a slot of the next window, within hold
			{200 * ms, r, admitted, 0},        // the next window: 2 left
			{0, r, admitted, 0},               //
			{0, r, limited, time.Second},      // full again
			{300 * ms, r, limited, 700 * ms},  // a new window's head is over at +250ms
		})
	})
	t.Run("unaligned: only the head", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		r := fw(FixedWindow(5, time.Second))
		runSteps(t, c, st, k, []step{
			{0, r, admitted, 0},
			{300 * ms, r, limited, 700 * ms}, // 4 left, but the head is over: the next window
			{500 * ms, r, admitted, 200 * ms},
		})
	})
	t.Run("aligned by a refusal", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		// A refusal "try again in 1 second": the provider's window resets at
		// t0+1s, read to the second.
		if _, _, err := st.pause(context.Background(), k, time.Second, refusalFacts{hinted: true, precision: time.Second}); err != nil {
			t.Fatal(err)
		}
		r := fw(FixedWindow(2, 5*time.Second))
		runSteps(t, c, st, k, []step{
			{0, r, paused, time.Second},
			{time.Second, r, admitted, 0}, // the window t0+1s..t0+6s
			{3 * time.Second, r, admitted, 0},
			{0, r, limited, 2 * time.Second}, // full: the next window, at t0+6s
			{1500 * ms, r, limited, 500 * ms},
			{400 * ms, r, admitted, 100 * ms}, // a slot at t0+6s, reserved within hold
			{100 * ms, r, admitted, 0},
			{4 * time.Second, r, limited, time.Second}, // t0+10s: in the window's last second (the reset's precision)
		})
	})
}

// TestAdmitStackedLimits: several limits are checked and spent all or
// nothing, at the earliest instant every one of them admits.
func TestAdmitStackedLimits(t *testing.T) {
	const ms = time.Millisecond
	c, rdb := newMini(t)
	st := testStore(rdb, "qgtest")
	k := scopeKeys("qgtest", Scope{Provider: "ups"})
	r := admitRequest{limits: []Limit{PerSecond(10, 2), FixedWindow(3, time.Second)}, hold: 250 * ms}
	runSteps(t, c, st, k, []step{
		{0, r, admitted, 0}, {0, r, admitted, 0}, // the GCRA burst
		{0, r, admitted, 100 * ms},   // GCRA's next slot, inside the window's head
		{0, r, limited, time.Second}, // the window is full: its next one, beyond hold
	})
	// Nothing of the refused admission was spent: the TAT is the third
	// admission's, and the window holds 3.
	tatUS := t0.Add(300 * ms).UnixMicro()
	if got, _ := c.mr.Get(k.limit(0, PerSecond(10, 2))); got != strconv.FormatInt(tatUS, 10) {
		t.Errorf("TAT = %s, want %d", got, tatUS)
	}
	if got := c.mr.HGet(k.limit(1, FixedWindow(3, time.Second)), strconv.FormatInt(t0.UnixMicro(), 10)); got != "3" {
		t.Errorf("window count = %q, want 3", got)
	}
	if k.limit(0, PerSecond(1, 1)) != k.tat || k.limit(1, FixedWindow(3, time.Second)) != k.base+"win2" {
		t.Errorf("limit keys %q %q", k.limit(0, PerSecond(1, 1)), k.limit(1, FixedWindow(3, time.Second)))
	}
}

// TestLearnFromRefusals: with nothing configured and nothing advertised,
// what a scope got accepted between its reopening and the next refusal,
// over the window the refusal's hint implies, becomes its limit: a fixed
// window aligned to that refusal's reset. Refusals of requests already in
// flight teach nothing; a refusal under the learned limit takes a quarter
// off, a window spent whole adds one, never above what was seen accepted.
func TestLearnFromRefusals(t *testing.T) {
	const ms = time.Millisecond
	ctx := context.Background()
	c, rdb := newMini(t)
	st := testStore(rdb, "qgtest")
	k := scopeKeys("qgtest", Scope{Provider: "ups"})
	hinted := refusalFacts{hinted: true, precision: time.Second}
	learned := func() map[string]string {
		m, _ := rdb.HGetAll(ctx, k.learn).Result()
		return m
	}

	// First contact: the refusal only starts the count, at its reopening.
	st.pause(ctx, k, time.Second, hinted)
	if m := learned(); m["since"] != strconv.FormatInt(t0.Add(time.Second).UnixMilli(), 10) || m["n"] != "" {
		t.Fatalf("after the first refusal: %v", m)
	}
	open := admitRequest{hold: 250 * ms}
	c.advance(time.Second) // reopened
	open.successes = 5
	runSteps(t, c, st, k, []step{{0, open, admitted, 0}})
	// A refusal 100ms after the reopening, "1 second": 8 accepted
	// (5 reported earlier, 3 now) over a window rounded to 1s.
	c.advance(100 * ms)
	st.pause(ctx, k, time.Second, refusalFacts{hinted: true, precision: time.Second, successes: 3})
	deadline := t0.Add(2100 * ms).UnixMilli()
	m := learned()
	if m["n"] != "8" || m["w"] != "1000" || m["b"] != strconv.FormatInt(deadline, 10) || m["ok"] != "0" {
		t.Fatalf("after a cycle: %v; want n 8 per w 1000 from %d", m, deadline)
	}
	// A refusal of a request in flight teaches nothing; successes reported
	// until the deadline (requests in flight at the refusal) are the closed
	// window's: 2 more.
	st.pause(ctx, k, time.Second, hinted)
	late := open
	late.successes = 2
	runSteps(t, c, st, k, []step{{0, late, paused, time.Second}})
	if m := learned(); m["n"] != "10" || m["best"] != "10" || m["ok"] != "0" {
		t.Errorf("after a refusal and successes during the pause: %v, want n 10, best 10, ok 0", m)
	}
	// The learned limit: 10 at the reset, then the next window.
	steps := []step{{time.Second, open, admitted, 0}}
	for range 9 {
		steps = append(steps, step{0, open, admitted, 0})
	}
	steps = append(steps, step{0, open, limited, time.Second}, step{800 * ms, open, admitted, 200 * ms})
	runSteps(t, c, st, k, steps)
	// A refusal under the learned limit takes a quarter off.
	c.advance(200 * ms)
	st.pause(ctx, k, time.Second, hinted)
	if m := learned(); m["n"] != "7" || m["best"] != "9" {
		t.Fatalf("after a refusal under the learned limit: %v, want n 7, best 9 (below the 10 refused)", m)
	}
	// Each window spent whole without a refusal adds one, up to best.
	win := []step{{time.Second, open, admitted, 0}}
	for range 6 {
		win = append(win, step{0, open, admitted, 0})
	}
	win = append(win, step{0, open, limited, time.Second})
	runSteps(t, c, st, k, win)
	runSteps(t, c, st, k, []step{{time.Second, open, admitted, 0}})
	if m := learned(); m["n"] != "8" {
		t.Errorf("after a window spent whole: n = %s, want 8", m["n"])
	}
	// Manual pauses teach nothing.
	c.advance(time.Second)
	st.pause(ctx, k, time.Minute, refusalFacts{})
	if m := learned(); m["n"] != "8" {
		t.Errorf("a manual pause changed n to %s", m["n"])
	}
}

// TestAdvertisedBudget: a budget read from responses is spent by
// admissions, counting those admitted after the request answered (still on
// their way to the provider); spent, the scope waits for
// the reset, then starts whole; a first contact sends one probe while the
// others wait for what it brings back.
func TestAdvertisedBudget(t *testing.T) {
	ctx := context.Background()
	open := admitRequest{hold: 250 * time.Millisecond}
	t.Run("spent, reset, refilled", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		if err := st.observe(ctx, k, observation{remaining: 3, reset: 5 * time.Second, limit: 10, precision: time.Second, seq: -1}); err != nil {
			t.Fatal(err)
		}
		runSteps(t, c, st, k, []step{
			{0, open, admitted, 0}, {0, open, admitted, 0}, {0, open, admitted, 0},
			{0, open, paused, 5 * time.Second}, // spent: the scope waits for the reset
		})
		// The answer to the first (sequence 1): "2 left" — but the second and
		// third are still on their way: 0 left to spend.
		st.observe(ctx, k, observation{remaining: 2, reset: 5 * time.Second, limit: 10, precision: time.Second, seq: 1})
		if m, _ := rdb.HGetAll(ctx, k.budget).Result(); m["r"] != "0" || m["q"] != "3" {
			t.Errorf("budget %v; want r 0 after 3 admissions", m)
		}
		runSteps(t, c, st, k, []step{
			{5 * time.Second, open, admitted, 0}, // the reset: whole again (10)
		})
		if m, _ := rdb.HGetAll(ctx, k.budget).Result(); m["r"] != "9" || m["u"] != "" || m["qr"] != "3" {
			t.Errorf("budget after the reset %v; want r 9, no reset known, refilled after sequence 3", m)
		}
		// A late answer from the window that is over changes nothing; the
		// answer to the first admission after the reset speaks for this one.
		st.observe(ctx, k, observation{remaining: 0, reset: time.Second, limit: 10, precision: time.Second, seq: 3})
		if m, _ := rdb.HGetAll(ctx, k.budget).Result(); m["r"] != "9" {
			t.Errorf("a late answer of the last window set the budget to %v", m)
		}
		st.observe(ctx, k, observation{remaining: 9, reset: 5 * time.Second, limit: 10, precision: time.Second, seq: 4})
		if m, _ := rdb.HGetAll(ctx, k.budget).Result(); m["r"] != "9" || m["u"] == "" {
			t.Errorf("budget %v; want r 9 until a new reset", m)
		}
		a, _ := st.admit(ctx, k, admitRequest{cost: 1})
		if a.cacheable || a.reopen != 10 {
			t.Errorf("admission %+v: a scope with a budget must not be cached, and reopens with 10", a)
		}
	})
	t.Run("first contact", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		probe := admitRequest{hold: 250 * time.Millisecond, probe: 2 * time.Second}
		runSteps(t, c, st, k, []step{
			{0, probe, admitted, 0}, // the probe
			{100 * time.Millisecond, probe, paused, 50 * time.Millisecond}, // the others wait for its answer, looking every 50ms
		})
		st.observe(ctx, k, observation{remaining: 9, reset: time.Second, limit: 10, precision: time.Second, seq: 1})
		runSteps(t, c, st, k, []step{{0, probe, admitted, 0}})
		if m, _ := rdb.HGetAll(ctx, k.budget).Result(); m["r"] != "8" {
			t.Errorf("budget %v, want r 8", m)
		}
		// Spent, then the reset: one request asks what the new window
		// holds, the others wait for its answer.
		st.observe(ctx, k, observation{remaining: 0, reset: time.Second, limit: 10, precision: time.Second, seq: 2})
		runSteps(t, c, st, k, []step{
			{0, probe, paused, time.Second},
			{time.Second, probe, admitted, 0}, // the probe of the new window
			{0, probe, paused, 50 * time.Millisecond},
		})
		st.observe(ctx, k, observation{remaining: 7, reset: time.Second, limit: 10, precision: time.Second, seq: 3})
		runSteps(t, c, st, k, []step{{0, probe, admitted, 0}})
		if m, _ := rdb.HGetAll(ctx, k.budget).Result(); m["r"] != "6" {
			t.Errorf("budget after the new window's answer %v, want r 6", m)
		}
	})
	t.Run("a provider that advertises nothing", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		probe := admitRequest{hold: 250 * time.Millisecond, probe: 2 * time.Second}
		runSteps(t, c, st, k, []step{{0, probe, admitted, 0}})
		st.observe(ctx, k, observation{remaining: -1, seq: 0})
		a, _ := st.admit(ctx, k, probe)
		if a.code != admitted || !a.cacheable {
			t.Errorf("after an answer without a budget: %+v; want admitted, cacheable", a)
		}
		// A probe never answered (no Transport on this path) stops
		// blocking after its time.
		k2 := scopeKeys("qgtest", Scope{Provider: "fedex"})
		runSteps(t, c, st, k2, []step{{0, probe, admitted, 0}, {2 * time.Second, probe, admitted, 0}, {0, probe, admitted, 0}})
	})
}
