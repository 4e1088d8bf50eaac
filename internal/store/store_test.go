package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/feed"
	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/schema"

	"github.com/redis/go-redis/v9"
)

var unixInteger = regexp.MustCompile(`^[0-9]+$`)

// TestStorePauseRecord checks the record Pause leaves in Redis on both
// backends: an integer Unix-ms deadline whose key expires at that instant.
func TestStorePauseRecord(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			st := testStore(e.Rdb, e.Prefix)
			k := scopeKeys(e.Prefix, "ups", "acct-1")

			r, err := st.Pause(ctx, k, 30*time.Second, exactPause)
			until, rem := r.Until, r.Remaining
			if err != nil {
				t.Fatal(err)
			}
			raw, err := e.Rdb.Get(ctx, k.Pause).Result()
			if err != nil {
				t.Fatalf("GET %s: %v", k.Pause, err)
			}
			if !unixInteger.MatchString(raw) {
				t.Fatalf("stored deadline %q is not an integer", raw)
			}
			if raw != strconv.FormatInt(until.UnixMilli(), 10) {
				t.Errorf("stored deadline %s, Pause returned %d", raw, until.UnixMilli())
			}
			if rem <= 0 || rem > 30*time.Second {
				t.Errorf("remaining %v, want in (0, 30s]", rem)
			}
			if e.Real() {
				redistest.CheckExpireAt(t, e.Rdb, k.Pause, until)
				pttl, err := e.Rdb.PTTL(ctx, k.Pause).Result()
				if err != nil {
					t.Fatal(err)
				}
				if pttl <= 0 || pttl > rem+time.Millisecond { // +1ms: TestPauseExpiresAtDeadline
					t.Errorf("PTTL = %v, want in (0, %v]", pttl, rem)
				}
				return
			}
			if rem != 30*time.Second || !until.Equal(t0.Add(30*time.Second)) {
				t.Errorf("pause = %v, %v; want %v, 30s", until, rem, t0.Add(30*time.Second))
			}
			if ttl := e.Clock.MR.TTL(k.Pause); ttl != rem {
				t.Errorf("TTL = %v, want the remaining %v", ttl, rem)
			}
		})
	}
}

