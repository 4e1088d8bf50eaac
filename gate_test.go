package quotagate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestGatePauseSteps is the pause's step table on a fixed Redis clock:
// deadline = max(existing, now+d), remaining = deadline − now, expired or
// resumed = open. After every step the record is checked: an integer Unix-ms
// deadline whose key expires at that same instant.
func TestGatePauseSteps(t *testing.T) {
	const (
		read = iota
		pause
		resume
	)
	s := Scope{Provider: "ups", Account: "acct-1"}
	for _, tc := range []struct {
		name  string
		steps []struct {
			advance   time.Duration
			op        int
			d         time.Duration
			until     time.Duration // offset from t0; 0 means open
			remaining time.Duration
		}
	}{
		{"timeline", []struct {
			advance   time.Duration
			op        int
			d         time.Duration
			until     time.Duration
			remaining time.Duration
		}{
			{0, read, 0, 0, 0},
			{0, pause, 10 * time.Second, 10 * time.Second, 10 * time.Second},
			{2 * time.Second, pause, 5 * time.Second, 10 * time.Second, 8 * time.Second}, // shorter: the later deadline stays
			{0, read, 0, 10 * time.Second, 8 * time.Second},
			{0, pause, 30 * time.Second, 32 * time.Second, 30 * time.Second}, // longer: moves later
			{0, pause, 30 * time.Second, 32 * time.Second, 30 * time.Second}, // same: unchanged
			{time.Second, read, 0, 32 * time.Second, 29 * time.Second},
			{28999 * time.Millisecond, read, 0, 32 * time.Second, time.Millisecond},
			{time.Millisecond, read, 0, 0, 0}, // expired: open
			{0, pause, time.Second, 33 * time.Second, time.Second},
			{0, resume, 0, 0, 0},
			{0, pause, 2 * time.Second, 34 * time.Second, 2 * time.Second}, // after Resume, a shorter pause holds
			{time.Hour, read, 0, 0, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rdb := newMini(t)
			g := New(rdb, Config{})
			k := scopeKeys("quotagate", s)
			ctx := context.Background()
			for i, st := range tc.steps {
				c.Advance(st.advance)
				switch st.op {
				case pause:
					p, err := g.Pause(ctx, s, st.d)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if p.Scope != s || !p.Until.Equal(t0.Add(st.until)) || p.Remaining != st.remaining {
						t.Errorf("step %d: Pause(%v) = %v; want until t0+%v, remaining %v", i, st.d, p, st.until, st.remaining)
					}
				case resume:
					if err := g.Resume(ctx, s); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				}
				rem, err := g.Remaining(ctx, s)
				if err != nil || rem != st.remaining {
					t.Errorf("step %d (t0+%v): Remaining = %v, %v; want %v", i, c.Now.Sub(t0), rem, err, st.remaining)
				}
				state, err := g.State(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				if st.until == 0 {
					if !state.Until.IsZero() || state.Remaining != 0 {
						t.Errorf("step %d: State = %v, want open", i, state)
					}
					if c.MR.Exists(k.Pause) {
						t.Errorf("step %d: open, yet the pause key exists", i)
					}
					continue
				}
				if !state.Until.Equal(t0.Add(st.until)) {
					t.Errorf("step %d: State.Until = %v, want t0+%v", i, state.Until, st.until)
				}
				if ttl := c.MR.TTL(k.Pause); ttl != st.remaining {
					t.Errorf("step %d: TTL %v, want the remaining %v (expiry at the deadline)", i, ttl, st.remaining)
				}
				if v, _ := c.MR.Get(k.Pause); v != strconv.FormatInt(t0.Add(st.until).UnixMilli(), 10) {
					t.Errorf("step %d: record %q, want Unix ms %d", i, v, t0.Add(st.until).UnixMilli())
				}
			}
		})
	}
}

// TestGatePause runs the pause's contract on both backends. On the real
// server time passes between calls, so remaining times are checked for
// direction only.
func TestGatePause(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			g := New(e.Rdb, Config{Prefix: e.Prefix})
			s := Scope{Provider: "ups", Account: "acct-1"}
			k := scopeKeys(e.Prefix, s)

			p1, err := g.Pause(ctx, s, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if p1.Remaining <= 0 || p1.Remaining > 20*time.Second {
				t.Fatalf("Pause(20s).Remaining = %v", p1.Remaining)
			}
			if e.Real() {
				checkExpireAt(t, e.Rdb, k.Pause, p1.Until)
			} else {
				e.Clock.Advance(3 * time.Second)
			}
			rem, err := g.Remaining(ctx, s)
			if err != nil || rem <= 0 || rem > p1.Remaining {
				t.Errorf("Remaining = %v, %v; want in (0, %v]", rem, err, p1.Remaining)
			}
			if !e.Real() && rem != 17*time.Second {
				t.Errorf("Remaining after 3s = %v, want 17s", rem)
			}

			p2, err := g.Pause(ctx, s, 5*time.Second)
			if err != nil || !p2.Until.Equal(p1.Until) || p2.Remaining > p1.Remaining || p2.Remaining <= 0 {
				t.Errorf("shorter Pause = %v, %v; want the deadline %v kept", p2, err, p1.Until)
			}
			p3, err := g.Pause(ctx, s, 40*time.Second)
			if err != nil || !p3.Until.After(p1.Until) || p3.Remaining > 40*time.Second {
				t.Errorf("longer Pause = %v, %v; want a deadline after %v", p3, err, p1.Until)
			}
			if e.Real() {
				checkExpireAt(t, e.Rdb, k.Pause, p3.Until)
			}

			// Other scopes are not paused.
			for _, other := range []Scope{{Provider: "fedex", Account: "acct-1"}, {Provider: "ups", Account: "acct-2"}, {Provider: "ups"}} {
				if rem, err := g.Remaining(ctx, other); err != nil || rem != 0 {
					t.Errorf("Remaining(%v) = %v, %v; want 0", other, rem, err)
				}
			}

			if err := g.Resume(ctx, s); err != nil {
				t.Fatal(err)
			}
			if rem, err := g.Remaining(ctx, s); err != nil || rem != 0 {
				t.Errorf("after Resume: Remaining = %v, %v; want 0", rem, err)
			}
			if err := g.Resume(ctx, s); err != nil {
				t.Errorf("Resume of an open scope: %v", err)
			}
		})
	}
}

