package quotagate

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/quotagate/quotagate/internal/decide"
	"github.com/quotagate/quotagate/internal/model"
)

// TestRetryDelay is RetryDelay's step table with the worker's clock fixed
// (the gate's clock, newWith) on a whole second or a quarter past one. Retry times are
// whole seconds in asynq: every delay lands now+delay on a whole second, no
// earlier than the delay asked for.
func TestRetryDelay(t *testing.T) {
	const (
		h = time.Hour
		m = time.Minute
		s = time.Second
	)
	quarter := 250 * time.Millisecond
	for _, tc := range []struct {
		name string
		off  time.Duration // Now = t0 + off
		n    int
		err  error
		want time.Duration
	}{
		{"deferral", 0, 0, &Deferral{Delay: 3 * s}, 3 * s},
		{"deferral, clock off the second", quarter, 0, &Deferral{Delay: 3 * s}, 3*s + 750*time.Millisecond},
		{"deferral, sub-second", quarter, 0, &Deferral{Delay: 3500 * time.Millisecond}, 3*s + 750*time.Millisecond},
		{"deferral, just past the second", 0, 0, &Deferral{Delay: 3*s + time.Nanosecond}, 4 * s},
		{"deferral, zero", 0, 0, &Deferral{}, 0},
		{"deferral, zero off the second", quarter, 0, &Deferral{}, 750 * time.Millisecond},
		{"deferral, negative", 0, 5, &Deferral{Delay: -5 * s}, 0},
		{"deferral ignores attempt", 0, 20, &Deferral{Delay: 9 * s}, 9 * s},
		{"wrapped deferral", 0, 0, fmt.Errorf("poll: %w", &Deferral{Delay: 9 * s}), 9 * s},
		{"deferral woken early: its whole second", quarter, 0, &Deferral{Delay: 750 * time.Millisecond, wake: t0.Add(s)}, 750 * time.Millisecond},
		{"deferral woken early, its second come: now", 2 * s, 0, &Deferral{Delay: 750 * time.Millisecond, wake: t0.Add(s)}, 0},
		{"refusal, hint 15s", 0, 0, &Refusal{Hint: 15 * s}, 15 * s},
		{"refusal, hint 15s off the second", quarter, 0, &Refusal{Hint: 15 * s}, 15*s + 750*time.Millisecond},
		{"refusal, fractional hint", 0, 0, &Refusal{Hint: 15*s + 200*time.Millisecond}, 16 * s},
		{"refusal, shared pause longer than hint", 0, 0, rec(&Refusal{Hint: 5 * s}, 20*s), 20 * s},
		{"refusal, hint longer than shared pause", 0, 0, rec(&Refusal{Hint: 15 * s}, 9*s), 15 * s},
		{"refusal, store down (no Remaining)", 0, 3, &Refusal{Hint: 15 * s}, 15 * s},
		{"refusal, tiny hint", 0, 0, &Refusal{Hint: time.Millisecond}, MinPause},
		{"refusal, huge hint", 0, 0, &Refusal{Hint: math.MaxInt64}, 12 * h},
		{"refusal, hint over the cap", 0, 0, &Refusal{Hint: 13 * h}, 12 * h},
		{"refusal, negative hint falls back", 0, 0, &Refusal{Hint: -5 * s}, 15 * m},
		{"refusal, min hint falls back", 0, 2, &Refusal{Hint: math.MinInt64}, h},
		{"wrapped refusal", 0, 0, fmt.Errorf("a: %w", fmt.Errorf("b: %w", &Refusal{Hint: 15 * s})), 15 * s},
		{"no hint, attempt 1", 0, 0, &Refusal{}, 15 * m},
		{"no hint, attempt 2", 0, 1, &Refusal{}, 30 * m},
		{"no hint, attempt 3", 0, 2, &Refusal{}, h},
		{"no hint, attempt 4", 0, 3, &Refusal{}, 2 * h},
		{"no hint, attempt 5", 0, 4, &Refusal{}, 4 * h},
		{"no hint, attempt 6", 0, 5, &Refusal{}, 8 * h},
		{"no hint, attempt 7", 0, 6, &Refusal{}, 12 * h},
		{"no hint, attempt 8", 0, 7, &Refusal{}, 12 * h},
		{"no hint, attempt 1001", 0, 1000, &Refusal{}, 12 * h},
		{"no hint, attempt 1e9", 0, 1_000_000_000, &Refusal{}, 12 * h},
		{"no hint, shared pause longer", 0, 0, rec(&Refusal{}, 2*h), 2 * h},
		{"no hint, the shared pause is the delay", 0, 0, rec(&Refusal{}, m), m},
		{"no hint, a hintless episode's first pause", quarter, 4, rec(&Refusal{}, s), s + 750*time.Millisecond},
		{"no hint off the second", quarter, 0, &Refusal{}, 15*m + 750*time.Millisecond},
		{"shared pause read 15 ms before the delay is asked: less the 15 ms", 0, 0,
			&recorded{err: &Refusal{}, pause: Pause{Remaining: 2*s + 2*time.Millisecond}, at: t0.Add(-15 * time.Millisecond)}, 2 * s},
		{"shared pause read longer ago than it lasts: now", quarter, 0,
			&recorded{err: &Refusal{Hint: time.Millisecond}, pause: Pause{Remaining: s}, at: t0.Add(-2 * s)}, s + 750*time.Millisecond},
	} {
		now := t0.Add(tc.off)
		g := newWith(nil, Config{}, hooks{now: func() time.Time { return now }})
		next := func(int, error, *asynq.Task) time.Duration {
			t.Errorf("%s: went to next", tc.name)
			return 0
		}
		got := g.RetryDelay(next)(tc.n, tc.err, nil)
		if got != tc.want {
			t.Errorf("%s: RetryDelay(%d, %v) = %v, want %v", tc.name, tc.n, tc.err, got, tc.want)
		}
		if at := now.Add(got); !at.Equal(at.Truncate(time.Second)) {
			t.Errorf("%s: now+%v = %v, not a whole second", tc.name, got, at)
		}
	}
}

