package quotagate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
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

// pauseScript moves a scope's pause deadline later, never earlier, and
// learns from the refusal that caused it.
//
// KEYS[1]: the scope's pause key   KEYS[2]: the scope's learned state (hash)
// KEYS[3]: the scope's budget (hash: fc, its first contact, Unix ms)
// ARGV[1]: proposed pause, ms (already clamped to [1 s, max pause])
// ARGV[2]: max pause, ms: a record farther ahead than this is malformed
// ARGV[3]: the gate's announcement channel
// ARGV[4]: 1 when the pause comes from a refusal with a hint (learn from it), else 0
// ARGV[5]: successes of the scope not yet counted   ARGV[6]: the hint's precision, ms
// returns: {deadline in force (Unix ms), remaining ms}
//
// deadline = max(existing, now + ARGV[1]); the key expires at the deadline.
// KEYS[1] is published on ARGV[3] so gates forget that the scope was open.
//
// Learning (KEYS[2], fields): since (Unix ms, the reopening the count runs
// from: the last reopening, or the first contact when the gate probed it),
// ok (successes since), n and w (the learned limit: n per w ms),
// b and bp (a reset of the provider's window, Unix ms, and its precision).
// The first refusal of a cycle (the scope was open) closes it: what the scope
// got accepted between its reopening and this refusal, over the window from
// the reopening to the new deadline, is the quota the provider grants (n,
// and best: the most it was ever seen to accept); the successes reported
// until that deadline (late: the requests in flight at the refusal, and
// those whose handler had not returned) are added to it. w is rounded to whole
// seconds when the hint was (a hint of "5 seconds" read at any point of the
// last second). A refusal under a learned limit takes a quarter off n
// (multiplicative decrease) and lowers best below the n refused; each
// window spent whole without a refusal adds one, up to best (additive
// increase, in admitScript): never above what was observed to succeed, and
// converging on the most the provider grants (a token bucket's first burst
// is more than its rate). Refusals of requests already in flight when the
// scope paused do not count. The state expires after learnTTL without a
// refusal: a quota learned long ago is a hint, not a law.
var pauseScript = redis.NewScript(luaPrelude + `
local deadline = now_ms + tonumber(ARGV[1])
local cur = int(redis.pcall('GET', KEYS[1]))
redis.call('PUBLISH', ARGV[3], KEYS[1])
local open = not (cur and cur > now_ms and cur - now_ms <= tonumber(ARGV[2]))
if cur and cur > deadline and cur - now_ms <= tonumber(ARGV[2]) then
  deadline = cur
else
  redis.call('SET', KEYS[1], deadline)
  redis.call('PEXPIREAT', KEYS[1], deadline)
end
local okd = tonumber(ARGV[5])
local v = redis.pcall('HMGET', KEYS[2], 'since', 'ok', 'n', 'best', 'late', 'w')
if type(v) ~= 'table' or v.err then redis.call('DEL', KEYS[2]); v = {} end
local since, ok, n, best, late, lw = int(v[1]), int(v[2]) or 0, int(v[3]), int(v[4]) or 0, int(v[5]), int(v[6]) or 0
if not since then -- the first cycle runs from the first contact's probe
  local fc = redis.pcall('HGET', KEYS[3], 'fc')
  since = int(fc)
end
if okd > 0 and open and since then ok = ok + okd; redis.call('HSET', KEYS[2], 'ok', ok) end
if okd > 0 and not open and n and late == cur then
  redis.call('HSET', KEYS[2], 'n', n + okd, 'best', math.max(best, n + okd))
end
if ARGV[4] == '1' and open then
  local prec = tonumber(ARGV[6])
  local learnt = 0
  if n then
    -- refused under the learned limit: multiplicative decrease, and n is
    -- known to be too many: the increase stops below it from now on
    redis.call('HSET', KEYS[2], 'n', math.max(1, n - math.ceil(n / 4)))
    if not since or now_ms - since >= lw then
      -- (a refusal in the first window after a reopening may be the last
      -- window's overdraft: it lowers n, not the ceiling)
      redis.call('HSET', KEYS[2], 'best', math.max(1, math.min(best, n - 1)))
    end
  elseif since and since < now_ms then
    local w = deadline - since
    if prec >= 1000 then w = math.floor((w + 500) / 1000) * 1000 end
    if ok >= 1 and w >= 1000 and w <= 3600000 then
      redis.call('HSET', KEYS[2], 'n', ok, 'w', w, 'best', math.max(best, ok))
      learnt = deadline
    end
  end
  redis.call('HSET', KEYS[2], 'late', learnt)
  redis.call('HSET', KEYS[2], 'since', deadline, 'ok', 0, 'b', deadline, 'bp', prec)
  redis.call('PEXPIRE', KEYS[2], ` + learnTTLms + `)
end
return {deadline, deadline - now_ms}
`)