// TestGateClamp: every pause lands in [MinPause, MaxPause], whatever d.
func TestGateClamp(t *testing.T) {
	for _, tc := range []struct {
		maxPause time.Duration // Config.MaxPause
		d        time.Duration
		want     time.Duration
	}{
		{0, -time.Second, MinPause},
		{0, 0, MinPause},
		{0, 1, MinPause},
		{0, 999 * time.Millisecond, MinPause},
		{0, time.Second, time.Second},
		{0, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{0, math.MinInt64, MinPause},
		{0, math.MaxInt64, 12 * time.Hour},
		{0, 12*time.Hour + time.Hour, 12 * time.Hour},
		{time.Hour, 2 * time.Hour, time.Hour},
		{time.Hour, math.MaxInt64, time.Hour},
		{time.Millisecond, time.Hour, MinPause},   // MaxPause below MinPause means MinPause
		{-time.Hour, time.Hour, time.Hour},        // a negative one means the default, 12h
		{time.Hour, time.Hour + 1, time.Hour + 0}, // sub-ms above the cap
	} {
		c, rdb := newMini(t)
		g := New(rdb, Config{MaxPause: tc.maxPause})
		p, err := g.Pause(context.Background(), Scope{Provider: "ups"}, tc.d)
		if err != nil {
			t.Fatal(err)
		}
		if p.Remaining != tc.want || !p.Until.Equal(t0.Add(tc.want)) {
			t.Errorf("MaxPause %v: Pause(%v) = %v; want %v", tc.maxPause, tc.d, p, tc.want)
		}
		if ttl := c.MR.TTL(scopeKeys("quotagate", Scope{Provider: "ups"}).Pause); ttl != tc.want {
			t.Errorf("MaxPause %v: Pause(%v) left TTL %v, want %v", tc.maxPause, tc.d, ttl, tc.want)
		}
	}
}

// TestConfigDefaults: the zero Config works, and each default shows in
// behaviour where that is cheap to observe.
func TestConfigDefaults(t *testing.T) {
	got := Config{}.withDefaults()
	if got.Prefix != "quotagate" || got.MaxPause != 12*time.Hour || got.FallbackPause != 12*time.Hour ||
		got.FallbackBase != 15*time.Minute || got.FallbackCap != 12*time.Hour || got.Tuning.MaxHold != 1500*time.Millisecond || got.Tuning.MaxHolders != 12 || got.Tuning.OpenCache != 10*time.Minute ||
		got.Tuning.ReopenJitter != time.Second || got.StoreTimeout != 250*time.Millisecond || got.FailClosed ||
		got.Tuning.FailClosedDelay != 10*time.Second || got.Logger != slog.Default() {
		t.Errorf("Config{}.withDefaults() = %+v", got)
	}
	dg := New(nil, Config{})
	if u := dg.rand(); u < 0 || u >= 1 {
		t.Errorf("default rand() = %v, want [0, 1)", u)
	}
	if n := dg.now(); time.Since(n) > time.Hour || time.Since(n) < -time.Hour {
		t.Errorf("default now() = %v, not the local clock", n)
	}
	if got := (Config{MaxPause: time.Hour}).withDefaults(); got.FallbackPause != time.Hour {
		t.Errorf("MaxPause 1h: FallbackPause = %v, want 1h (no pause beyond MaxPause)", got.FallbackPause)
	}
	if got := (Config{Tuning: Tuning{MaxHold: -1, ReopenJitter: -1}}).withDefaults(); got.Tuning.MaxHold != 0 || got.Tuning.ReopenJitter != 0 {
		t.Errorf("negative MaxHold, ReopenJitter = %v, %v; want 0 (disabled)", got.Tuning.MaxHold, got.Tuning.ReopenJitter)
	}

	ctx := context.Background()
	c, rdb := newMini(t)
	g := New(rdb, Config{})
	s := Scope{Provider: "ups", Account: "acct-1"}

	// Prefix "quotagate".
	if _, err := g.Pause(ctx, s, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !c.MR.Exists("quotagate:{ups:acct-1}:pause") {
		t.Errorf("keys %v, want quotagate:{ups:acct-1}:pause", c.MR.Keys())
	}
	// MaxPause 12h.
	if p, _ := g.Pause(ctx, Scope{Provider: "long"}, 100*time.Hour); p.Remaining != 12*time.Hour {
		t.Errorf("Pause(100h) = %v, want the 12h default cap", p.Remaining)
	}
	// FallbackPause 12h caps a hintless episode's pause, whose first is a
	// second: a refusal without a hint still pauses the scope.
	if r, ok := g.record(ctx, Scope{Provider: "nohint"}, scopeKeys("quotagate", Scope{Provider: "nohint"}), 0, 0, grant{}); !ok || r.pause.Remaining != time.Second || !r.pause.Until.Equal(t0.Add(time.Second)) {
		t.Errorf("refusal without hint recorded %+v (%v), want 1s", r, ok)
	}
	// FallbackBase 15m, FallbackCap 12h.
	g.now = func() time.Time { return t0 }
	rd := g.RetryDelay(nil)
	if d := rd(0, &Refusal{}, nil); d != 15*time.Minute {
		t.Errorf("first fallback = %v, want 15m", d)
	}
	if d := rd(50, &Refusal{}, nil); d != 12*time.Hour {
		t.Errorf("late fallback = %v, want 12h", d)
	}
	// MaxHold 1.5s: a 3s pause (longer than the hold plus asynq's 1s tick)
	// is deferred to wake 2.5s before its deadline, to hold for it.
	g2 := newWith(rdb, Config{}, hooks{rand: func() float64 { return 0.5 }})
	ps := Scope{Provider: "paused"}
	if _, err := g2.Pause(ctx, ps, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	var d *Deferral
	if err := g2.admit(ctx, ps, 1, false); !errors.As(err, &d) || d.Delay != 500*time.Millisecond ||
		d.Reason != ReasonPaused || !d.RetryAt.Equal(t0.Add(500*time.Millisecond)) || !d.Deadline.Equal(t0.Add(3*time.Second)) || d.Scope != ps {
		t.Errorf("admit during a 3s pause = %v (%+v); want a 500ms deferral, for a 3s deadline", err, d)
	}
	// ReopenJitter 1s: a task without a holder place is paced after the
	// deadline by a jitter within a tenth of the wait.
	g2.cfg.Tuning.MaxHolders = -1
	c.Advance(time.Second)
	if err := g2.admit(ctx, ps, 1, false); !errors.As(err, &d) || d.Delay != 2100*time.Millisecond {
		t.Errorf("admit 2s before the deadline, no holder place = %v; want a 2.1s deferral", err)
	}
	// ReopenJitter < 0: no jitter. MaxHold < 0: even a 1s wait is deferred.
	g3 := newWith(rdb, Config{Tuning: Tuning{ReopenJitter: -1, MaxHold: -1}}, hooks{rand: func() float64 { return 0.5 }})
	short := Scope{Provider: "short"}
	g3.Pause(ctx, short, time.Second)
	if err := g3.admit(ctx, short, 1, false); !errors.As(err, &d) || d.Delay != time.Second {
		t.Errorf("admit during a 1s pause without hold or jitter = %v; want a 1s deferral", err)
	}
	// StoreTimeout 250ms.
	if g.store.Timeout() != 250*time.Millisecond {
		t.Errorf("store timeout %v, want 250ms", g.store.Timeout())
	}
}

// TestGateInvalidScope: the gate refuses scopes Validate rejects and writes
// nothing.
func TestGateInvalidScope(t *testing.T) {
	c, rdb := newMini(t)
	g := New(rdb, Config{})
	ctx := context.Background()
	secret := "sk_live_0123456789"
	for _, s := range []Scope{{}, {Account: "acct"}, {Provider: "ups", Account: secret + "\n"}, {Provider: "u\x00ps"}} {
		_, perr := g.Pause(ctx, s, time.Minute)
		_, rerr := g.Remaining(ctx, s)
		_, serr := g.State(ctx, s)
		uerr := g.Resume(ctx, s)
		for _, err := range []error{perr, rerr, serr, uerr} {
			if !errors.Is(err, ErrInvalidScope) {
				t.Errorf("%q: %v, want ErrInvalidScope", s, err)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("error %q holds the account", err)
			}
		}
	}
	if keys := c.MR.Keys(); len(keys) != 0 {
		t.Errorf("invalid scopes wrote %v", keys)
	}
}

// TestMiddlewareArchivesInvalidScope: a task whose scope cannot name a quota
// is archived (SkipRetry), its handler never runs, and the gate logs it once
// without quoting the account.
func TestMiddlewareArchivesInvalidScope(t *testing.T) {
	_, rdb := newMini(t)
	logs := new(testLogBuffer)
	g := New(rdb, Config{Logger: logs.logger()})
	secret := "sk_live_0123456789"
	runs := 0
	h := g.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs++; return nil }))
	err := h.ProcessTask(context.Background(), NewTask("poll", nil, Scope{Provider: "ups", Account: secret + "\n"}))
	if !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, ErrInvalidScope) || runs != 0 {
		t.Errorf("err = %v, runs = %d; want an archived ErrInvalidScope and no run", err, runs)
	}
	log := logs.String()
	if n := strings.Count(log, "archiving a task whose scope is invalid"); n != 1 {
		t.Errorf("%d log lines for one archived task, want 1: %s", n, log)
	}
	if strings.Contains(log, secret) || !strings.Contains(log, "type=poll") {
		t.Errorf("log %q holds the account or does not name the task type", log)
	}
}