// TestRetryDelayHugeDeferral: no panic and no negative delay for absurd
// durations.
func TestRetryDelayHugeDeferral(t *testing.T) {
	g := newWith(nil, Config{}, hooks{now: func() time.Time { return t0.Add(250 * time.Millisecond) }})
	rd := g.RetryDelay(nil)
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1, 200 * 365 * 24 * time.Hour} {
		if got := rd(0, &Deferral{Delay: d}, nil); got < d-time.Second {
			t.Errorf("RetryDelay(Deferral %v) = %v", d, got)
		}
	}
}

// TestRetryDelayMaxIntAttempt: attempt n+1 would overflow at n = MaxInt
// and drop the fallback schedule from its 12h cap back to 15m; RetryDelay
// saturates instead, so the schedule stays monotonic at the edge.
func TestRetryDelayMaxIntAttempt(t *testing.T) {
	g := newWith(nil, Config{}, hooks{now: func() time.Time { return t0 }})
	if got := g.RetryDelay(nil)(math.MaxInt, &Refusal{}, nil); got != 12*time.Hour {
		t.Errorf("RetryDelay(n=MaxInt, no hint) = %v, want the 12h cap", got)
	}
}

// TestRetryDelayNext: errors the gate does not own go to next, unchanged.
func TestRetryDelayNext(t *testing.T) {
	g := newWith(nil, Config{}, hooks{now: func() time.Time { return t0 }})
	task := asynq.NewTask("poll", nil)
	var calls []string
	next := func(n int, err error, got *asynq.Task) time.Duration {
		calls = append(calls, fmt.Sprintf("%d %v %v", n, err, got == task))
		return 42 * time.Second
	}
	rd := g.RetryDelay(next)
	for i, err := range []error{errors.New("boom"), asynq.SkipRetry, fmt.Errorf("wrapped: %w", errors.New("x"))} {
		if got := rd(i, err, task); got != 42*time.Second {
			t.Errorf("RetryDelay(%v) = %v, want next's 42s", err, got)
		}
	}
	want := []string{"0 boom true", "1 skip retry for the task true", "2 wrapped: x true"}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("next called with %q, want %q", calls, want)
	}
	rd(0, &Deferral{Delay: time.Second}, task)
	rd(0, &Refusal{Hint: time.Second}, task)
	if len(calls) != 3 {
		t.Errorf("next called for the gate's own errors: %q", calls)
	}

	// nil next: asynq.DefaultRetryDelayFunc, n⁴+15 s plus up to 29·(n+1) s.
	def := g.RetryDelay(nil)
	for n := range 4 {
		base := time.Duration(n*n*n*n+15) * time.Second
		for range 20 {
			if got := def(n, errors.New("boom"), task); got < base || got > base+time.Duration(29*(n+1))*time.Second {
				t.Fatalf("RetryDelay(nil)(%d, boom) = %v, outside asynq's default [%v, %v]", n, got, base, base+time.Duration(29*(n+1))*time.Second)
			}
		}
	}
}