// learnTTL is how long what a scope learned (its limit, its window's
// alignment) outlives the last refusal or observation that taught it.
// Ten minutes: long enough to carry over between bursts of polling, short
// enough that a provider's raised quota is found again within minutes.
const learnTTLms = "600000"

// observeScript records the budget a provider advertised on a response.
//
// KEYS[1]: the scope's budget (hash)   KEYS[2]: the scope's learned state (hash)
// KEYS[3]: the scope's pause key (announced when the budget is first known)
// ARGV[1]: remaining requests, or -1 when the response advertises no budget
// ARGV[2]: ms until the budget is whole again (0: not advertised)
// ARGV[3]: the quota's size (0: not advertised)   ARGV[4]: the reset's precision, ms
// ARGV[5]: the gate's announcement channel
// ARGV[6]: the sequence number admitScript gave the request answered (-1: unknown)
// returns: {remaining in force (-1: none), reset (Unix ms, 0: none)}
//
// Budget fields: r (remaining to spend), u (reset, Unix ms), l (quota), q
// (admissions that spent the budget, ever: the last one's sequence number),
// qr (q when the budget was last refilled at its reset), p (first-contact
// probe sent at, Unix ms), s (the provider advertises nothing), fc (the
// first contact, Unix ms: see pauseScript). The provider counted the
// requests it received before this one, not those admitted after it and
// still on their way: r = remaining − (q − sequence). Resets are read
// rounded up: of two within the reset's precision, the earlier is kept. The answer of a
// request admitted before the last refill speaks of a window that is over:
// it is ignored. The record expires learnTTL after its reset.
var observeScript = redis.NewScript(luaPrelude + `
local rem, reset, quota, prec = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local seq = tonumber(ARGV[6])
local v = redis.pcall('HMGET', KEYS[1], 'r', 'q', 'qr', 'p', 'u')
if type(v) ~= 'table' or v.err then redis.call('DEL', KEYS[1]); v = {} end
local r0, q, qr, p, u0 = int(v[1]), int(v[2]) or 0, int(v[3]), int(v[4]), int(v[5])
if rem < 0 then
  if p and not r0 then
    redis.call('HSET', KEYS[1], 's', 1)
    redis.call('HDEL', KEYS[1], 'p')
  end
  return {-1, 0}
end
if seq >= 0 and qr and seq <= qr then return {r0 or -1, 0} end
local fresh = not r0 and not p
local r = rem
if seq >= 0 then r = math.max(rem - math.max(q - seq, 0), 0) end
local u = 0
if reset > 0 then u = now_ms + reset end
-- Every reset read is at or after the true one (rounded up): of two that
-- name the same reset, the earlier is the nearer.
if u > 0 and u0 and u0 > now_ms and math.abs(u - u0) < math.max(prec, 1000) then u = math.min(u, u0) end
redis.call('HSET', KEYS[1], 'r', r)
redis.call('HDEL', KEYS[1], 'p', 's')
if u > 0 then redis.call('HSET', KEYS[1], 'u', u) else redis.call('HDEL', KEYS[1], 'u') end
if quota > 0 then redis.call('HSET', KEYS[1], 'l', quota) end
redis.call('PEXPIREAT', KEYS[1], math.max(u, now_ms) + ` + learnTTLms + `)
if u > 0 then
  redis.call('HSET', KEYS[2], 'b', u, 'bp', prec)
  redis.call('PEXPIRE', KEYS[2], ` + learnTTLms + `)
end
if fresh then redis.call('PUBLISH', ARGV[5], KEYS[3]) end
return {r, u}
`)

