package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
)

// TestPlainPause drives the baseline's middleware on miniredis with Redis
// TIME fixed: a refusal sets the deadline, a shorter hint never moves it
// earlier, peers are deferred for what remains, and the scope opens at it.
func TestPlainPause(t *testing.T) {
	m := miniredis.RunT(t)
	now := t0
	m.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	p := plainPause{rdb: rdb, prefix: "test"}

	task := quotagate.NewTask("poll", nil, quotagate.Scope{Provider: "acme", Account: quotagate.Fingerprint("k")})
	var answer error // what the handler returns
	ran := 0
	h := p.middleware(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran++; return answer }))
	step := func(at time.Duration, ans error) (error, int) {
		now = t0.Add(at)
		m.SetTime(now)
		answer, ran = ans, 0
		return h.ProcessTask(context.Background(), task), ran
	}
	delayOf := func(err error) time.Duration {
		var d *pauseDeferral
		if !errors.As(err, &d) {
			return -1
		}
		return d.Delay
	}
	for i, s := range []struct {
		at    time.Duration
		ans   error
		ran   int
		delay time.Duration // -1: no deferral
	}{
		{0, nil, 1, -1},
		{100 * time.Millisecond, &quotagate.Refusal{Hint: 3 * time.Second}, 1, 3 * time.Second}, // deadline +3.1 s
		{600 * time.Millisecond, nil, 0, 2500 * time.Millisecond},                               // deferred before the handler
		// A shorter hint does not move the deadline earlier (a refusal in flight).
		{700 * time.Millisecond, &quotagate.Refusal{Hint: time.Second}, 0, 2400 * time.Millisecond},
		{3100 * time.Millisecond, &quotagate.Refusal{Hint: time.Second}, 1, time.Second}, // open again, refused: +4.1 s
		{4100 * time.Millisecond, nil, 1, -1},
		{5 * time.Second, &quotagate.Refusal{}, 1, pauseFallback}, // no hint: the fallback
	} {
		err, ran := step(s.at, s.ans)
		if ran != s.ran || delayOf(err) != s.delay {
			t.Fatalf("step %d at +%v: ran %d, deferral %v (%v); want ran %d, deferral %v", i, s.at, ran, delayOf(err), err, s.ran, s.delay)
		}
	}
	if !m.Exists("test:{acme:" + quotagate.Fingerprint("k") + "}:pause") {
		t.Error("no pause key under the run's prefix")
	}
}

func TestPauseRetryDelay(t *testing.T) {
	for _, c := range []struct {
		err  error
		want time.Duration
	}{
		{&pauseDeferral{Delay: 2500 * time.Millisecond}, 3 * time.Second}, // whole seconds, never early
		{&pauseDeferral{Delay: 3 * time.Second}, 3 * time.Second},
		{&pauseDeferral{Delay: time.Millisecond}, time.Second},
	} {
		if got := pauseRetryDelay(0, c.err, nil); got != c.want {
			t.Errorf("pauseRetryDelay(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if pauseIsFailure(&pauseDeferral{}) || !pauseIsFailure(errors.New("boom")) {
		t.Error("pauseIsFailure: a deferral is not a failure, another error is")
	}
}