// TestGateStoreDown: a store that never answers, or refuses connections,
// fails open (the handler runs) or, with FailClosed, defers with
// ReasonStoreDown; either way the call returns within the store's bound
// and the event is logged without the account's secret.
func TestGateStoreDown(t *testing.T) {
	const secret = "sk_live_51HqLyjWDarjtT1zdp7dc"
	s := Scope{Provider: "ups", Account: Fingerprint(secret)}
	now := t0.Add(250 * time.Millisecond)
	for _, tc := range []struct {
		name       string
		client     func(t *testing.T) *redis.Client
		timeout    time.Duration
		failClosed bool
		delay      time.Duration // Config.FailClosedDelay
		wantDelay  time.Duration
		timedOut   bool
	}{
		{"silent, fail open", func(t *testing.T) *redis.Client { r, _ := hangingRedis(t); return r }, 200 * time.Millisecond, false, 0, 0, true},
		{"silent, fail closed", func(t *testing.T) *redis.Client { r, _ := hangingRedis(t); return r }, 200 * time.Millisecond, true, 0, 10 * time.Second, true},
		{"refused, fail open", refusingRedis, 10 * time.Second, false, 0, 0, false},
		{"refused, fail closed", refusingRedis, 10 * time.Second, true, 3 * time.Second, 3 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := new(testLogBuffer)
			g := newWith(tc.client(t), Config{
				StoreTimeout: tc.timeout,
				FailClosed:   tc.failClosed,
				Logger:       slog.New(slog.NewTextHandler(logs, nil)),
				Tuning:       Tuning{FailClosedDelay: tc.delay},
			}, hooks{now: func() time.Time { return now }})
			runs := 0
			h := g.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs++; return nil }))
			start := time.Now()
			err := h.ProcessTask(context.Background(), NewTask("poll", nil, s))
			if elapsed := time.Since(start); elapsed > time.Minute {
				t.Errorf("admission took %v", elapsed) // without the bound, the silent store blocks forever
			}
			log := logs.String()
			t.Logf("log: %s", log)
			if strings.Contains(log, secret) {
				t.Errorf("the log holds the secret: %s", log)
			}
			if !strings.Contains(log, "scope="+s.String()) || !strings.Contains(log, "store unavailable") || !strings.Contains(log, "op=admit") {
				t.Errorf("log %q does not name the failure and the scope", log)
			}
			if tc.timedOut != strings.Contains(log, "store timeout") {
				t.Errorf("log %q: store timeout mentioned = %v, want %v", log, !tc.timedOut, tc.timedOut)
			}
			if !tc.failClosed {
				if err != nil || runs != 1 {
					t.Errorf("fail open: err %v, handler ran %d times; want nil, 1", err, runs)
				}
				if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "fail open") {
					t.Errorf("log %q, want a warning about failing open", log)
				}
				return
			}
			var d *Deferral
			if !errors.As(err, &d) || runs != 0 {
				t.Fatalf("fail closed: err %v, handler ran %d times; want a Deferral, 0", err, runs)
			}
			if d.Reason != ReasonStoreDown || d.Delay != tc.wantDelay || !d.RetryAt.Equal(now.Add(tc.wantDelay)) || d.Scope != s {
				t.Errorf("deferral %+v; want ReasonStoreDown for %v until %v", d, tc.wantDelay, now.Add(tc.wantDelay))
			}
			if IsFailure(err) {
				t.Error("a fail-closed deferral counts as a failure")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("deferral %q holds the secret", err)
			}
			if !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "fail closed") {
				t.Errorf("log %q, want an error about failing closed", log)
			}
		})
	}

	// The gate's own calls report the timeout, without the account.
	rdb, _ := hangingRedis(t)
	g := New(rdb, Config{StoreTimeout: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(new(testLogBuffer), nil))})
	ctx := context.Background()
	_, perr := g.Pause(ctx, s, time.Minute)
	_, rerr := g.Remaining(ctx, s)
	uerr := g.Resume(ctx, s)
	for _, err := range []error{perr, rerr, uerr} {
		if !errors.Is(err, ErrStoreTimeout) {
			t.Errorf("on a silent store: %v, want ErrStoreTimeout", err)
		}
		if err != nil && (strings.Contains(err.Error(), s.Account) || strings.Contains(err.Error(), secret)) {
			t.Errorf("error %q names the account", err)
		}
	}
}