// stateScript reads what the gate knows of a scope.
//
// KEYS[1]: pause   KEYS[2]: budget (hash)   KEYS[3]: learned (hash)
// KEYS[4]: the first limit's GCRA TAT (Unix µs)
// ARGV[1]: max pause, ms
// returns: {deadline (Unix ms, 0 when open), remaining ms, budget remaining
// (-1 when none), budget reset (Unix ms, 0 unknown or past), quota (0
// unknown), learned n (0 none), learned window ms, limit backlog µs (TAT −
// now, 0 when none or past)}
var stateScript = redis.NewScript(luaPrelude + `
local cur = int(redis.pcall('GET', KEYS[1]))
local out = {0, 0, -1, 0, 0, 0, 0, 0}
local tat = int(redis.pcall('GET', KEYS[4]))
if tat and tat > now_us then out[8] = tat - now_us end
if cur and cur > now_ms and cur - now_ms <= tonumber(ARGV[1]) then out[1], out[2] = cur, cur - now_ms end
local b = redis.pcall('HMGET', KEYS[2], 'r', 'u', 'l')
if type(b) == 'table' and not b.err and int(b[1]) then
  local r, u, l = int(b[1]), int(b[2]), int(b[3])
  if u and u <= now_ms then u = nil; if l then r = l end end
  out[3], out[4], out[5] = r, u or 0, l or 0
end
local ln = redis.pcall('HMGET', KEYS[3], 'n', 'w')
if type(ln) == 'table' and not ln.err and int(ln[1]) and int(ln[2]) then out[6], out[7] = int(ln[1]), int(ln[2]) end
return out
`)

