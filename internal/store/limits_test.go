package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
)

// The step tables of limits a scope is configured with: fixed windows,
// and several limits stacked.

// step is one admission of a table: advance the miniredis clock, then admit
// with req; code and wait are what the script must answer.
type step struct {
	advance time.Duration
	req     AdmitRequest
	code    int64
	wait    time.Duration
}

func runSteps(t *testing.T, c *miniClock, st *Store, k schema.Keys, steps []step) {
	t.Helper()
	for i, s := range steps {
		c.Advance(s.advance)
		if s.req.Cost == 0 {
			s.req.Cost = 1
		}
		a, err := st.Admit(context.Background(), k, s.req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if a.Code != s.code || waitOf(a) != s.wait {
			t.Errorf("step %d (t0+%v): code %d wait %v; want code %d wait %v", i, c.Now.Sub(t0), a.Code, waitOf(a), s.code, s.wait)
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
	fw := func(l model.LimitSpec) AdmitRequest { return admitRequest(0, hold, l) }
	t.Run("unaligned", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", "ups")
		r := fw(fixedWindow(3, time.Second))
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
		k := scopeKeys("qgtest", "ups")
		r := fw(fixedWindow(5, time.Second))
		runSteps(t, c, st, k, []step{
			{0, r, model.Admitted, 0},
			{300 * ms, r, model.Limited, 750 * ms}, // 4 left, but the head is over: the next window
			{500 * ms, r, model.Admitted, 250 * ms},
		})
	})
	t.Run("aligned by a refusal", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", "ups")
		// A refusal "try again in 1 second": the provider's window resets at
		// t0+1s, read to the second.
		if _, err := st.Pause(context.Background(), k, time.Second, Refusal{Hinted: true, Precision: time.Second}); err != nil {
			t.Fatal(err)
		}
		r := fw(fixedWindow(2, 5*time.Second))
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
	k := scopeKeys("qgtest", "ups")
	r := admitRequest(0, 250*ms, perSecond(10, 2), fixedWindow(3, time.Second))
	runSteps(t, c, st, k, []step{
		{0, r, model.Admitted, 0}, {0, r, model.Admitted, 0}, // the GCRA burst
		{0, r, model.Admitted, 100 * ms}, // GCRA's next slot, inside the window's head
		{0, r, model.Limited, 1050 * ms}, // the window is full: its next one, beyond hold
	})
	// Nothing of the refused admission was spent: the TAT is the third
	// admission's, and the window holds 3.
	tatUS := t0.Add(300 * ms).UnixMicro()
	if got, _ := c.MR.Get(k.Limit(0, schema.GCRA)); got != strconv.FormatInt(tatUS, 10) {
		t.Errorf("TAT = %s, want %d", got, tatUS)
	}
	if got := c.MR.HGet(k.Limit(1, schema.Fixed), strconv.FormatInt(t0.UnixMicro(), 10)); got != "3" {
		t.Errorf("window count = %q, want 3", got)
	}
}