// TestStorePauseRealExpiry lets a real pause expire: the key is gone and the
// scope reads open, and Remaining only ever went down meanwhile.
func TestStorePauseRealExpiry(t *testing.T) {
	_, rdb, prefix := realRedis(t)
	ctx := context.Background()
	st := testStore(rdb, prefix)
	k := scopeKeys(prefix, "ups")
	r, err := st.Pause(ctx, k, model.MinPause, exactPause)
	rem := r.Remaining
	if err != nil {
		t.Fatal(err)
	}
	last := rem
	for deadline := time.Now().Add(30 * time.Second); ; {
		p, err := state(ctx, st, k)
		r := p.Remaining()
		if err != nil {
			t.Fatal(err)
		}
		if r < 0 || r > last {
			t.Fatalf("remaining went from %v to %v", last, r)
		}
		last = r
		if r == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a %v pause still has %v left after 30s", model.MinPause, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The record expires at the deadline itself (PX, not a rounded EX):
	// wait for Redis to drop it, then it must be gone for good.
	for deadline := time.Now().Add(30 * time.Second); ; {
		n, err := rdb.Exists(ctx, k.Pause).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pause key outlived its deadline by 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPauseExpiresAtDeadline: the key expires at the stored deadline itself
// ("stored with expiry at the same instant"). A relative PX computed from
// TIME would land 1 ms off whenever a millisecond boundary passes between
// TIME and SET, rarely per call, so the test makes many; pauseScript uses
// PEXPIREAT at the deadline.
func TestPauseExpiresAtDeadline(t *testing.T) {
	_, rdb, prefix := realRedis(t)
	st := testStore(rdb, prefix)
	ctx := context.Background()
	var off []string
	for i := range 3000 {
		k := scopeKeys(prefix, "expiry", strconv.Itoa(i))
		r, err := st.Pause(ctx, k, model.MinPause, exactPause)
		until := r.Until
		if err != nil {
			t.Fatal(err)
		}
		exp, err := rdb.PExpireTime(ctx, k.Pause).Result()
		if err != nil {
			t.Fatal(err)
		}
		if d := exp.Milliseconds() - until.UnixMilli(); d != 0 {
			off = append(off, fmt.Sprintf("%+d ms", d))
		}
	}
	if len(off) > 0 {
		t.Errorf("%d of 3000 pause keys expire off their deadline: %v", len(off), off[:min(len(off), 10)])
	}
}

// TestStoreExpiredRecordIsOpen: a deadline in the past reads open even when
// its key has not been expired yet (lazy expiry, a replica), and the next
// pause replaces it.
func TestStoreExpiredRecordIsOpen(t *testing.T) {
	c, rdb := newMini(t)
	ctx := context.Background()
	st := testStore(rdb, "qgtest")
	k := scopeKeys("qgtest", "ups")
	if _, err := st.Pause(ctx, k, 5*time.Second, exactPause); err != nil {
		t.Fatal(err)
	}
	c.MR.SetTime(t0.Add(6 * time.Second)) // TIME moves, the TTL does not
	if !c.MR.Exists(k.Pause) {
		t.Fatal("setup: the key should linger")
	}
	p, err := state(ctx, st, k)
	if err != nil || p.Remaining() != 0 || !p.Admits().IsZero() {
		t.Errorf("remaining = %+v, %v; want open", p, err)
	}
	a, err := st.Admit(ctx, k, admitRequest(1, 0))
	if err != nil || a.Code != model.Admitted {
		t.Errorf("admit = %+v, %v; want admitted", a, err)
	}
	r, err := st.Pause(ctx, k, 2*time.Second, exactPause)
	until, rem := r.Until, r.Remaining
	if err != nil || rem != 2*time.Second || !until.Equal(t0.Add(8*time.Second)) {
		t.Errorf("pause over an expired record = %v, %v, %v; want %v, 2s", until, rem, err, t0.Add(8*time.Second))
	}
}

// TestStoreMalformedRecord: anything but an integer deadline within
// MaxPause reads open, admits, and is overwritten by the next pause.
func TestStoreMalformedRecord(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			st := testStore(e.Rdb, e.Prefix)
			now := redistest.Time(t, e.Rdb)
			for i, v := range []string{
				"abc", "", "1.5", "-5", "1e15", " 1", "1 ", "0x10",
				strings.Repeat("9", 40),
				strconv.FormatInt(now.Add(st.maxPause+time.Hour).UnixMilli(), 10), // beyond MaxPause
				strconv.FormatInt(now.Add(-time.Minute).UnixMilli(), 10),          // in the past
				"0",
			} {
				k := scopeKeys(e.Prefix, "malformed", strconv.Itoa(i))
				if err := e.Rdb.Set(ctx, k.Pause, v, 0).Err(); err != nil {
					t.Fatal(err)
				}
				p, err := state(ctx, st, k)
				if err != nil || p.Remaining() != 0 || !p.Admits().IsZero() {
					t.Errorf("record %q: remaining = %+v, %v; want open", v, p, err)
				}
				a, err := st.Admit(ctx, k, admitRequest(1, 0))
				if err != nil || a.Code != model.Admitted {
					t.Errorf("record %q: admit = %+v, %v; want admitted", v, a, err)
				}
				r, err := st.Pause(ctx, k, 10*time.Second, exactPause)
				until, rem := r.Until, r.Remaining
				if err != nil {
					t.Errorf("record %q: pause: %v", v, err)
					continue
				}
				if rem <= 0 || rem > 10*time.Second {
					t.Errorf("record %q: pause remaining %v, want the new 10s pause", v, rem)
				}
				raw, _ := e.Rdb.Get(ctx, k.Pause).Result()
				if raw != strconv.FormatInt(until.UnixMilli(), 10) {
					t.Errorf("record %q: after pause the record is %q, want %d", v, raw, until.UnixMilli())
				}
				if ttl, _ := e.Rdb.PTTL(ctx, k.Pause).Result(); ttl <= 0 || ttl > 10*time.Second+time.Millisecond { // +1ms: TestPauseExpiresAtDeadline
					t.Errorf("record %q: after pause PTTL %v, want in (0, 10s]", v, ttl)
				}
			}
		})
	}
}