// admitScript is the admission of one task: is the scope paused, has its
// advertised budget run out, and may its limits spend capacity now? One
// round trip answers all of them, and spends what it admits.
//
// KEYS[1]: pause (Unix ms)   KEYS[2]: reopening line (Unix µs)
// KEYS[3]: budget (hash, see observeScript)   KEYS[4]: learned (hash, see pauseScript)
// KEYS[5]: the learned limit's windows   KEYS[6..]: the state of each configured limit
// ARGV[1]: cost (units)   ARGV[2]: hold, µs: how far ahead a slot may be reserved
// ARGV[3]: max pause, ms   ARGV[4]: successes of the scope to add to the learned count
// ARGV[5]: probe, ms: how long the first request of an unknown scope is given to
// bring back the budget (0: responses are not observed, no probe)
// ARGV[6]: number of configured limits n, then 3 values per limit: kind (0
// GCRA, 1 fixed window), interval or period (µs), burst or rate
// returns: {code, wait µs, deadline (Unix ms, 0 when none), now (Unix ms),
// reopening budget (0 unknown), cacheable (1: nothing but the pause applies),
// limited (1: the scope has limits, configured or learned), probe (1: this
// admission is a first contact's probe: report its answer), sequence (of
// the admission among those that spent the budget: see observeScript),
// spread (1: the line hands out slots one interval apart, a GCRA limit's)}
//
//	code 0 admitted: the slot starts after wait (0 ≤ wait ≤ hold); capacity is spent
//	code 1 paused: come back after wait, at the deadline (a pause, the reset of a
//	       spent budget, or a first-contact probe) or, with a limit, at the next
//	       slot of the reopening line after it; nothing is spent
//	code 2 limited: come back after wait, at the next slot of the line; nothing is spent
//
// A GCRA limit moves its TAT (theoretical arrival time) by interval×cost per
// admission; a request is allowed once t ≥ TAT + interval×cost − interval×burst.
// While a pause is in force the TAT is raised so the limit is empty at the
// deadline: the first second after a pause stays within the rate.
//
// A fixed window limit counts admissions per window of its period. Windows
// are aligned to the provider's reset when one was learned (a refusal's hint
// or a reset header: learned.b, with precision learned.bp), and then admit
// until precision before the window ends (a reset read to the second may be
// up to a second late). Otherwise the first admission of an idle scope
// starts the windows, as a fleet spending its quota at once would, and a
// window admits only in its first min(hold, period/2): spending kept at the
// head of windows one period apart never puts more than one window's quota
// into any window of the provider's.
//
// A limit learned from refusals (learned.n per learned.w, see pauseScript)
// applies as a fixed window aligned to the last refusal's reset when no limit
// is configured and no budget is advertised.
//
// Several limits are all-or-nothing: the admission time is the earliest
// instant every limit admits; within hold, each is spent for it, otherwise
// none is and the task takes a slot of the line one interval (the smallest
// GCRA interval × cost; 0 for fixed windows: they open at once) apart.
var admitScript = redis.NewScript(luaPrelude + `
local cost, hold, maxp = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
-- How often workers waiting for a probe's answer look for it: about two
-- round trips to a provider 25 ms away (the example's); shorter costs Redis
-- round trips, longer delays the reopening.
local probePoll = 50
local okd, probe, n = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local function hget(key, ...) -- malformed (wrong type) reads as absent, and is dropped
  local v = redis.pcall('HMGET', key, ...)
  if type(v) ~= 'table' or v.err then redis.call('DEL', key); return {} end
  return v
end
local function line(earliest, inc)
  local slot = int(redis.pcall('GET', KEYS[2]))
  if not slot or slot < earliest then slot = earliest end
  local nxt = slot + inc
  redis.call('SET', KEYS[2], nxt, 'PX', math.max(math.ceil((nxt - now_us) / 1000), 1))
  return slot - now_us
end

-- What the scope learned: successes since the last refusal, and the limit.
local ln = hget(KEYS[4], 'n', 'w', 'b', 'bp', 'best', 'late')
local learned = int(ln[1])
local bnd, bprec = int(ln[3]), int(ln[4]) or 0

-- The limits: configured, or the learned one.
local lim = {}
for i = 1, n do
  local j = 6 + (i - 1) * 3
  lim[i] = {key = KEYS[5 + i], kind = tonumber(ARGV[j + 1]), per = tonumber(ARGV[j + 2]), r = tonumber(ARGV[j + 3])}
end

-- The advertised budget.
local bg = hget(KEYS[3], 'r', 'u', 'l', 'q', 'p', 's', 'fc')
local b_r, b_u, b_l, b_q, b_p, b_s = int(bg[1]), int(bg[2]), int(bg[3]), int(bg[4]) or 0, int(bg[5]), bg[6]
local refill = false
local budget = nil -- remaining to spend, when the budget applies
local reopen = b_l or 0
local block = nil -- a deadline (ms) the budget imposes
local probing = 0 -- this admission is a first contact's probe
if b_s then
  -- the provider advertises nothing
elseif b_r then
  if b_u and now_ms < b_u then
    if b_r - cost < 0 then block = b_u else budget = b_r end
  elseif probe > 0 then
    -- the reset passed: how much the new window holds, the provider says
    -- (a window whole again, a bucket one token fuller): one request asks
    if b_p and now_ms < b_p + probe then block = math.min(b_p + probe, now_ms + probePoll)
    else
      b_q = b_q + 1
      redis.call('HSET', KEYS[3], 'p', now_ms, 'qr', b_q - 1, 'q', b_q)
      probing = 1
    end
  elseif b_l and b_l >= cost then
    budget = b_l -- the reset passed and nobody can ask: assume the quota whole
    b_u, refill = nil, true
  end
elseif b_p then
  if now_ms < b_p + probe then block = math.min(b_p + probe, now_ms + probePoll)
  else redis.call('HSET', KEYS[3], 's', 1) end -- the probe brought nothing back
elseif probe > 0 then
  b_q = b_q + 1
  redis.call('HSET', KEYS[3], 'p', now_ms, 'fc', now_ms, 'q', b_q)
  redis.call('PEXPIRE', KEYS[3], 3600000)
  probing = 1
end
if n == 0 and learned and int(ln[2]) and not budget then
  lim[1] = {key = KEYS[5], kind = 1, per = int(ln[2]) * 1000, r = learned, learned = true, best = int(ln[5]) or learned}
  n = 1
  if reopen == 0 then reopen = learned end
end
local cacheable = (n == 0 and not budget and not block and not b_p) and 1 or 0
if probe > 0 and not b_s and not b_r and not b_p then cacheable = 0 end

-- The pause, or the budget's reset, in force.
local deadline = int(redis.pcall('GET', KEYS[1]))
if not (deadline and deadline > now_ms and deadline - now_ms <= maxp) then deadline = nil end
if block and (not deadline or block > deadline) then deadline = block end
-- Successes count toward the learning cycle that began at the last
-- reopening; those reported while paused belong to the window that closed
-- (see pauseScript's late).
if okd > 0 then
  if redis.call('EXISTS', KEYS[4]) == 0 then
    if not deadline and int(bg[7]) then
      -- the first cycle, from the first contact's probe (see pauseScript)
      redis.call('HSET', KEYS[4], 'since', int(bg[7]), 'ok', okd)
      redis.call('PEXPIRE', KEYS[4], ` + learnTTLms + `)
    end
  elseif not deadline then redis.pcall('HINCRBY', KEYS[4], 'ok', okd)
  elseif int(ln[6]) == deadline then
    redis.call('HSET', KEYS[4], 'n', (learned or 0) + okd, 'best', math.max(int(ln[5]) or 0, (learned or 0) + okd))
  end
end

-- Limits: the earliest instant t ≥ start every limit admits.
local function field(s) return string.format('%.0f', s) end -- µs, never in exponent form
local function fixed_state(l)
  if not l.st then
    local raw = redis.pcall('HGETALL', l.key)
    if type(raw) ~= 'table' or raw.err then redis.call('DEL', l.key); raw = {} end
    l.st = {}
    for i = 1, #raw, 2 do l.st[raw[i]] = int(raw[i + 1]) end
  end
  return l.st
end
local function fixed_window(l, t) -- start of the window of t, and until when it admits
  local st = fixed_state(l)
  local a, allow = nil, nil
  if bnd then a, allow = bnd * 1000, math.max(l.per - bprec * 1000, 1)
  else a, allow = st.a or t, math.max(math.min(hold, math.floor(l.per / 2)), 1) end
  local s = a + math.floor((t - a) / l.per) * l.per
  return s, s + allow, a
end
-- used returns the admissions counted against the window that starts at s:
-- those of every recorded window that overlaps it (a window realigned to a
-- reset learned since keeps what its predecessor spent).
local function used(l, s)
  local c = 0
  for f, v in pairs(fixed_state(l)) do
    local fs = tonumber(f)
    if f ~= 'a' and fs and fs > s - l.per and fs < s + l.per then c = c + v end
  end
  return c
end
local function earliest(l, t)
  if l.kind == 0 then
    local tat = int(redis.pcall('GET', l.key))
    l.tat = tat
    local inc, tau = l.per * cost, l.per * l.r
    if not tat or tat < now_us then tat = now_us end
    return math.max(t, tat + inc - tau)
  end
  local st = fixed_state(l)
  for _ = 1, 3 do
    local s, stop = fixed_window(l, t)
    if t < stop and used(l, s) + cost <= l.r then return t end
    t = s + l.per
  end
  return t
end
local function spend(l, t)
  if l.kind == 0 then
    local nt = math.max(l.tat or now_us, now_us) + l.per * cost
    redis.call('SET', l.key, nt, 'PX', math.max(math.ceil((nt - now_us) / 1000), 1))
    return
  end
  local s, _, a = fixed_window(l, t)
  local st = fixed_state(l)
  for f, _ in pairs(st) do
    if f ~= 'a' and tonumber(f) and tonumber(f) < s - l.per then redis.call('HDEL', l.key, f) end
  end
  if not bnd and not st.a then redis.call('HSET', l.key, 'a', a) end
  if l.learned and not st[field(s)] and (st[field(s - l.per)] or 0) >= l.r and l.r < l.best then
    -- additive increase: the last window was spent whole without a refusal
    redis.call('HSET', KEYS[4], 'n', l.r + 1)
  end
  redis.call('HINCRBY', l.key, field(s), cost)
  redis.call('PEXPIRE', l.key, math.ceil((s + 2 * l.per - now_us) / 1000))
end

local spread = 0 -- deferred tasks take slots of the line one interval apart
if deadline then
  local wait = (deadline - now_ms) * 1000
  if n > 0 then
    local inc = nil
    for i = 1, n do
      local l = lim[i]
      if l.kind == 0 then
        -- empty at the deadline: raise the TAT, spend nothing
        local empty = deadline * 1000 + l.per * l.r - l.per
        local tat = int(redis.pcall('GET', l.key))
        if not tat or tat < empty then
          redis.call('SET', l.key, empty, 'PX', math.ceil((empty - now_us) / 1000) + 1)
        end
        if not inc or l.per * cost < inc then inc = l.per * cost end
      end
    end
    wait = line(deadline * 1000, inc or 0)
    if inc then spread = 1 end
  end
  return {1, wait, deadline, now_ms, reopen, 0, math.min(n, 1), 0, 0, spread}
end

local at = now_us
for _ = 1, 4 do
  local before = at
  for i = 1, n do at = math.max(at, earliest(lim[i], at)) end
  if at == before then break end
end
local wait = at - now_us
if wait <= hold then
  for i = 1, n do spend(lim[i], at) end
  if budget then
    if refill then redis.call('HSET', KEYS[3], 'qr', b_q); redis.call('HDEL', KEYS[3], 'u') end
    b_q = b_q + cost
    redis.call('HSET', KEYS[3], 'r', budget - cost, 'q', b_q)
  end
  return {0, math.max(wait, 0), 0, now_ms, reopen, cacheable, math.min(n, 1), probing, b_q, 0}
end
local inc = nil
for i = 1, n do
  if lim[i].kind == 0 and (not inc or lim[i].per * cost < inc) then inc = lim[i].per * cost end
end
return {2, line(at, inc or 0), 0, now_ms, reopen, 0, 1, 0, 0, inc and 1 or 0}
`)

