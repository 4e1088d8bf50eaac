package quotagate

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/schema"
)

// TestFailoverReassertOnAdmission (miniredis): a pause the store lost is
// re-asserted by the admission that finds it missing, which defers its
// task; a later deadline is left alone; a master whose clock runs ahead
// gets the remaining time the gate measured; a Resume is never undone;
// while the store fails, a scope the gate knows paused is deferred.
func TestFailoverReassertOnAdmission(t *testing.T) {
	c, rdb := newMini(t)
	ctx := context.Background()
	now := func() time.Time { return c.Now }
	g := newWith(rdb, Config{Prefix: "qg", Tuning: Tuning{OpenCache: -1, MaxHold: -1}}, hooks{now: now})
	defer g.Close()
	pause := func(account string) (Scope, schema.Keys, int64) {
		t.Helper()
		s := Scope{Provider: "ups", Account: account}
		p, err := g.Pause(ctx, s, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return s, scopeKeys("qg", s), p.Until.UnixMilli()
	}
	deferred := func(s Scope, what string) {
		t.Helper()
		var d *Deferral
		if err := g.admit(ctx, s, 1, false); !errors.As(err, &d) || d.Reason != ReasonPaused {
			t.Fatalf("%s: admit = %v, want a deferral as paused", what, err)
		}
	}
	is := func(k schema.Keys, want int64, what string) {
		t.Helper()
		if got, _ := c.MR.Get(k.Pause); got != strconv.FormatInt(want, 10) {
			t.Errorf("%s: the pause is %q, want %d", what, got, want)
		}
	}

	s, k, until := pause("lost")
	c.MR.Del(k.Pause) // lost
	deferred(s, "the pause lost")
	is(k, until, "re-asserted")
	if ttl := c.MR.TTL(k.Pause); ttl <= 0 || ttl > 30*time.Second {
		t.Errorf("the re-asserted pause expires in %v, want at its deadline", ttl)
	}
	c.MR.Set(k.Pause, strconv.FormatInt(until+5_000, 10)) // a later deadline stays
	deferred(s, "a later deadline")
	is(k, until+5_000, "a later deadline in force")

	// The store's clock 5 s ahead of the one that set the pause, after the
	// gate saw the store change (an epoch): the gate restores the
	// remaining time it measured. Within the epoch the same jump is the
	// store's clock, and changes nothing.
	s, k, until = pause("skew")
	c.MR.SetTime(c.Now.Add(5 * time.Second))
	if err := g.admit(ctx, s, 1, false); err == nil {
		t.Fatal("admitted during the pause")
	}
	is(k, until, "a clock 5 s ahead, no failover seen")
	g.mem.Changed()
	deferred(s, "a clock 5 s ahead")
	is(k, until+5_000, "on a clock 5 s ahead")
	c.MR.SetTime(c.Now)
	if n := g.mem.Reasserted(); n != 2 {
		t.Errorf("%d re-assertions moved a deadline, want 2", n)
	}

	// Resume by another gate: the pause is not re-asserted.
	s, k, _ = pause("resumed")
	other := newWith(rdb, Config{Prefix: "qg", Tuning: Tuning{OpenCache: -1}}, hooks{now: now})
	defer other.Close()
	if err := other.Resume(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := g.admit(ctx, s, 1, false); err != nil {
		t.Fatalf("after Resume: admit = %v, want admitted", err)
	}
	if c.MR.Exists(k.Pause) {
		t.Error("the resumed pause was re-asserted")
	}
	if _, ok := g.mem.Get(k.Pause, c.Now); ok {
		t.Error("the resumed pause is still remembered")
	}

	// The store fails: the known pause defers, an unknown scope fails open.
	s, _, _ = pause("down")
	c.MR.Close()
	deferred(s, "the store down")
	if err := g.admit(ctx, Scope{Provider: "ups", Account: "unknown"}, 1, false); err != nil {
		t.Errorf("the store down, an unknown scope: admit = %v, want failed open", err)
	}
}