// TestStoreWrongType: a hash or a list at the pause key is a malformed
// record like any other: it reads as open, admission admits, and the next
// Pause replaces it with a deadline (never an error, never a panic).
func TestStoreWrongType(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			st := testStore(e.Rdb, e.Prefix)
			hk := scopeKeys(e.Prefix, "wrongtype", "hash")
			lk := scopeKeys(e.Prefix, "wrongtype", "list")
			if err := e.Rdb.HSet(ctx, hk.Pause, "deadline", "1").Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.Rdb.LPush(ctx, lk.Pause, "1").Err(); err != nil {
				t.Fatal(err)
			}
			for _, k := range []schema.Keys{hk, lk} {
				if p, err := state(ctx, st, k); err != nil || p.Remaining() != 0 {
					t.Errorf("%s: remaining %v, %v; want open", k.Pause, p.Remaining(), err)
				}
				if a, err := st.Admit(ctx, k, admitRequest(1, 0)); err != nil || a.Code != model.Admitted {
					t.Errorf("%s: admit %+v, %v; want admitted", k.Pause, a, err)
				}
				if r, err := st.Pause(ctx, k, 10*time.Second, exactPause); err != nil || r.Remaining != 10*time.Second {
					t.Errorf("%s: pause %v, %v; want 10s", k.Pause, r.Remaining, err)
				}
				if typ := e.Rdb.Type(ctx, k.Pause).Val(); typ != "string" {
					t.Errorf("%s: type %q after Pause, want a string deadline", k.Pause, typ)
				}
			}
		})
	}
}

// admitStep is one admission of a step table: advance the miniredis clock,
// then admit cost units.
type admitStep struct {
	advance time.Duration
	cost    int
	code    int64
	wait    time.Duration
}

func runAdmitSteps(t *testing.T, c *miniClock, st *Store, k schema.Keys, ls []model.LimitSpec, hold time.Duration, steps []admitStep) {
	t.Helper()
	for i, s := range steps {
		c.Advance(s.advance)
		a, err := st.Admit(context.Background(), k, admitRequest(s.cost, hold, ls...))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if a.Code != s.code || waitOf(a) != s.wait {
			t.Errorf("step %d (t0+%v, cost %d): code %d wait %v; want code %d wait %v",
				i, c.Now.Sub(t0), s.cost, a.Code, waitOf(a), s.code, s.wait)
		}
		if !nowOf(a).Equal(c.Now) {
			t.Errorf("step %d: now %v, want Redis TIME %v", i, nowOf(a), c.Now)
		}
	}
}

// TestAdmitLimit is the GCRA step table with a fixed Redis clock: the burst
// at once, then reservations one interval apart up to the hold, then
// "limited" with the slots of the reopening line one interval apart.
func TestAdmitLimit(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name   string
		limits []model.LimitSpec
		hold   time.Duration
		steps  []admitStep
	}{
		{"burst 3, hold 250ms", []model.LimitSpec{perSecond(10, 3)}, 250 * ms, []admitStep{
			{0, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 100 * ms},
			{0, 1, model.Admitted, 200 * ms},
			{0, 1, model.Limited, 300 * ms}, // the line: one interval apart
			{0, 1, model.Limited, 400 * ms},
			{0, 1, model.Limited, 500 * ms},
			{300 * ms, 1, model.Admitted, 0}, // the first slot of the line
			{0, 1, model.Admitted, 100 * ms},
			{0, 1, model.Admitted, 200 * ms},
			{0, 1, model.Limited, 300 * ms}, // the line resumes at its next free slot (t0+600ms)
			{time.Second, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 100 * ms},
		}},
		{"burst 1, no hold", []model.LimitSpec{perSecond(10, 1)}, 0, []admitStep{
			{0, 1, model.Admitted, 0},
			{0, 1, model.Limited, 100 * ms},
			{0, 1, model.Limited, 200 * ms},
			{50 * ms, 1, model.Limited, 250 * ms},
			{50 * ms, 1, model.Admitted, 0},
			{0, 1, model.Limited, 300 * ms}, // line slots t0+100..t0+300 were handed out
		}},
		{"burst below 1 means 1", []model.LimitSpec{model.Spec(schema.GCRA, 10, time.Second, -3)}, 0, []admitStep{
			{0, 1, model.Admitted, 0},
			{0, 1, model.Limited, 100 * ms},
		}},
		{"cost spends more", []model.LimitSpec{perSecond(10, 3)}, 250 * ms, []admitStep{
			{0, 2, model.Admitted, 0},
			{0, 2, model.Admitted, 100 * ms},
			{0, 2, model.Limited, 300 * ms},
			{0, 1, model.Admitted, 200 * ms},
			{0, 5, model.Limited, 700 * ms},
		}},
		{"per minute", []model.LimitSpec{perMinute(2, 1)}, 0, []admitStep{
			{0, 1, model.Admitted, 0},
			{0, 1, model.Limited, 30 * time.Second},
			{30 * time.Second, 1, model.Admitted, 0},
		}},
		{"no limit", nil, 0, []admitStep{
			{0, 1, model.Admitted, 0}, {0, 1000, model.Admitted, 0}, {0, 1, model.Admitted, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rdb := newMini(t)
			st := testStore(rdb, "qgtest")
			runAdmitSteps(t, c, st, scopeKeys("qgtest", "ups"), tc.limits, tc.hold, tc.steps)
			// Without a limit, the first contact starts the scope's first
			// learning cycle (its learned hash, with its expiry), and
			// nothing else is written.
			if k := c.MR.Keys(); len(tc.limits) == 0 && (len(k) != 1 || k[0] != "qgtest:{ups:}:learn" || c.MR.TTL(k[0]) <= 0) {
				t.Errorf("admission without a limit wrote %v", k)
			}
		})
	}
}