// keys are the Redis keys of one scope. Every key of a scope shares one hash
// tag built from the scope, so multi-key scripts stay Redis Cluster safe,
// while different scopes spread over slots:
//
//	<prefix>:{<provider>:<account>}:pause    shared pause deadline, Unix ms
//	<prefix>:{<provider>:<account>}:tat      the first limit's state: GCRA TAT, Unix µs
//	<prefix>:{<provider>:<account>}:win      ... or, for a fixed window, counts by window (hash)
//	<prefix>:{<provider>:<account>}:tat2 …   the second limit's state, and so on
//	<prefix>:{<provider>:<account>}:line     next reopening slot, Unix µs
//	<prefix>:{<provider>:<account>}:budget   the budget the provider advertises (hash)
//	<prefix>:{<provider>:<account>}:learn    what refusals taught: limit, window alignment (hash)
//	<prefix>:{<provider>:<account>}:lwin     counts by window of the learned limit (hash)
//
// Provider and account are escaped so that neither can end the hash tag or
// make two scopes collide: '%', ':', '{' and '}' become %25, %3A, %7B, %7D.
type keys struct {
	base                                      string
	pause, tat, line, budget, learn, learnWin string
}

var (
	keyEscaper   = strings.NewReplacer("%", "%25", ":", "%3A", "{", "%7B", "}", "%7D")
	braceEscaper = strings.NewReplacer("{", "%7B", "}", "%7D")
)