// TestBackoff is the doc comment's interval table and its edges.
func TestBackoff(t *testing.T) {
	const (
		h = time.Hour
		m = time.Minute
		s = time.Second
	)
	for _, tc := range []struct {
		base, limit time.Duration
		attempt     int
		want        time.Duration
	}{
		{15 * m, 12 * h, math.MinInt, 15 * m},
		{15 * m, 12 * h, -1, 15 * m},
		{15 * m, 12 * h, 0, 15 * m},
		{15 * m, 12 * h, 1, 15 * m},
		{15 * m, 12 * h, 2, 30 * m},
		{15 * m, 12 * h, 3, h},
		{15 * m, 12 * h, 4, 2 * h},
		{15 * m, 12 * h, 5, 4 * h},
		{15 * m, 12 * h, 6, 8 * h},
		{15 * m, 12 * h, 7, 12 * h},
		{15 * m, 12 * h, 8, 12 * h},
		{15 * m, 12 * h, 1000, 12 * h},
		{15 * m, 12 * h, math.MaxInt, 12 * h},
		{s, 10 * s, 4, 8 * s},
		{s, 10 * s, 5, 10 * s},
		{3 * s, 10 * s, 2, 6 * s},
		{3 * s, 10 * s, 3, 10 * s},
		{20 * s, 10 * s, 1, 10 * s}, // base above the cap
		{0, 10 * s, 5, 0},
		{-s, 10 * s, 5, 0},
		{s, 0, 5, 0},
		{1, math.MaxInt64, 63, 1 << 62},
		{1, math.MaxInt64, 64, math.MaxInt64},
		{math.MaxInt64/2 + 1, math.MaxInt64, 3, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt, math.MaxInt64},
	} {
		if got := backoff(tc.base, tc.limit, tc.attempt); got != tc.want {
			t.Errorf("backoff(%v, %v, %d) = %v, want %v", tc.base, tc.limit, tc.attempt, got, tc.want)
		}
	}
}

// rec is a refusal as the Middleware returns it after recording a pause with
// remaining time left.
func rec(r *Refusal, remaining time.Duration) error {
	return &recorded{err: r, pause: Pause{Remaining: remaining}}
}

// TestDeferralWokenEarly: a verdict that may wake early (decide.WakeEarly)
// defers its task to the start of the second its wait ends in, on the
// worker's clock, and RetryDelay keeps that second; one that may not is
// aligned up past its wait.
func TestDeferralWokenEarly(t *testing.T) {
	const ms = time.Millisecond
	now := t0.Add(120 * ms)
	g := newWith(nil, Config{}, hooks{now: func() time.Time { return now }})
	a := decide.Answer{Code: model.Paused, Wait: 1030 * ms, Now: now, Until: now.Add(1030 * ms)}
	for _, tc := range []struct {
		name  string
		early bool
		delay time.Duration // the Deferral's
		retry time.Duration // RetryDelay's
	}{
		{"early: the deadline's second", true, 880 * ms, 880 * ms},
		{"not early: the second after the deadline", false, 1030 * ms, 1880 * ms},
	} {
		d := g.deferralOf(a, decide.Verdict{Act: decide.Defer, Retry: 1030 * ms, Early: tc.early})
		if d.Delay != tc.delay {
			t.Errorf("%s: Delay %v, want %v", tc.name, d.Delay, tc.delay)
		}
		if got := g.RetryDelay(nil)(0, &d, nil); got != tc.retry {
			t.Errorf("%s: RetryDelay %v, want %v", tc.name, got, tc.retry)
		}
	}
}