// TestAdmitPaused: while paused nothing is admitted or spent, the wait runs
// to the deadline (no limit) or to the line's slots after it (with a
// limit); after the deadline the limit starts empty: one admission at the
// deadline, the next one interval later, no burst.
func TestAdmitPaused(t *testing.T) {
	const ms = time.Millisecond
	t.Run("no limit", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", "ups")
		if _, err := st.Pause(context.Background(), k, 5*time.Second, exactPause); err != nil {
			t.Fatal(err)
		}
		runAdmitSteps(t, c, st, k, nil, time.Second, []admitStep{
			{0, 1, model.Paused, 5 * time.Second},
			{0, 1, model.Paused, 5 * time.Second}, // every peer: the deadline, nothing spent
			{4 * time.Second, 1, model.Paused, time.Second},
			{999 * ms, 1, model.Paused, ms},
			{ms, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 0},
		})
		if keys := scopeKeysOf(c.MR.Keys()); len(keys) != 1 || keys[0] != "qgtest:{ups:}:learn" {
			t.Errorf("keys left after the pause: %v, want the learning cycle the reopening began", keys)
		}
	})
	t.Run("deadline reported", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", "ups")
		st.Pause(context.Background(), k, 5*time.Second, exactPause)
		c.Advance(time.Second)
		for _, ls := range [][]model.LimitSpec{nil, {perSecond(10, 3)}} {
			a, err := st.Admit(context.Background(), k, admitRequest(1, 0, ls...))
			if err != nil || a.Code != model.Paused || !untilOf(a).Equal(t0.Add(5*time.Second)) {
				t.Errorf("limits %v: admit = %+v, %v; want paused until t0+5s", ls, a, err)
			}
		}
	})
	t.Run("limit", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", "ups")
		l := []model.LimitSpec{perSecond(10, 3)}
		if _, err := st.Pause(context.Background(), k, 5*time.Second, exactPause, l...); err != nil {
			t.Fatal(err)
		}
		runAdmitSteps(t, c, st, k, l, 250*ms, []admitStep{
			{0, 1, model.Paused, 5 * time.Second}, // slots of the line from the deadline
			{0, 1, model.Paused, 5100 * ms},
			{0, 1, model.Paused, 5200 * ms},
		})
		// Nothing was spent by the deferrals: the pause emptied the bucket
		// at its instant (TAT = t0 + burst × interval), however many peers
		// were deferred.
		wantTAT := strconv.FormatInt(t0.Add(300*ms).UnixMicro(), 10)
		if got, _ := c.MR.Get(k.Tat); got != wantTAT {
			t.Errorf("TAT while paused = %s, want %s", got, wantTAT)
		}
		runAdmitSteps(t, c, st, k, l, 250*ms, []admitStep{
			{5 * time.Second, 1, model.Admitted, 0}, // at the deadline: the bucket refilled during the pause
			{0, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 100 * ms}, // then at its rate
			{0, 1, model.Admitted, 200 * ms},
			{0, 1, model.Limited, 300 * ms}, // behind the three deferred slots
		})
	})
	t.Run("keys expire once idle", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", "ups")
		l := []model.LimitSpec{perSecond(10, 3)}
		st.Pause(context.Background(), k, 5*time.Second, exactPause, l...)
		runAdmitSteps(t, c, st, k, l, 250*ms, []admitStep{
			{0, 1, model.Paused, 5 * time.Second},
			{0, 1, model.Paused, 5100 * ms},
			{5 * time.Second, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 100 * ms},
			{0, 1, model.Admitted, 200 * ms},
			{0, 1, model.Limited, 300 * ms},
		})
		// Every key carries an expiry no later than the scope's horizon (its
		// last slot): then nothing is left.
		horizon := time.Duration(0)
		for _, key := range scopeKeysOf(c.MR.Keys()) {
			ttl := c.MR.TTL(key)
			if ttl <= 0 {
				t.Errorf("key %s has no expiry (TTL %v)", key, ttl)
			}
			horizon = max(horizon, ttl)
		}
		if horizon == 0 || horizon > time.Second+model.ExpiryMargin {
			t.Errorf("horizon %v, want in (0, 1s + margin]: the line is 400ms ahead", horizon)
		}
		c.Advance(horizon)
		if keys := scopeKeysOf(c.MR.Keys()); len(keys) != 0 {
			t.Errorf("after %v idle, keys left: %v", horizon, keys)
		}
	})
}