func scopeKeys(prefix string, s Scope) keys {
	base := prefix + ":{" + keyEscaper.Replace(s.Provider) + ":" + keyEscaper.Replace(s.Account) + "}:"
	return keys{base: base, pause: base + "pause", tat: base + "tat", line: base + "line",
		budget: base + "budget", learn: base + "learn", learnWin: base + "lwin"}
}

// limit returns the state key of the i-th limit l of the scope.
func (k keys) limit(i int, l Limit) string {
	name := "tat"
	if l.Fixed {
		name = "win"
	}
	if i > 0 {
		name += strconv.Itoa(i + 1)
	}
	return k.base + name
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

	// track, when set, is called as a call starts; the function it returns
	// hears how the call ended: nil when Redis answered, the error when the
	// store failed (not when the caller's own context ended). The open
	// cache uses it as its proof of life (openCache.track).
	track func() func(error)

	// running counts the calls whose watchdog goroutine is running, and
	// failing is set by a failed call and cleared by an answered one (see
	// maxRunning).
	running atomic.Int32
	failing atomic.Bool
}

// maxRunning caps, per gate, the calls left running while the store fails.
// Once a call has failed (timed out, or refused) and until one is answered,
// a new call starts only while fewer than maxRunning are running; beyond,
// the store answers at once with ErrStoreTimeout, starting no goroutine and
// taking no connection, and the gate applies its failure policy without
// waiting. Without the cap, while Redis hangs, every call of a client
// without ContextTimeoutEnabled was abandoned at StoreTimeout but kept its
// goroutine and a pooled connection until go-redis's own read timeout (3 s
// by default), for every task, all along the hang. (The calls already
// running when Redis starts to hang, at most one per worker, run out
// their time anyway.) Four: enough calls to notice a recovery as soon as
// Redis answers one, even with a connection that never will, and few
// enough that a hung Redis holds no more than a handful of the connections
// of a pool it shares with the application (go-redis's default pool is 10
// per CPU).
const maxRunning = 4

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
// wrapping ErrStoreTimeout, and so does a call refused at once by the cap on
// calls left running while the store fails (maxRunning). Its duration and
// failure are counted under op (see metrics.go).
func bounded[T any](ctx context.Context, s *store, op string, call func(context.Context) (T, error)) (v T, err error) {
	defer s.metrics.roundTrip(ctx, op, time.Now(), &err)
	var zero T
	done := noTrack
	if s.track != nil {
		done = s.track()
	}
	if !s.direct {
		// Take a place among the running calls first, then look: two
		// callers can never both take the last place.
		if n := s.running.Add(1); n > maxRunning && s.failing.Load() {
			s.running.Add(-1)
			err := fmt.Errorf("%w: Redis has not answered, %d calls still wait for it; not starting another", ErrStoreTimeout, n-1)
			done(err)
			return zero, err
		}
	}
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var r result[T]
	if s.direct {
		r.v, r.err = call(tctx)
	} else {
		r = watchdog(tctx, s, call)
	}
	var netErr net.Error
	if r.err != nil && (errors.Is(tctx.Err(), context.DeadlineExceeded) || errors.As(r.err, &netErr) && netErr.Timeout()) {
		r = result[T]{zero, fmt.Errorf("%w after %v: %v", ErrStoreTimeout, s.timeout, r.err)}
	}
	if r.err == nil || ctx.Err() == nil { // the caller's own end says nothing about Redis
		s.failing.Store(r.err != nil)
		done(r.err)
	}
	return r.v, r.err
}