// TestGateWrongTypeIsMalformed: a foreign value type at the pause key is a
// malformed record: tasks run, and a refusal can pause the scope again
// (Pause replaces the record).
func TestGateWrongTypeIsMalformed(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			s := Scope{Provider: "ups", Account: "acct-1"}
			if err := e.Rdb.HSet(ctx, scopeKeys(e.Prefix, s).Pause, "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
			g := New(e.Rdb, Config{Prefix: e.Prefix, StoreTimeout: 10 * time.Second})
			runs := 0
			h := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs++; return nil })
			if err := g.Middleware()(h).ProcessTask(ctx, NewTask("poll", nil, s)); err != nil || runs != 1 {
				t.Errorf("over a hash: %v, handler ran %d times; want nil, 1", err, runs)
			}
			if p, err := g.Pause(ctx, s, time.Minute); err != nil || p.Remaining != time.Minute {
				t.Errorf("Pause over a hash: %+v, %v; want a one-minute pause", p, err)
			}
			var d *Deferral
			if err := g.Middleware()(h).ProcessTask(ctx, NewTask("poll", nil, s)); !errors.As(err, &d) || runs != 1 {
				t.Errorf("after Pause: %v, handler ran %d times; want a deferral, 1", err, runs)
			}
		})
	}
}