// TestAdmitBothBackends runs an hour-scale limit on both backends: values
// are µs timestamps (16 digits), which a real Redis must store as integers.
// Waits only ever shrink as real time passes, so bounds check direction.
func TestAdmitBothBackends(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			st := testStore(e.Rdb, e.Prefix)
			k := scopeKeys(e.Prefix, "hourly")
			l := model.Spec(schema.GCRA, 1, time.Hour, 2)
			var got []Admission
			for range 4 {
				a, err := st.Admit(ctx, k, admitRequest(1, 2*time.Second, l))
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, a)
			}
			for i, want := range []struct {
				code int64
				max  time.Duration
			}{{model.Admitted, 0}, {model.Admitted, 0}, {model.Limited, time.Hour}, {model.Limited, 2 * time.Hour}} {
				a := got[i]
				low := want.max - time.Minute
				if want.max == 0 {
					low = 0
				}
				if a.Code != want.code || waitOf(a) > want.max || waitOf(a) < low {
					t.Errorf("admission %d: code %d wait %v; want code %d wait in [%v, %v]", i, a.Code, waitOf(a), want.code, low, want.max)
				}
			}
			for _, key := range []string{k.Tat, k.Line} {
				raw, err := e.Rdb.Get(ctx, key).Result()
				if err != nil || !unixInteger.MatchString(raw) {
					t.Errorf("%s = %q, %v; want an integer", key, raw, err)
				}
				if ttl, err := e.Rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 {
					t.Errorf("PTTL %s = %v, %v; want an expiry", key, ttl, err)
				}
			}
			// A pause on top: paused, nothing admitted, wait to a slot after it.
			if _, err := st.Pause(ctx, k, 30*time.Second, exactPause); err != nil {
				t.Fatal(err)
			}
			a, err := st.Admit(ctx, k, admitRequest(1, 0))
			if err != nil || a.Code != model.Paused || waitOf(a) <= 0 || waitOf(a) > 30*time.Second {
				t.Errorf("admit while paused = %+v, %v; want paused, wait in (0, 30s]", a, err)
			}
		})
	}
}

// TestStoreTimeout: a store that never answers costs at most the store's
// timeout, reported as ErrTimeout; one that refuses connections is an
// error too.
func TestStoreTimeout(t *testing.T) {
	ctx := context.Background()
	k := scopeKeys("qgtest", "ups")

	hanging, _ := redistest.Hanging(t)
	st := New(Config{Client: hanging, Prefix: "qgtest", Timeout: 100 * time.Millisecond, MaxPause: time.Hour})
	start := time.Now()
	_, err := state(ctx, st, k)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("run on a silent store: %v, want ErrTimeout", err)
	}
	if elapsed := time.Since(start); elapsed > 30*time.Second {
		t.Errorf("run took %v with a 100ms store timeout", elapsed) // the client alone would block forever
	}
	if _, err := st.Pause(ctx, k, time.Minute, exactPause); !errors.Is(err, ErrTimeout) {
		t.Errorf("pause on a silent store: %v, want ErrTimeout", err)
	}
	if err := st.Resume(ctx, k); !errors.Is(err, ErrTimeout) {
		t.Errorf("resume on a silent store: %v, want ErrTimeout", err)
	}

	refused := New(Config{Client: redistest.Refusing(t), Prefix: "qgtest", Timeout: 10 * time.Second, MaxPause: time.Hour})
	if _, err := state(ctx, refused, k); err == nil || errors.Is(err, ErrTimeout) {
		t.Errorf("run on a closed port: %v, want the connection error", err)
	}

}

