package quotagate

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
)

// TestFailoverMemoryBound: the memory keeps at most maxRemembered pauses,
// evicting the earliest-ending first, and refuses one that would end
// before all of them; an ended pause is forgotten.
func TestFailoverMemoryBound(t *testing.T) {
	var m memory
	now := time.Unix(1_000, 0)
	for i := range maxRemembered {
		m.note("k"+strconv.Itoa(i), 10_000+int64(i), 0, now, false) // k0 ends first
	}
	if m.size() != maxRemembered {
		t.Fatalf("size %d, want %d", m.size(), maxRemembered)
	}
	m.note("early", 5_000, 0, now, false)
	if _, ok := m.get("early", now); ok || m.size() != maxRemembered {
		t.Errorf("a pause ending before every remembered one was remembered (size %d)", m.size())
	}
	m.note("late", 99_000, 0, now, false)
	if _, ok := m.get("k0", now); ok {
		t.Error("the earliest-ending pause was not evicted")
	}
	if _, ok := m.get("late", now); !ok || m.size() != maxRemembered {
		t.Errorf("the later pause was not remembered in its place (size %d)", m.size())
	}
	// A later deadline or end wins; an earlier one changes nothing.
	m.note("late", 50_000, 0, now, false)
	if e, _ := m.get("late", now); e.untilMs != 99_000 || !e.end.Equal(now.Add(99*time.Second)) {
		t.Errorf("an earlier deadline moved the remembered one: %+v", e)
	}
	if _, ok := m.get("k1", now.Add(11*time.Second)); ok {
		t.Error("a pause that has ended is still remembered")
	}
}

// TestFailoverLostFrom: the step table of lostFrom.
func TestFailoverLostFrom(t *testing.T) {
	recv := time.Unix(1_000, 0)
	e := remembered{untilMs: 2_000_000, seenMs: 1_990_000, end: recv.Add(10 * time.Second)}
	ans := func(nowMs, untilMs int64) admission { // an answer of Redis TIME nowMs, paused until untilMs (0: open)
		a := admission{code: model.Admitted, nowMicros: nowMs * 1000}
		if untilMs > 0 {
			a.code, a.reason, a.wait, a.untilDeadline = model.Paused, model.ReasonPause, time.Duration(untilMs-nowMs)*time.Millisecond, untilMs
		}
		return a
	}
	slack := 250 * time.Millisecond
	for _, c := range []struct {
		name string
		a    admission
		lost bool
	}{
		{"the same deadline, same clock", ans(1_990_000, 2_000_000), false},
		{"a later deadline", ans(1_990_000, 2_005_000), false},
		{"absent", ans(1_990_000, 0), true},
		{"earlier", ans(1_990_000, 1_999_000), true},
		{"the same deadline on a clock 100 ms ahead (within slack)", ans(1_990_100, 2_000_000), false},
		{"the same deadline on a clock 3 s ahead", ans(1_993_000, 2_000_000), true},
		{"the same deadline on a clock 3 s behind", ans(1_987_000, 2_000_000), false},
		{"absent, on a clock 11 s ahead (past the deadline)", ans(2_001_000, 0), true},
	} {
		r := recv
		if got := e.lostFrom(c.a, r, slack, true); got != c.lost {
			t.Errorf("%s: lostFrom = %v, want %v", c.name, got, c.lost)
		}
		// Within one epoch (no failover seen) only the deadlines count.
		if got, want := e.lostFrom(c.a, r, slack, false), e.untilMs*1000 > c.a.nowMicros+c.a.wait.Microseconds()*int64(c.a.code); got != want {
			t.Errorf("%s, same clock: lostFrom = %v, want %v", c.name, got, want)
		}
	}
}

// TestFailoverAnnouncement: what the channel's payloads say.
func TestFailoverAnnouncement(t *testing.T) {
	for _, c := range []struct {
		in   string
		want announcement
	}{
		{"qg:{ups:a}:pause", announcement{key: "qg:{ups:a}:pause"}},
		{"qg:{ups:a}:pause 1700000000123 1700000000000", announcement{key: "qg:{ups:a}:pause", untilMs: 1700000000123, nowMs: 1700000000000}},
		{"qg:{ups:a b}:pause resumed", announcement{key: "qg:{ups:a b}:pause", resumed: true}},
		{"qg:{ups:a}:pause x y", announcement{key: "qg:{ups:a}:pause"}},
		{"odd", announcement{key: "odd"}},
	} {
		if got := parseAnnouncement(c.in); got != c.want {
			t.Errorf("parseAnnouncement(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

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
	g.mem.changed()
	deferred(s, "a clock 5 s ahead")
	is(k, until+5_000, "on a clock 5 s ahead")
	c.MR.SetTime(c.Now)
	if n := g.mem.reasserted.Load(); n != 2 {
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
	if _, ok := g.mem.get(k.Pause, c.Now); ok {
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
