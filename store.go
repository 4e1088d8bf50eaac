package quotagate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The store keeps a scope's shared state in Redis. Every deadline is computed
// inside a script from Redis TIME: no worker clock enters the shared state.
// Records that are missing, expired or malformed read as "open".

// luaPrelude is shared by the scripts: the Redis clock and a strict reader of
// integer records (anything else is malformed and reads as absent).
const luaPrelude = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local function int(v) -- v from redis.pcall: an error (WRONGTYPE) is malformed too
  if type(v) == 'string' and #v <= 16 and string.match(v, '^%d+$') then return tonumber(v) end
  return nil
end
`

// pauseScript moves a scope's pause deadline later, never earlier.
//
// KEYS[1]: the scope's pause key
// ARGV[1]: proposed pause, ms (already clamped to [1 s, max pause])
// ARGV[2]: max pause, ms: a record farther ahead than this is malformed
// ARGV[3]: the gate's announcement channel
// returns: {deadline in force (Unix ms), remaining ms}
//
// deadline = max(existing, now + ARGV[1]); the key expires at the deadline.
// KEYS[1] is published on ARGV[3] so gates forget that the scope was open.
var pauseScript = redis.NewScript(luaPrelude + `
local deadline = now_ms + tonumber(ARGV[1])
local cur = int(redis.pcall('GET', KEYS[1]))
redis.call('PUBLISH', ARGV[3], KEYS[1])
if cur and cur > deadline and cur - now_ms <= tonumber(ARGV[2]) then
  return {cur, cur - now_ms}
end
redis.call('SET', KEYS[1], deadline)
redis.call('PEXPIREAT', KEYS[1], deadline)
return {deadline, deadline - now_ms}
`)

// remainingScript reads a scope's pause and how far its limit is spent ahead.
//
// KEYS[1]: the scope's pause key (Unix ms)   KEYS[2]: its limit TAT key (Unix µs)
// ARGV[1]: max pause, ms
// returns: {deadline (Unix ms, 0 when open), remaining ms (0 when open),
// limit backlog µs (TAT − now; 0 without a limit state or once it is past)}
var remainingScript = redis.NewScript(luaPrelude + `
local backlog = 0
local tat = int(redis.pcall('GET', KEYS[2]))
if tat and tat > now_us then backlog = tat - now_us end
local cur = int(redis.pcall('GET', KEYS[1]))
if cur and cur > now_ms and cur - now_ms <= tonumber(ARGV[1]) then
  return {cur, cur - now_ms, backlog}
end
return {0, 0, backlog}
`)

// admitScript is the admission of one task: is the scope paused, and may it
// spend capacity now? One round trip answers both.
//
// KEYS[1]: pause key (Unix ms)   KEYS[2]: limit TAT key (Unix µs)
// KEYS[3]: reopening line key (Unix µs)
// ARGV[1]: emission interval per unit of cost, µs (0: the scope has no limit)
// ARGV[2]: burst (units)          ARGV[3]: cost (units)
// ARGV[4]: hold, µs: how far ahead a slot may be reserved
// ARGV[5]: max pause, ms
// returns: {code, wait µs, pause deadline (Unix ms, 0 when open), now (Unix ms)}
//
//	code 0 admitted: the slot starts after wait (0 ≤ wait ≤ hold); capacity is spent
//	code 1 paused: come back after wait, at the deadline or, with a limit, at
//	       the next slot of the reopening line after it; nothing is spent
//	code 2 limited: come back after wait, at the next slot of the line; nothing is spent
//
// The limit is GCRA: TAT (theoretical arrival time) moves by interval×cost per
// admission; a request is allowed once now ≥ TAT + interval×cost − interval×burst.
// While a pause is in force the TAT is raised so the limit is empty at the
// deadline: the first second after a pause stays within the rate. The line
// spreads deferred tasks one interval×cost apart instead of waking them at once.
var admitScript = redis.NewScript(luaPrelude + `
local interval = tonumber(ARGV[1])
local inc = interval * tonumber(ARGV[3])
local tau = interval * tonumber(ARGV[2])
local function line(earliest)
  local slot = int(redis.pcall('GET', KEYS[3]))
  if not slot or slot < earliest then slot = earliest end
  local nxt = slot + inc
  redis.call('SET', KEYS[3], nxt, 'PX', math.ceil((nxt - now_us) / 1000))
  return slot - now_us