// TestMiddlewareOutsideAsynqDefers: called with a context asynq's processor
// did not make (a unit test calling mux.ProcessTask), the Middleware cannot
// know the task's attempt and must not take it for a last attempt that holds
// in-process for the whole pause (on a frozen miniredis clock, forever): it
// returns the Deferral. The context's deadline only bounds the test if it
// regresses (it then fails with the context error).
func TestMiddlewareOutsideAsynqDefers(t *testing.T) {
	_, rdb := newMini(t)
	g := newWith(rdb, Config{}, hooks{rand: func() float64 { return 0 }})
	s := Scope{Provider: "ups"}
	if _, err := g.Pause(context.Background(), s, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs := 0
	h := g.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs++; return nil }))
	for _, task := range []*asynq.Task{NewTask("poll", nil, s), NewTask("poll", nil, s, asynq.MaxRetry(0))} {
		err := h.ProcessTask(ctx, task)
		var d *Deferral
		if !errors.As(err, &d) || d.Delay != 27500*time.Millisecond || d.Reason != ReasonPaused ||
			!d.RetryAt.Equal(t0.Add(27500*time.Millisecond)) || !d.Deadline.Equal(t0.Add(30*time.Second)) {
			t.Errorf("paused scope, no asynq context: err = %v; want a Deferral for the deadline t0+30s, back 2.5s before it", err)
		}
	}
	if runs != 0 {
		t.Errorf("the handler ran %d times during the pause", runs)
	}
}

