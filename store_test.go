package quotagate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"

	"github.com/redis/go-redis/v9"
)

// testStore is a store with a generous timeout: these tests are about
// what Redis answers, not how fast (see TestStoreTimeout for the bound).
func testStore(rdb redis.UniversalClient, prefix string) *store {
	return &store{rdb: rdb, prefix: prefix, timeout: 30 * time.Second, maxPause: 12 * time.Hour}
}

var unixInteger = regexp.MustCompile(`^[0-9]+$`)

// redisNow returns Redis TIME.
func redisNow(t *testing.T, rdb redis.UniversalClient) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now
}

// TestStorePauseRecord checks the record Pause leaves in Redis on both
// backends: an integer Unix-ms deadline whose key expires at that instant.
func TestStorePauseRecord(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			ctx := context.Background()
			st := testStore(e.rdb, e.prefix)
			k := scopeKeys(e.prefix, Scope{Provider: "ups", Account: "acct-1"})

			until, rem, _, err := st.pause(ctx, k, 30*time.Second, exactPause)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := e.rdb.Get(ctx, k.Pause).Result()
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
			if e.real() {
				checkExpireAt(t, e.rdb, k.Pause, until)
				pttl, err := e.rdb.PTTL(ctx, k.Pause).Result()
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
			if ttl := e.clock.MR.TTL(k.Pause); ttl != rem {
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
	k := scopeKeys(prefix, Scope{Provider: "ups"})
	_, rem, _, err := st.pause(ctx, k, MinPause, exactPause)
	if err != nil {
		t.Fatal(err)
	}
	last := rem
	for deadline := time.Now().Add(30 * time.Second); ; {
		p, err := st.state(ctx, k)
		r := p.Remaining
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
			t.Fatalf("a %v pause still has %v left after 30s", MinPause, r)
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
		k := scopeKeys(prefix, Scope{Provider: "expiry", Account: strconv.Itoa(i)})
		until, _, _, err := st.pause(ctx, k, MinPause, exactPause)
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
	k := scopeKeys("qgtest", Scope{Provider: "ups"})
	if _, _, _, err := st.pause(ctx, k, 5*time.Second, exactPause); err != nil {
		t.Fatal(err)
	}
	c.MR.SetTime(t0.Add(6 * time.Second)) // TIME moves, the TTL does not
	if !c.MR.Exists(k.Pause) {
		t.Fatal("setup: the key should linger")
	}
	p, err := st.state(ctx, k)
	if err != nil || p.Remaining != 0 || !p.Until.IsZero() {
		t.Errorf("remaining = %+v, %v; want open", p, err)
	}
	a, err := st.admit(ctx, k, admitRequest{limits: lims(Limit{}), cost: 1, hold: 0})
	if err != nil || a.code != model.Admitted {
		t.Errorf("admit = %+v, %v; want admitted", a, err)
	}
	until, rem, _, err := st.pause(ctx, k, 2*time.Second, exactPause)
	if err != nil || rem != 2*time.Second || !until.Equal(t0.Add(8*time.Second)) {
		t.Errorf("pause over an expired record = %v, %v, %v; want %v, 2s", until, rem, err, t0.Add(8*time.Second))
	}
}

// TestStoreMalformedRecord: anything but an integer deadline within
// MaxPause reads open, admits, and is overwritten by the next pause.
func TestStoreMalformedRecord(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			ctx := context.Background()
			st := testStore(e.rdb, e.prefix)
			now := redisNow(t, e.rdb)
			for i, v := range []string{
				"abc", "", "1.5", "-5", "1e15", " 1", "1 ", "0x10",
				strings.Repeat("9", 40),
				strconv.FormatInt(now.Add(st.maxPause+time.Hour).UnixMilli(), 10), // beyond MaxPause
				strconv.FormatInt(now.Add(-time.Minute).UnixMilli(), 10),          // in the past
				"0",
			} {
				k := scopeKeys(e.prefix, Scope{Provider: "malformed", Account: strconv.Itoa(i)})
				if err := e.rdb.Set(ctx, k.Pause, v, 0).Err(); err != nil {
					t.Fatal(err)
				}
				p, err := st.state(ctx, k)
				if err != nil || p.Remaining != 0 || !p.Until.IsZero() {
					t.Errorf("record %q: remaining = %+v, %v; want open", v, p, err)
				}
				a, err := st.admit(ctx, k, admitRequest{limits: lims(Limit{}), cost: 1, hold: 0})
				if err != nil || a.code != model.Admitted {
					t.Errorf("record %q: admit = %+v, %v; want admitted", v, a, err)
				}
				until, rem, _, err := st.pause(ctx, k, 10*time.Second, exactPause)
				if err != nil {
					t.Errorf("record %q: pause: %v", v, err)
					continue
				}
				if rem <= 0 || rem > 10*time.Second {
					t.Errorf("record %q: pause remaining %v, want the new 10s pause", v, rem)
				}
				raw, _ := e.rdb.Get(ctx, k.Pause).Result()
				if raw != strconv.FormatInt(until.UnixMilli(), 10) {
					t.Errorf("record %q: after pause the record is %q, want %d", v, raw, until.UnixMilli())
				}
				if ttl, _ := e.rdb.PTTL(ctx, k.Pause).Result(); ttl <= 0 || ttl > 10*time.Second+time.Millisecond { // +1ms: TestPauseExpiresAtDeadline
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
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			ctx := context.Background()
			st := testStore(e.rdb, e.prefix)
			hk := scopeKeys(e.prefix, Scope{Provider: "wrongtype", Account: "hash"})
			lk := scopeKeys(e.prefix, Scope{Provider: "wrongtype", Account: "list"})
			if err := e.rdb.HSet(ctx, hk.Pause, "deadline", "1").Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.rdb.LPush(ctx, lk.Pause, "1").Err(); err != nil {
				t.Fatal(err)
			}
			for _, k := range []schema.Keys{hk, lk} {
				if p, err := st.state(ctx, k); err != nil || p.Remaining != 0 {
					t.Errorf("%s: remaining %v, %v; want open", k.Pause, p.Remaining, err)
				}
				if a, err := st.admit(ctx, k, admitRequest{limits: lims(Limit{}), cost: 1, hold: 0}); err != nil || a.code != model.Admitted {
					t.Errorf("%s: admit %+v, %v; want admitted", k.Pause, a, err)
				}
				if _, rem, _, err := st.pause(ctx, k, 10*time.Second, exactPause); err != nil || rem != 10*time.Second {
					t.Errorf("%s: pause %v, %v; want 10s", k.Pause, rem, err)
				}
				if typ := e.rdb.Type(ctx, k.Pause).Val(); typ != "string" {
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

func runAdmitSteps(t *testing.T, c *miniClock, st *store, k schema.Keys, l Limit, hold time.Duration, steps []admitStep) {
	t.Helper()
	for i, s := range steps {
		c.Advance(s.advance)
		a, err := st.admit(context.Background(), k, admitRequest{limits: lims(l), cost: s.cost, hold: hold})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if a.code != s.code || a.wait != s.wait {
			t.Errorf("step %d (t0+%v, cost %d): code %d wait %v; want code %d wait %v",
				i, c.Now.Sub(t0), s.cost, a.code, a.wait, s.code, s.wait)
		}
		if !a.now.Equal(c.Now) {
			t.Errorf("step %d: now %v, want Redis TIME %v", i, a.now, c.Now)
		}
	}
}

// TestAdmitLimit is the GCRA step table with a fixed Redis clock: the burst
// at once, then reservations one interval apart up to the hold, then
// "limited" with the slots of the reopening line one interval apart.
func TestAdmitLimit(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name  string
		limit Limit
		hold  time.Duration
		steps []admitStep
	}{
		{"burst 3, hold 250ms", PerSecond(10, 3), 250 * ms, []admitStep{
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
		{"burst 1, no hold", PerSecond(10, 1), 0, []admitStep{
			{0, 1, model.Admitted, 0},
			{0, 1, model.Limited, 100 * ms},
			{0, 1, model.Limited, 200 * ms},
			{50 * ms, 1, model.Limited, 250 * ms},
			{50 * ms, 1, model.Admitted, 0},
			{0, 1, model.Limited, 300 * ms}, // line slots t0+100..t0+300 were handed out
		}},
		{"burst below 1 means 1", Limit{Rate: 10, Period: time.Second, Burst: -3}, 0, []admitStep{
			{0, 1, model.Admitted, 0},
			{0, 1, model.Limited, 100 * ms},
		}},
		{"cost spends more", PerSecond(10, 3), 250 * ms, []admitStep{
			{0, 2, model.Admitted, 0},
			{0, 2, model.Admitted, 100 * ms},
			{0, 2, model.Limited, 300 * ms},
			{0, 1, model.Admitted, 200 * ms},
			{0, 5, model.Limited, 700 * ms},
		}},
		{"per minute", PerMinute(2, 1), 0, []admitStep{
			{0, 1, model.Admitted, 0},
			{0, 1, model.Limited, 30 * time.Second},
			{30 * time.Second, 1, model.Admitted, 0},
		}},
		{"no limit", Limit{}, 0, []admitStep{
			{0, 1, model.Admitted, 0}, {0, 1000, model.Admitted, 0}, {0, 1, model.Admitted, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rdb := newMini(t)
			st := testStore(rdb, "qgtest")
			runAdmitSteps(t, c, st, scopeKeys("qgtest", Scope{Provider: "ups"}), tc.limit, tc.hold, tc.steps)
			// Without a limit, the first contact starts the scope's first
			// learning cycle (its learned hash, with its expiry), and
			// nothing else is written.
			if k := c.MR.Keys(); tc.limit.IsZero() && (len(k) != 1 || k[0] != "qgtest:{ups:}:learn" || c.MR.TTL(k[0]) <= 0) {
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
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		if _, _, _, err := st.pause(context.Background(), k, 5*time.Second, exactPause); err != nil {
			t.Fatal(err)
		}
		runAdmitSteps(t, c, st, k, Limit{}, time.Second, []admitStep{
			{0, 1, model.Paused, 5 * time.Second},
			{0, 1, model.Paused, 5 * time.Second}, // every peer: the deadline, nothing spent
			{4 * time.Second, 1, model.Paused, time.Second},
			{999 * ms, 1, model.Paused, ms},
			{ms, 1, model.Admitted, 0},
			{0, 1, model.Admitted, 0},
		})
		if keys := c.MR.Keys(); len(keys) != 1 || keys[0] != "qgtest:{ups:}:learn" {
			t.Errorf("keys left after the pause: %v, want the learning cycle the reopening began", keys)
		}
	})
	t.Run("deadline reported", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		st.pause(context.Background(), k, 5*time.Second, exactPause)
		c.Advance(time.Second)
		for _, l := range []Limit{{}, PerSecond(10, 3)} {
			a, err := st.admit(context.Background(), k, admitRequest{limits: lims(l), cost: 1, hold: 0})
			if err != nil || a.code != model.Paused || !a.until.Equal(t0.Add(5*time.Second)) {
				t.Errorf("limit %v: admit = %+v, %v; want paused until t0+5s", l, a, err)
			}
		}
	})
	t.Run("limit", func(t *testing.T) {
		c, rdb := newMini(t)
		st := testStore(rdb, "qgtest")
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		l := PerSecond(10, 3)
		if _, _, _, err := st.pause(context.Background(), k, 5*time.Second, exactPause, l); err != nil {
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
		k := scopeKeys("qgtest", Scope{Provider: "ups"})
		l := PerSecond(10, 3)
		st.pause(context.Background(), k, 5*time.Second, exactPause, l)
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
		for _, key := range c.MR.Keys() {
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
		if keys := c.MR.Keys(); len(keys) != 0 {
			t.Errorf("after %v idle, keys left: %v", horizon, keys)
		}
	})
}

// TestAdmitBothBackends runs an hour-scale limit on both backends: values
// are µs timestamps (16 digits), which a real Redis must store as integers.
// Waits only ever shrink as real time passes, so bounds check direction.
func TestAdmitBothBackends(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			ctx := context.Background()
			st := testStore(e.rdb, e.prefix)
			k := scopeKeys(e.prefix, Scope{Provider: "hourly"})
			l := Limit{Rate: 1, Period: time.Hour, Burst: 2}
			var got []admission
			for range 4 {
				a, err := st.admit(ctx, k, admitRequest{limits: lims(l), cost: 1, hold: 2 * time.Second})
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
				if a.code != want.code || a.wait > want.max || a.wait < low {
					t.Errorf("admission %d: code %d wait %v; want code %d wait in [%v, %v]", i, a.code, a.wait, want.code, low, want.max)
				}
			}
			for _, key := range []string{k.Tat, k.Line} {
				raw, err := e.rdb.Get(ctx, key).Result()
				if err != nil || !unixInteger.MatchString(raw) {
					t.Errorf("%s = %q, %v; want an integer", key, raw, err)
				}
				if ttl, err := e.rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 {
					t.Errorf("PTTL %s = %v, %v; want an expiry", key, ttl, err)
				}
			}
			// A pause on top: paused, nothing admitted, wait to a slot after it.
			if _, _, _, err := st.pause(ctx, k, 30*time.Second, exactPause); err != nil {
				t.Fatal(err)
			}
			a, err := st.admit(ctx, k, admitRequest{limits: lims(Limit{}), cost: 1, hold: 0})
			if err != nil || a.code != model.Paused || a.wait <= 0 || a.wait > 30*time.Second {
				t.Errorf("admit while paused = %+v, %v; want paused, wait in (0, 30s]", a, err)
			}
		})
	}
}

// TestPauseAtomicRealRedis races many workers on separate connections
// proposing long and short pauses of one scope: the deadline in force is
// always the latest one proposed.
func TestPauseAtomicRealRedis(t *testing.T) {
	srv, _, prefix := realRedis(t)
	const workers, rounds = 64, 20
	gates := make([]*Gate, workers)
	for i := range gates {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
		t.Cleanup(func() { rdb.Close() })
		gates[i] = New(rdb, Config{Prefix: prefix, StoreTimeout: time.Minute})
	}
	for round := range rounds {
		pauseRace(t, gates, prefix, Scope{Provider: "race", Account: strconv.Itoa(round)})
	}
}

// pauseRace has every gate propose a long or a short pause of s at the same
// instant: the deadline in force is always the latest one proposed.
func pauseRace(t *testing.T, gates []*Gate, prefix string, s Scope) {
	t.Helper()
	ctx := context.Background()
	workers := len(gates)
	proposals := make([]time.Duration, workers)
	for i := range proposals {
		if i%2 == 0 {
			proposals[i] = time.Duration(30_000+rand.IntN(30_000)) * time.Millisecond // long
		} else {
			proposals[i] = time.Duration(1_000+rand.IntN(4_000)) * time.Millisecond // short
		}
	}
	rand.Shuffle(workers, func(i, j int) { proposals[i], proposals[j] = proposals[j], proposals[i] })
	longest := slicesMax(proposals)

	results := make([]Pause, workers)
	errs := make([]error, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = gates[i].Pause(ctx, s, proposals[i])
		}()
	}
	close(start)
	wg.Wait()

	final, err := gates[0].State(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var maxUntil time.Time
	for i, p := range results {
		if errs[i] != nil {
			t.Fatalf("%v worker %d: %v", s, i, errs[i])
		}
		if p.Until.After(final.Until) {
			t.Errorf("%v: worker %d saw deadline %v, later than the final %v", s, i, p.Until, final.Until)
		}
		if p.Remaining < proposals[i] {
			t.Errorf("%v: worker %d proposed %v, the deadline in force had only %v left", s, i, proposals[i], p.Remaining)
		}
		if p.Until.After(maxUntil) {
			maxUntil = p.Until
		}
	}
	if !final.Until.Equal(maxUntil) {
		t.Errorf("%v: final deadline %v, want the latest returned %v", s, final.Until, maxUntil)
	}
	if final.Remaining <= 0 || final.Remaining > longest {
		t.Errorf("%v: final remaining %v, want in (0, %v]", s, final.Remaining, longest)
	}
	checkExpireAt(t, gates[0].store.rdb, scopeKeys(prefix, s).Pause, final.Until)
}

func slicesMax(ds []time.Duration) time.Duration {
	m := time.Duration(math.MinInt64)
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// TestStoreTimeout: a store that never answers costs at most the store's
// timeout, reported as ErrStoreTimeout; one that refuses connections is an
// error too.
func TestStoreTimeout(t *testing.T) {
	ctx := context.Background()
	k := scopeKeys("qgtest", Scope{Provider: "ups"})

	hanging, _ := hangingRedis(t)
	st := &store{rdb: hanging, prefix: "qgtest", timeout: 100 * time.Millisecond, maxPause: time.Hour}
	start := time.Now()
	_, err := st.state(ctx, k)
	if !errors.Is(err, ErrStoreTimeout) {
		t.Errorf("run on a silent store: %v, want ErrStoreTimeout", err)
	}
	if elapsed := time.Since(start); elapsed > 30*time.Second {
		t.Errorf("run took %v with a 100ms store timeout", elapsed) // the client alone would block forever
	}
	if _, _, _, err := st.pause(ctx, k, time.Minute, exactPause); !errors.Is(err, ErrStoreTimeout) {
		t.Errorf("pause on a silent store: %v, want ErrStoreTimeout", err)
	}
	if err := st.resume(ctx, k); !errors.Is(err, ErrStoreTimeout) {
		t.Errorf("resume on a silent store: %v, want ErrStoreTimeout", err)
	}

	refused := &store{rdb: refusingRedis(t), prefix: "qgtest", timeout: 10 * time.Second, maxPause: time.Hour}
	if _, err := refused.state(ctx, k); err == nil || errors.Is(err, ErrStoreTimeout) {
		t.Errorf("run on a closed port: %v, want the connection error", err)
	}

}

// TestStoreRunTimeoutRace: when bounded gives up after the timeout, the
// abandoned call still ends later and must not write anything the caller
// already returned (under -race this fails with "race detected" once the
// hung call is released). The call's result goes over a channel instead.
func TestStoreRunTimeoutRace(t *testing.T) {
	rdb, release := hangingRedis(t)
	st := &store{rdb: rdb, prefix: "qgtest", timeout: 50 * time.Millisecond, maxPause: time.Hour}
	k := scopeKeys("qgtest", Scope{Provider: "ups"})
	v, _, err := st.run(context.Background(), "state", model.AdmitScript, model.AdmitReply, []string{k.Pause, k.Line, k.Budget, k.Learn, k.LearnWin}, 1, 0, time.Hour.Milliseconds(), 0, 1, 0)
	if !errors.Is(err, ErrStoreTimeout) || v != nil {
		t.Fatalf("run = %v, %v; want nil, ErrStoreTimeout", v, err)
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
// store that does not answer within StoreTimeout yields go-redis's "i/o
// timeout" net error; bounded reports it as ErrStoreTimeout, as documented,
// so callers matching it and the log ("store timeout") see it.
func TestStoreDirectTimeout(t *testing.T) {
	rdb, _ := hangingRedis(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	st := &New(rdb, Config{StoreTimeout: 100 * time.Millisecond}).store
	if !st.direct {
		t.Fatal("a client with ContextTimeoutEnabled should be called directly")
	}
	k := scopeKeys("qgtest", Scope{Provider: "ups"})
	_, err := st.state(context.Background(), k)
	if !errors.Is(err, ErrStoreTimeout) {
		t.Errorf("direct run on a silent store: %v, want ErrStoreTimeout", err)
	}
}

// TestLimit covers the limit's arithmetic: the emission interval rounds up
// (the rate is never exceeded by rounding), zero values mean no limit.
func TestLimit(t *testing.T) {
	for _, tc := range []struct {
		l        Limit
		zero     bool
		interval int64 // µs
		burst    int
		str      string
	}{
		{PerSecond(10, 3), false, 100_000, 3, "10/s burst 3"},
		{PerSecond(3, 0), false, 333_334, 1, "3/s burst 1"},
		{PerMinute(60, 1), false, 1_000_000, 1, "60/min burst 1"},
		{Limit{Rate: 5, Period: time.Hour, Burst: 2}, false, 720_000_000, 2, "5/h burst 2"},
		{Limit{Rate: 1, Period: 2 * time.Second}, false, 2_000_000, 1, "1/2s burst 1"},
		{Limit{Rate: 10_000_000, Period: time.Second}, false, 1, 1, "10000000/s burst 1"},
		{Limit{Rate: 1, Period: 500 * time.Nanosecond}, false, 1, 1, "1/500ns burst 1"},
		{Limit{Rate: math.MaxInt, Period: time.Second}, false, 1, 1, fmt.Sprintf("%d/s burst 1", math.MaxInt)},
		{Limit{}, true, 0, 1, "no limit"},
		{Limit{Rate: 10}, true, 0, 1, "no limit"},
		{Limit{Rate: -1, Period: time.Second}, true, 0, 1, "no limit"},
		{Limit{Rate: 1, Period: -time.Second}, true, 0, 1, "no limit"},
	} {
		if got := tc.l.IsZero(); got != tc.zero {
			t.Errorf("%+v.IsZero() = %v, want %v", tc.l, got, tc.zero)
		}
		if got := tc.l.interval(); got != tc.interval {
			t.Errorf("%+v.interval() = %d, want %d", tc.l, got, tc.interval)
		}
		if got := tc.l.burst(); got != tc.burst {
			t.Errorf("%+v.burst() = %d, want %d", tc.l, got, tc.burst)
		}
		if got := tc.l.String(); got != tc.str {
			t.Errorf("%+v.String() = %q, want %q", tc.l, got, tc.str)
		}
	}
}

func TestScopeKeys(t *testing.T) {
	k := scopeKeys("quotagate", Scope{Provider: "ups", Account: "acct-1"})
	if k.Pause != "quotagate:{ups:acct-1}:pause" || k.Tat != "quotagate:{ups:acct-1}:tat" || k.Line != "quotagate:{ups:acct-1}:line" {
		t.Errorf("keys %+v", k)
	}
	scopes := []Scope{
		{Provider: "a:b", Account: "c"}, {Provider: "a", Account: "b:c"},
		{Provider: "a%3Ab", Account: "c"}, {Provider: "a", Account: "b%3Ac"},
		{Provider: "a}", Account: "b"}, {Provider: "a", Account: "}b"}, {Provider: "a}:{b"},
		{Provider: "a{", Account: "b"}, {Provider: "a", Account: "{b}"}, {Provider: "{a}", Account: ""},
		{Provider: "a%", Account: "b"}, {Provider: "a%25", Account: "b"}, {Provider: "a%7D"},
		{Provider: "a"}, {Provider: "a:"}, {Provider: "a", Account: ":"}, {Provider: "a", Account: "%"},
		{Provider: "ups", Account: Fingerprint("secret")},
	}
	tags := map[string]Scope{}
	for _, s := range scopes {
		tag := checkScopeKeys(t, "quotagate", s)
		if prev, dup := tags[tag]; dup {
			t.Errorf("%v and %v share the hash tag %q", s, prev, tag)
		}
		tags[tag] = s
	}
	if a, b := scopeKeys("p", Scope{Provider: "a:b", Account: "c"}), scopeKeys("p", Scope{Provider: "a", Account: "b:c"}); a == b {
		t.Errorf(`("a:b","c") and ("a","b:c") share keys %+v`, a)
	}
	if a, b := scopeKeys("one", Scope{Provider: "ups"}), scopeKeys("two", Scope{Provider: "ups"}); a.Pause == b.Pause {
		t.Error("the prefix does not separate gates")
	}
}

// exactPause records a pause of exactly the length asked: an operator's
// (Gate.Pause), which teaches nothing. A hintless refusal's pause is its
// episode's (model_fallback.go), a second the first time.
var exactPause = refusalFacts{operator: true}
