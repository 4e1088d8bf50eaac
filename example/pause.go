package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
)

// This file is the "pause" mode: the plain shared pause of the reference
// article, alone, as a baseline for the benchmark: on a 429 the task sets
// the scope's deadline to max(existing, now + hint) in Redis, atomically;
// before its handler every task checks the deadline and, while it is in
// the future, defers itself through asynq for the time that remains.
// Nothing is learned and nothing is observed: no budget headers, no limit,
// no in-process hold, no Transport. It is independent of quotagate's
// admission core: it only reads a task's scope (quotagate.ScopeOf) and the
// refusal the tracking client returns (quotagate.Refusal).

// pauseFallback is the pause of a refusal without a readable hint: a
// fixed minute, the whole pause, with no episode and no probe. Shorter
// than the article's first 15 minutes, so that a benchmark's hintless
// cells make some progress within a run.
const pauseFallback = time.Minute

// plainPause is the baseline's state: one Redis key per scope,
// <prefix>:{<provider>:<account>}:pause, holding the deadline in Unix ms
// on Redis TIME, expiring at it.
type plainPause struct {
	rdb    redis.UniversalClient
	prefix string
}

func (p plainPause) key(s quotagate.Scope) string {
	return fmt.Sprintf("%s:{%s:%s}:pause", p.prefix, s.Provider, s.Account)
}

// recordScript sets the deadline to max(existing, TIME + ARGV[1] ms) and
// returns the milliseconds left until it.
//
//	KEYS[1] the scope's pause key
//	ARGV[1] the hint in milliseconds (> 0)
var recordScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur > deadline then deadline = cur end
redis.call('SET', KEYS[1], deadline, 'PX', deadline - now)
return deadline - now
`)

// remainingScript returns the milliseconds left until the scope's
// deadline, 0 when there is none or it has passed.
//
//	KEYS[1] the scope's pause key
var remainingScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur > now then return cur - now end
return 0
`)

// pauseDeferral is the error of a task deferred by the plain pause, or of
// a refused one: it is retried after Delay and is not a failure.
type pauseDeferral struct{ Delay time.Duration }

func (d *pauseDeferral) Error() string { return fmt.Sprintf("scope paused, retry in %v", d.Delay) }

// middleware checks the scope's deadline before the handler, and records
// a refusal's hint after it. A store error lets the task run (open).
func (p plainPause) middleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		s, ok := quotagate.ScopeOf(t)
		if !ok {
			return next.ProcessTask(ctx, t)
		}
		k := []string{p.key(s)}
		if ms, err := remainingScript.Run(ctx, p.rdb, k).Int64(); err == nil && ms > 0 {
			return &pauseDeferral{Delay: time.Duration(ms) * time.Millisecond}
		}
		err := next.ProcessTask(ctx, t)
		var ref *quotagate.Refusal
		if !errors.As(err, &ref) {
			return err
		}
		hint := ref.Hint
		if hint <= 0 {
			hint = pauseFallback
		}
		ms, serr := recordScript.Run(ctx, p.rdb, k, max(hint.Milliseconds(), 1)).Int64()
		if serr != nil {
			ms = hint.Milliseconds()
		}
		return &pauseDeferral{Delay: time.Duration(ms) * time.Millisecond}
	})
}

// pauseIsFailure: a deferral is not a failure.
func pauseIsFailure(err error) bool {
	var d *pauseDeferral
	return !errors.As(err, &d)
}

// pauseRetryDelay retries a deferred task once its deadline has passed:
// asynq keeps retry times in whole seconds, so the delay is rounded up to
// the next second, never early.
func pauseRetryDelay(n int, err error, t *asynq.Task) time.Duration {
	var d *pauseDeferral
	if errors.As(err, &d) {
		return (d.Delay + time.Second - 1).Truncate(time.Second)
	}
	return asynq.DefaultRetryDelayFunc(n, err, t)
}