// TestLimitOfAndCost: LimitOf wins over Limits when it answers; costs below
// 1 count as 1.
func TestLimitOfAndCost(t *testing.T) {
	g := New(nil, Config{
		Limits: map[string][]Limit{"ups": {PerSecond(5, 1)}},
		LimitOf: func(s Scope) ([]Limit, bool) {
			switch s.Account {
			case "gold":
				return []Limit{PerSecond(50, 10)}, true
			case "stacked":
				return []Limit{PerSecond(10, 10), {}, FixedWindow(50000, 24*time.Hour)}, true
			}
			return nil, false
		},
		Cost: func(t *asynq.Task) int { n, _ := strconv.Atoi(string(t.Payload())); return n },
	})
	for s, want := range map[Scope][]Limit{
		{Provider: "ups", Account: "gold"}:    {PerSecond(50, 10)},
		{Provider: "ups", Account: "free"}:    {PerSecond(5, 1)},
		{Provider: "ups", Account: "stacked"}: {PerSecond(10, 10), FixedWindow(50000, 24*time.Hour)}, // the zero limit left out
		{Provider: "fedex"}:                   nil,
	} {
		if got := g.limitsOf(s); !slices.Equal(got, want) {
			t.Errorf("limitsOf(%v) = %v, want %v", s, got, want)
		}
	}
	for payload, want := range map[string]int{"3": 3, "1": 1, "0": 1, "-4": 1, "x": 1} {
		if got := g.cost(asynq.NewTask("t", []byte(payload))); got != want {
			t.Errorf("cost(%q) = %d, want %d", payload, got, want)
		}
	}
	if got := New(nil, Config{}).cost(asynq.NewTask("t", nil)); got != 1 {
		t.Errorf("default cost = %d, want 1", got)
	}
}