// TestStoreRunTimeoutRace: when bounded gives up after the timeout, the
// abandoned call still ends later and must not write anything the caller
// already returned (under -race this fails with "race detected" once the
// hung call is released). The call's result goes over a channel instead.
func TestStoreRunTimeoutRace(t *testing.T) {
	rdb, release := redistest.Hanging(t)
	st := New(Config{Client: rdb, Prefix: "qgtest", Timeout: 50 * time.Millisecond, MaxPause: time.Hour})
	k := scopeKeys("qgtest", "ups")
	v, _, err := st.run(context.Background(), "state", model.AdmitScript, model.AdmitReply, []string{k.Pause, k.Line, k.Budget, k.Learn, k.LearnWin}, 1, 0, time.Hour.Milliseconds(), 0, 1, 0)
	if !errors.Is(err, ErrTimeout) || v != nil {
		t.Fatalf("run = %v, %v; want nil, ErrTimeout", v, err)
	}
	// Release the hung call: the abandoned goroutine now writes v. Touch
	// nothing of the client meanwhile (its pool lock would order the two
	// accesses and hide the race from the detector).
	release()
	time.Sleep(time.Second)
	rdb.Close()
}

// TestStoreDirectTimeout: with a client that honours context deadlines
// (ContextTimeoutEnabled, the direct path without a watchdog goroutine), a
// store that does not answer within its timeout yields go-redis's "i/o
// timeout" net error; bounded reports it as ErrTimeout, as documented,
// so callers matching it and the log ("store timeout") see it.
func TestStoreDirectTimeout(t *testing.T) {
	rdb, _ := redistest.Hanging(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	st := New(Config{Client: rdb, Prefix: "qgtest", Timeout: 100 * time.Millisecond, MaxPause: 12 * time.Hour})
	if !st.direct {
		t.Fatal("a client with ContextTimeoutEnabled should be called directly")
	}
	k := scopeKeys("qgtest", "ups")
	_, err := state(context.Background(), st, k)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("direct run on a silent store: %v, want ErrTimeout", err)
	}
}

// scopeKeysOf is keys less the feed's (internal/feed): the records of
// scopes.
func scopeKeysOf(keys []string) []string {
	var out []string
	for _, k := range keys {
		if !strings.Contains(k, ":feed:{") {
			out = append(out, k)
		}
	}
	return out
}

// An announcement that failed waits its turn to be tried again, unless
// RetryAnnouncements asks for it at once (Redis answers again): with the
// first wait an hour long, only the ask appends it.
func TestRetryAnnouncements(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			st := testStore(e.Rdb, e.Prefix)
			st.retryFirst = time.Hour
			entry := feed.Entry{Key: schema.ScopeKeys(e.Prefix, "ups", "acct").Pause, UntilMs: time.Now().Add(time.Minute).UnixMilli(), NowMs: time.Now().UnixMilli()}
			_, keys, _ := feed.AppendCall(e.Rdb, e.Prefix, entry)
			if err := e.Rdb.Set(ctx, keys[0], "not a stream", 0).Err(); err != nil { // the append fails: WRONGTYPE
				t.Fatal(err)
			}
			st.announce(ctx, entry)
			if err := e.Rdb.Del(ctx, keys[0]).Err(); err != nil {
				t.Fatal(err)
			}
			appended := func() bool { n, err := e.Rdb.XLen(ctx, keys[0]).Result(); return err == nil && n == 1 }
			if appended() {
				t.Fatal("the failed announcement was appended before it was tried again")
			}
			st.RetryAnnouncements()
			eventually(t, 10*time.Second, "the announcement appended once asked", appended)
		})
	}
}