type result[T any] struct {
	v   T
	err error
}

// noTrack is the tracker of a store without one.
func noTrack(error) {}

// watchdog runs call in a goroutine, whose place in s.running the caller
// has taken and which gives it back, and returns its result, or ctx's error
// when ctx ends first: the call then goes on alone.
func watchdog[T any](ctx context.Context, s *store, call func(context.Context) (T, error)) result[T] {
	done := make(chan result[T], 1)
	go func() {
		defer s.running.Add(-1)
		v, err := call(ctx)
		done <- result[T]{v, err}
	}()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		select {
		case r := <-done: // it has just finished
			return r
		default:
			return result[T]{err: ctx.Err()}
		}
	}
}

func want(v []int64, n int, err error) error {
	if err == nil && len(v) != n {
		err = fmt.Errorf("quotagate: unexpected script reply %v", v)
	}
	return err
}

// pause records a pause of d (clamped by the caller) and returns the
// deadline in force and the time remaining until it, both per Redis TIME.
// A refusal's pause (r) also teaches the scope (see pauseScript).
func (s *store) pause(ctx context.Context, k keys, d time.Duration, r refusalFacts) (until time.Time, remaining time.Duration, err error) {
	learn := 0
	if r.hinted {
		learn = 1
	}
	v, err := s.run(ctx, "pause", pauseScript, []string{k.pause, k.learn, k.budget}, d.Milliseconds(), s.maxPause.Milliseconds(), s.channel(),
		learn, r.successes, r.precision.Milliseconds())
	if err = want(v, 2, err); err != nil {
		return time.Time{}, 0, err
	}
	return time.UnixMilli(v[0]), time.Duration(v[1]) * time.Millisecond, nil
}

// refusalFacts is what a refusal tells the scope beyond its pause.
type refusalFacts struct {
	hinted    bool          // the provider gave a wait: the pause ends at its window's reset
	precision time.Duration // of that wait: a second when read in whole seconds
	successes int64         // successes of the scope not yet counted
}