// TestDeferralError: the message asynqmon shows reads at a glance: the
// provider and the reason first, who paused it, one instant (when the task
// comes back: RetryAt rounded up to asynq's whole second, in UTC to the
// millisecond), that no retry was spent, then the scope; never a secret.
func TestDeferralError(t *testing.T) {
	const secret = "sk_live_51HqLyjWDarjtT1zdp7dc"
	s := Scope{Provider: "ups", Account: Fingerprint(secret)}
	until := time.Date(2025, 1, 2, 4, 4, 14, 500_000_000, time.FixedZone("CET", 3600)) // 03:04:14.5Z
	for _, tc := range []struct {
		reason   Reason
		operator bool
		words    string
	}{
		{ReasonPaused, false, "ups paused by the provider;"},
		{ReasonPaused, true, "ups paused by an operator;"},
		{ReasonBudget, false, "ups budget spent until its reset;"},
		{ReasonProbe, false, "ups waiting for the provider"},
		{ReasonLimited, false, "ups at its configured limit;"},
		{ReasonLearned, false, "ups at the limit it learned"},
		{ReasonStoreDown, false, "ups gate store unavailable"},
		{Reason(9), false, "ups Reason(9);"},
	} {
		d := &Deferral{Scope: s, Delay: 9*time.Second + 400*time.Microsecond, RetryAt: until, Reason: tc.reason, Operator: tc.operator}
		msg := d.Error()
		for _, want := range []string{"quotagate: " + tc.words, "back at 2025-01-02T03:04:15.000Z, no retry spent", "(scope ups/" + s.Account + ", background)"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%v: %q does not contain %q", tc.reason, msg, want)
			}
		}
		if strings.Count(msg, "2025-") != 1 {
			t.Errorf("%v: %q names more than one instant", tc.reason, msg)
		}
		if strings.Contains(msg, secret) {
			t.Errorf("%v: %q holds the secret", tc.reason, msg)
		}
	}
	if msg := (&Deferral{Scope: Scope{Provider: "ups"}, Delay: time.Minute, RetryAt: until.Truncate(time.Second)}).Error(); !strings.HasSuffix(msg, "back at 2025-01-02T03:04:14.000Z, no retry spent (scope ups, background)") {
		t.Errorf("scope without account, RetryAt on a whole second: %q", msg)
	}
}

func TestReasonString(t *testing.T) {
	for r, want := range map[Reason]string{
		ReasonPaused: "paused", ReasonLimited: "limited", ReasonStoreDown: "store unavailable", Reason(7): "Reason(7)", Reason(-1): "Reason(-1)",
	} {
		if got := r.String(); got != want {
			t.Errorf("Reason(%d).String() = %q, want %q", int(r), got, want)
		}
	}
}

func TestRefusalError(t *testing.T) {
	cause := errors.New("429 Too Many Requests")
	until := time.Date(2025, 1, 2, 3, 4, 20, 0, time.UTC)
	for _, tc := range []struct {
		r    *Refusal
		want []string
	}{
		{&Refusal{Hint: 15 * time.Second}, []string{"refused", "retry hint 15s"}},
		{&Refusal{}, []string{"no readable retry hint"}},
		{&Refusal{Hint: -time.Second}, []string{"no readable retry hint"}},
		{&Refusal{Hint: 15 * time.Second, Err: cause}, []string{"retry hint 15s", ": 429 Too Many Requests"}},
	} {
		msg := tc.r.Error()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%q does not contain %q", msg, w)
			}
		}
	}
	// The Middleware wraps a recorded refusal with the deadline in force,
	// without changing it.
	r := &Refusal{Hint: 15 * time.Second, Err: cause}
	w := &recorded{err: fmt.Errorf("poll: %w", r), pause: Pause{Until: until}}
	if msg := w.Error(); !strings.HasPrefix(msg, "poll: quotagate: provider refused") || !strings.HasSuffix(msg, "; scope paused until 2025-01-02T03:04:20Z") {
		t.Errorf("recorded message %q", msg)
	}
	if got := (*Refusal)(nil); !errors.As(w, &got) || got != r || !IsFailure(w) {
		t.Error("a recorded refusal does not unwrap to the handler's Refusal, or is not a failure")
	}
	if r := (&Refusal{Err: cause}); !errors.Is(r, cause) {
		t.Error("a Refusal does not unwrap to its cause")
	}
}

