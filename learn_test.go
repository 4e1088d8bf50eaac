package quotagate

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
)

// step is one admission of a table: advance the miniredis clock, then admit
// with req; code and wait are what the script must answer.
type step struct {
	advance time.Duration
	req     admitRequest
	code    int64
	wait    time.Duration
}

func runSteps(t *testing.T, c *miniClock, st *store, k schema.Keys, steps []step) {
	t.Helper()
	for i, s := range steps {
		c.Advance(s.advance)
		if s.req.cost == 0 {
			s.req.cost = 1
		}
		a, err := st.admit(context.Background(), k, s.req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if a.code != s.code || a.wait != s.wait {
			t.Errorf("step %d (t0+%v): code %d wait %v; want code %d wait %v", i, c.Now.Sub(t0), a.code, a.wait, s.code, s.wait)
		}
	}
}

// TestAdmitFixedWindow: a fixed window spends its rate at once. Unaligned,
// the first admission starts the windows, a period and windowSettle apart,
// and a window admits only in its head (min(hold, period/2)); aligned to a reset a refusal taught, it
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
			{0, r, model.Admitted, 0}, {0, r, model.Admitted, 0}, {0, r, model.Admitted, 0}, // the window's rate at once
			{0, r, model.Limited, 1050 * ms},        // full: the next window, a period and windowSettle on
			{0, r, model.Limited, 1050 * ms},        // fixed windows open at once: no spread
			{800 * ms, r, model.Admitted, 250 * ms}, // past the head: a slot of the next window, within hold
			{250 * ms, r, model.Admitted, 0},        // the next window: 2 left
			{0, r, model.Admitted, 0},               //
			{0, r, model.Limited, 1050 * ms},        // full again
			{300 * ms, r, model.Limited, 750 * ms},  // a new window's head is over at +250ms
		})
	})
	t.Run("unaligned: only the head", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		r := fw(FixedWindow(5, time.Second))
		runSteps(t, c, st, k, []step{
			{0, r, model.Admitted, 0},
			{300 * ms, r, model.Limited, 750 * ms}, // 4 left, but the head is over: the next window
			{500 * ms, r, model.Admitted, 250 * ms},
		})
	})
	t.Run("aligned by a refusal", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		// A refusal "try again in 1 second": the provider's window resets at
		// t0+1s, read to the second.
		if _, _, _, err := st.pause(context.Background(), k, time.Second, refusalFacts{hinted: true, precision: time.Second}); err != nil {
			t.Fatal(err)
		}
		r := fw(FixedWindow(2, 5*time.Second))
		runSteps(t, c, st, k, []step{
			{0, r, model.Paused, time.Second},
			{time.Second, r, model.Admitted, 0}, // the window t0+1s..t0+6s
			{3 * time.Second, r, model.Admitted, 0},
			{0, r, model.Limited, 2 * time.Second}, // full: the next window, at t0+6s
			{1500 * ms, r, model.Limited, 500 * ms},
			{400 * ms, r, model.Admitted, 100 * ms}, // a slot at t0+6s, reserved within hold
			{100 * ms, r, model.Admitted, 0},
			{4 * time.Second, r, model.Limited, time.Second}, // t0+10s: in the window's last second (the reset's precision)
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
		{0, r, model.Admitted, 0}, {0, r, model.Admitted, 0}, // the GCRA burst
		{0, r, model.Admitted, 100 * ms}, // GCRA's next slot, inside the window's head
		{0, r, model.Limited, 1050 * ms}, // the window is full: its next one, beyond hold
	})
	// Nothing of the refused admission was spent: the TAT is the third
	// admission's, and the window holds 3.
	tatUS := t0.Add(300 * ms).UnixMicro()
	if got, _ := c.MR.Get(limitKey(k, 0, PerSecond(10, 2))); got != strconv.FormatInt(tatUS, 10) {
		t.Errorf("TAT = %s, want %d", got, tatUS)
	}
	if got := c.MR.HGet(limitKey(k, 1, FixedWindow(3, time.Second)), strconv.FormatInt(t0.UnixMicro(), 10)); got != "3" {
		t.Errorf("window count = %q, want 3", got)
	}
	if limitKey(k, 0, PerSecond(1, 1)) != k.Tat || limitKey(k, 1, FixedWindow(3, time.Second)) != k.Base+"win2" {
		t.Errorf("limit keys %q %q", limitKey(k, 0, PerSecond(1, 1)), limitKey(k, 1, FixedWindow(3, time.Second)))
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