// state reads what the gate knows of a scope (see stateScript).
func (s *store) state(ctx context.Context, k keys) (Pause, error) {
	v, err := s.run(ctx, "state", stateScript, []string{k.pause, k.budget, k.learn, k.tat}, s.maxPause.Milliseconds())
	if err = want(v, 8, err); err != nil {
		return Pause{}, err
	}
	p := Pause{LimitBacklog: time.Duration(v[7]) * time.Microsecond}
	if v[0] != 0 {
		p.Until, p.Remaining = time.UnixMilli(v[0]), time.Duration(v[1])*time.Millisecond
	}
	if v[2] >= 0 {
		p.Budget = &Budget{Remaining: v[2], Limit: v[4]}
		if v[3] != 0 {
			p.Budget.Reset = time.UnixMilli(v[3])
		}
	}
	if v[5] > 0 {
		p.Learned = FixedWindow(int(v[5]), time.Duration(v[6])*time.Millisecond)
	}
	return p, nil
}

// admission is the answer of admitScript.
type admission struct {
	code      int64         // admitted, paused or limited
	wait      time.Duration // see admitScript
	until     time.Time     // the pause deadline, zero when not paused
	now       time.Time     // Redis TIME of the decision
	reopen    int64         // requests the scope may send when it reopens, 0 unknown
	cacheable bool          // only a pause can stop the scope (see openCache)
	limited   bool          // the scope has limits, configured or learned
	probe     bool          // a first contact's probe: its response's budget is awaited
	seq       int64         // sequence number among the admissions that spent the budget
	spread    bool          // the line spreads deferred tasks (a GCRA limit): wake at the slot
}

const (
	admitted int64 = iota
	paused
	limited
)

// admitRequest is what admitScript is asked.
type admitRequest struct {
	limits    []Limit
	cost      int
	hold      time.Duration
	successes int64         // successes of the scope not yet counted
	probe     time.Duration // first-contact probe (0: responses are not observed)
}

func (s *store) admit(ctx context.Context, k keys, r admitRequest) (admission, error) {
	ks := make([]string, 0, 5+len(r.limits))
	ks = append(ks, k.pause, k.line, k.budget, k.learn, k.learnWin)
	args := make([]any, 0, 6+3*len(r.limits))
	args = append(args, r.cost, r.hold.Microseconds(), s.maxPause.Milliseconds(), r.successes, r.probe.Milliseconds(), len(r.limits))
	for i, l := range r.limits {
		ks = append(ks, k.limit(i, l))
		if l.Fixed {
			args = append(args, 1, l.Period.Microseconds(), l.Rate)
		} else {
			args = append(args, 0, l.interval(), l.burst())
		}
	}
	v, err := s.run(ctx, "admit", admitScript, ks, args...)
	if err = want(v, 10, err); err != nil {
		return admission{}, err
	}
	a := admission{code: v[0], wait: time.Duration(v[1]) * time.Microsecond, now: time.UnixMilli(v[3]),
		reopen: v[4], cacheable: v[5] == 1, limited: v[6] == 1, probe: v[7] == 1, seq: v[8], spread: v[9] == 1}
	if v[2] != 0 {
		a.until = time.UnixMilli(v[2])
	}
	return a, nil
}

// observation is the budget a response advertised.
type observation struct {
	remaining int64         // -1: the response advertises no budget
	reset     time.Duration // until the budget is whole again, 0 unknown
	limit     int64         // the quota's size, 0 unknown
	precision time.Duration // of reset
	seq       int64         // of the request answered (admission.seq); -1 unknown
}

// observe records an observation (see observeScript).
func (s *store) observe(ctx context.Context, k keys, o observation) error {
	v, err := s.run(ctx, "observe", observeScript, []string{k.budget, k.learn, k.pause},
		o.remaining, o.reset.Milliseconds(), o.limit, o.precision.Milliseconds(), s.channel(), o.seq)
	return want(v, 2, err)
}

// channel is where pauses are announced (see openCache).
func (s *store) channel() string { return s.prefix + ":paused" }

// resume deletes a scope's pause.
func (s *store) resume(ctx context.Context, k keys) error {
	_, err := bounded(ctx, s, "resume", func(ctx context.Context) (int64, error) { return s.rdb.Del(ctx, k.pause).Result() })
	return err
}