func TestIsFailure(t *testing.T) {
	d := &Deferral{Scope: Scope{Provider: "ups"}, Delay: time.Second}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{d, false},
		{fmt.Errorf("poll: %w", d), false},
		{fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", d)), false},
		{errors.Join(errors.New("other"), d), false},
		{&Refusal{Hint: time.Second}, true},
		{fmt.Errorf("poll: %w", &Refusal{}), true},
		{errors.New("boom"), true},
		{asynq.SkipRetry, true},
		{exhausted{errors.New("boom")}, true},
	} {
		if got := IsFailure(tc.err); got != tc.want {
			t.Errorf("IsFailure(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !errors.Is(exhausted{errors.New("boom")}, asynq.SkipRetry) {
		t.Error("exhausted does not wrap asynq.SkipRetry")
	}
}

// TestMaxHolders: at most MaxHolders workers of a process wait in-process for
// a short pause of one scope; the next is deferred at once through asynq, so
// the other providers keep their workers.
func TestMaxHolders(t *testing.T) {
	_, rdb := newMini(t) // frozen clock: a holder waits until its context ends
	g := New(rdb, Config{Tuning: Tuning{MaxHolders: 1, MaxHold: 2 * time.Second}})
	s := Scope{Provider: "ups"}
	if _, err := g.Pause(context.Background(), s, time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan error, 1)
	go func() { held <- g.admit(ctx, s, 1, false) }()
	k := scopeKeys(g.cfg.Prefix, s).Pause
	eventually(t, "the first worker holds", func() bool { return g.holders.Held(k) == 1 })
	var d *Deferral
	if err := g.admit(context.Background(), s, 1, false); !errors.As(err, &d) || d.Reason != ReasonPaused {
		t.Fatalf("second worker: %v, want a deferral while the first holds", err)
	}
	if err := g.admit(context.Background(), Scope{Provider: "fedex"}, 1, false); err != nil {
		t.Fatalf("another provider: %v, want admitted", err)
	}
	cancel()
	if err := <-held; !errors.Is(err, context.Canceled) {
		t.Fatalf("holder: %v, want its context's end", err)
	}
	if n := g.holders.Held(k); n != 0 {
		t.Fatalf("%d workers still counted as held after the holder left", n)
	}
}

// TestLimitedDeferralWakesBeforeItsSlot: a task deferred to a slot of the
// limit beyond MaxHold wakes MaxHold before the slot and waits the rest
// in-process, so asynq's whole-second wake-ups leave no gap in the pace.
func TestLimitedDeferralWakesBeforeItsSlot(t *testing.T) {
	_, rdb := newMini(t)
	g := New(rdb, Config{Limits: map[string][]Limit{"ups": {PerSecond(2, 1)}}, Tuning: Tuning{MaxHold: 500 * time.Millisecond}})
	s := Scope{Provider: "ups"}
	ctx := context.Background()
	for i := range 2 { // now, then a reservation 500ms ahead (waited in-process)
		if err := g.admit(ctx, s, 1, false); err != nil {
			t.Fatalf("admission %d: %v", i, err)
		}
	}
	var d *Deferral
	err := g.admit(ctx, s, 1, false) // its slot is 1s ahead: beyond MaxHold
	if !errors.As(err, &d) || d.Reason != ReasonLimited || d.Delay != 500*time.Millisecond || !d.RetryAt.Equal(t0.Add(500*time.Millisecond)) {
		t.Fatalf("third admission: %v (%+v); want a limited deferral of 500ms (1s slot − 500ms hold)", err, d)
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
	checkExpireAt(t, gates[0].store.Client(), scopeKeys(prefix, s).Pause, final.Until)
}

func slicesMax(ds []time.Duration) time.Duration {
	m := time.Duration(math.MinInt64)
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