end
local deadline = int(redis.pcall('GET', KEYS[1]))
if deadline and deadline > now_ms and deadline - now_ms <= tonumber(ARGV[5]) then
  if interval == 0 then
    return {1, (deadline - now_ms) * 1000, deadline, now_ms}
  end
  local empty = deadline * 1000 + tau - interval
  local tat = int(redis.pcall('GET', KEYS[2]))
  if not tat or tat < empty then
    redis.call('SET', KEYS[2], empty, 'PX', math.ceil((empty - now_us) / 1000) + 1)
  end
  return {1, line(deadline * 1000), deadline, now_ms}
end
if interval == 0 then
  return {0, 0, 0, now_ms}
end
local tat = int(redis.pcall('GET', KEYS[2]))
if not tat or tat < now_us then tat = now_us end
local new_tat = tat + inc
local wait = new_tat - tau - now_us
if wait <= tonumber(ARGV[4]) then
  redis.call('SET', KEYS[2], new_tat, 'PX', math.ceil((new_tat - now_us) / 1000))
  if wait < 0 then wait = 0 end
  return {0, wait, 0, now_ms}
end
return {2, line(new_tat - tau), 0, now_ms}
`)

// keys are the Redis keys of one scope. Every key of a scope shares one hash
// tag built from the scope, so multi-key scripts stay Redis Cluster safe,
// while different scopes spread over slots:
//
//	<prefix>:{<provider>:<account>}:pause   shared pause deadline, Unix ms
//	<prefix>:{<provider>:<account>}:tat     throughput limit state (GCRA), Unix µs
//	<prefix>:{<provider>:<account>}:line    next reopening slot, Unix µs
//
// Provider and account are escaped so that neither can end the hash tag or
// make two scopes collide: '%', ':', '{' and '}' become %25, %3A, %7B, %7D.
type keys struct {
	pause, tat, line string
}

var (
	keyEscaper   = strings.NewReplacer("%", "%25", ":", "%3A", "{", "%7B", "}", "%7D")
	braceEscaper = strings.NewReplacer("{", "%7B", "}", "%7D")
)

func scopeKeys(prefix string, s Scope) keys {
	base := prefix + ":{" + keyEscaper.Replace(s.Provider) + ":" + keyEscaper.Replace(s.Account) + "}:"
	return keys{pause: base + "pause", tat: base + "tat", line: base + "line"}
}

// keyUnescaper reverses keyEscaper.
var keyUnescaper = strings.NewReplacer("%25", "%", "%3A", ":", "%7B", "{", "%7D", "}")

// scopeOfPauseKey is the exact inverse of scopeKeys(prefix, s).pause: it
// returns the valid scope whose pause key under prefix is key, and false for
// any key scopeKeys cannot have written (another prefix or kind, raw ':' or
// '%' in a field, a lowercase or unknown escape, an invalid scope).
func scopeOfPauseKey(prefix, key string) (Scope, bool) {
	tag, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return Scope{}, false
	}
	if tag, ok = strings.CutSuffix(tag, "}:pause"); !ok {
		return Scope{}, false
	}
	p, a, _ := strings.Cut(tag, ":")
	s := Scope{Provider: keyUnescaper.Replace(p), Account: keyUnescaper.Replace(a)}
	if s.Validate() != nil || scopeKeys(prefix, s).pause != key {
		return Scope{}, false
	}
	return s, true
}

// globEscaper quotes the characters special to Redis's MATCH patterns.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// pauseKeyPattern is the SCAN MATCH pattern of every pause key under prefix.
func pauseKeyPattern(prefix string) string { return globEscaper.Replace(prefix) + ":{*}:pause" }

// store runs the scripts with a bounded timeout.
type store struct {
	rdb      redis.UniversalClient
	prefix   string
	timeout  time.Duration
	maxPause time.Duration
	direct   bool     // the client honours context deadlines: no watchdog goroutine needed
	metrics  *metrics // nil: not counted
}

// honoursDeadlines reports whether go-redis applies context deadlines to
// socket I/O for this client (Options.ContextTimeoutEnabled).
func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// ErrStoreTimeout is returned (wrapped) when Redis does not answer within
// Config.StoreTimeout.
var ErrStoreTimeout = errors.New("quotagate: store timeout")

// run evaluates a script and returns its integer array reply; op names the
// script in the metrics.
func (s *store) run(ctx context.Context, op string, script *redis.Script, keys []string, args ...any) ([]int64, error) {
	return bounded(ctx, s, op, func(ctx context.Context) ([]int64, error) {
		return script.Run(ctx, s.rdb, keys, args...).Int64Slice()
	})
}

// bounded runs call within s.timeout. go-redis ignores context deadlines on
// socket I/O unless Options.ContextTimeoutEnabled is set; for such a client
// the call runs in a goroutine and, past the timeout, the caller goes on while
// the call finishes on its own. A call cut by the timeout returns an error
// wrapping ErrStoreTimeout. Its duration and failure are counted under op
// (see metrics.go).
func bounded[T any](ctx context.Context, s *store, op string, call func(context.Context) (T, error)) (v T, err error) {
	defer s.metrics.roundTrip(ctx, op, time.Now(), &err)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	var r result
	if s.direct {
		r.v, r.err = call(ctx)
	} else {
		done := make(chan result, 1)
		go func() {
			v, err := call(ctx)
			done <- result{v, err}
		}()
		select {
		case r = <-done:
		case <-ctx.Done():
			r.err = ctx.Err()
		}
	}
	var netErr net.Error
	if r.err != nil && (errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.As(r.err, &netErr) && netErr.Timeout()) {
		var zero T
		return zero, fmt.Errorf("%w after %v: %v", ErrStoreTimeout, s.timeout, r.err)
	}
	return r.v, r.err
}

func want(v []int64, n int, err error) error {
	if err == nil && len(v) != n {
		err = fmt.Errorf("quotagate: unexpected script reply %v", v)
	}
	return err
}

// pause records a pause of d (clamped by the caller) and returns the
// deadline in force and the time remaining until it, both per Redis TIME.
func (s *store) pause(ctx context.Context, k keys, d time.Duration) (until time.Time, remaining time.Duration, err error) {
	v, err := s.run(ctx, "pause", pauseScript, []string{k.pause}, d.Milliseconds(), s.maxPause.Milliseconds(), s.channel())
	if err = want(v, 2, err); err != nil {
		return time.Time{}, 0, err
	}
	return time.UnixMilli(v[0]), time.Duration(v[1]) * time.Millisecond, nil
}

// remaining reads the pause of a scope and its limit backlog (Scope unset).
func (s *store) remaining(ctx context.Context, k keys) (Pause, error) {
	v, err := s.run(ctx, "remaining", remainingScript, []string{k.pause, k.tat}, s.maxPause.Milliseconds())
	if err = want(v, 3, err); err != nil {
		return Pause{}, err
	}
	p := Pause{LimitBacklog: time.Duration(v[2]) * time.Microsecond}
	if v[0] != 0 {
		p.Until, p.Remaining = time.UnixMilli(v[0]), time.Duration(v[1])*time.Millisecond
	}
	return p, nil
}

// admission is the answer of admitScript.
type admission struct {
	code  int64         // admitted, paused or limited
	wait  time.Duration // see admitScript
	until time.Time     // the pause deadline, zero when not paused
	now   time.Time     // Redis TIME of the decision
}

const (
	admitted int64 = iota
	paused
	limited
)

func (s *store) admit(ctx context.Context, k keys, l Limit, cost int, hold time.Duration) (admission, error) {
	v, err := s.run(ctx, "admit", admitScript, []string{k.pause, k.tat, k.line},
		l.interval(), l.burst(), cost, hold.Microseconds(), s.maxPause.Milliseconds())
	if err = want(v, 4, err); err != nil {
		return admission{}, err
	}
	a := admission{code: v[0], wait: time.Duration(v[1]) * time.Microsecond, now: time.UnixMilli(v[3])}
	if v[2] != 0 {
		a.until = time.UnixMilli(v[2])
	}
	return a, nil
}

// channel is where pauses are announced (see openCache).
func (s *store) channel() string { return s.prefix + ":paused" }

// resume deletes a scope's pause.
func (s *store) resume(ctx context.Context, k keys) error {
	_, err := bounded(ctx, s, "resume", func(ctx context.Context) (int64, error) { return s.rdb.Del(ctx, k.pause).Result() })
	return err
}
