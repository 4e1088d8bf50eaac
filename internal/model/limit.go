package model

import (
	"time"

	"github.com/quotagate/quotagate/internal/schema"
)

// The configured limits (Config.Limits), and the window arithmetic the
// learned limit shares with them.
//
// A GCRA limit keeps a theoretical arrival time (TAT, µs): a request of
// cost c is admitted at t once t ≥ TAT + c·I − b·I (I the emission
// interval, b the burst), and moves the TAT to max(TAT, t) + c·I. A
// refusal empties the bucket at its instant: TAT ≥ now + b·I, so the
// first requests after a pause come at the provider's refill pace.
//
// A fixed window limit counts admissions per window of its period. Windows
// are aligned to a reset the scope learned (a refusal's deadline, or a
// reset header: learnState.alignment), and then admit until the reset's
// precision before the window ends (a reset read to the second may be up to
// a second late), or at least in the window's first half. Otherwise the first admission of an idle scope starts the
// windows (the origin), and a window admits only in its first
// min(hold, period/2): spending kept at the head of windows one period
// apart never puts more than one window's quota into any window of the
// provider's, wherever its windows start. A window counts what every
// recorded window overlapping it spent, so a window realigned by a reset
// learned since keeps what its predecessor spent, except an unaligned
// window whose head lies in the first half of an aligned window: it counts
// in that one alone (stands). A refusal realigns the
// windows to its deadline and clears their counts (the provider refused
// them: they were not spent in its next window); an unhinted refusal
// keeps them.
//
// A sliding window limit keeps a log of its admissions (sliding.go),
// a concurrency limit the leases of its requests in flight
// (concurrency.go).
//
// Invariants: no instant is admitted that some limit does not admit
// (State.Admit checks the instant once more after its search); a cost
// a limit can never admit is refused before Redis is asked (checkCost).

// LimitSpec is a configured limit as the model uses it (built by Spec).
type LimitSpec struct {
	fixed   bool
	sliding bool // a sliding log (sliding.go)
	// concurrent: a concurrency limit (concurrency.go)
	concurrent bool
	per        int64 // µs: GCRA emission interval, the fixed window's period, the time a sliding log's slot takes to come back, or a lease's life
	n          int64 // GCRA burst, the window's rate, or the requests in flight
}

// gcra reports whether l is a GCRA bucket.
func (l LimitSpec) gcra() bool { return !l.fixed && !l.sliding && !l.concurrent }

// Spec converts a configured limit of kind kind: rate requests per period
// (a GCRA bucket with the given burst, a fixed window, a sliding log), or
// rate requests in flight, each lease living period (a concurrency limit).
// A limit whose rate or period is not positive admits nothing and is
// never configured (Limit.IsZero).
func Spec(kind schema.LimitKind, rate int, period time.Duration, burst int) LimitSpec {
	switch kind {
	case schema.Fixed:
		return LimitSpec{fixed: true, per: period.Microseconds(), n: int64(rate)}
	case schema.Sliding:
		return LimitSpec{sliding: true, per: period.Microseconds() + SlidingSettle, n: int64(rate)}
	case schema.Concurrent:
		return LimitSpec{concurrent: true, per: period.Microseconds(), n: int64(rate)}
	}
	if rate <= 0 || period <= 0 {
		return LimitSpec{n: int64(max(burst, 1))}
	}
	us := period.Microseconds()
	return LimitSpec{per: max((us+int64(rate)-1)/int64(rate), 1), n: int64(max(burst, 1))}
}

// kind is the kind of l, which names its key.
func (l LimitSpec) kind() schema.LimitKind {
	return schema.KindOf(l.fixed, l.sliding, l.concurrent)
}

// alignment is a known instant at which a window of the provider's ends
// (µs, 0 unknown), and the precision it was read with (µs).
type alignment struct{ at, prec int64 }

// limitState is the state of one limit: a TAT, window counts, a log, or
// leases.
type limitState struct {
	fixed      bool
	sliding    bool
	concurrent bool
	learned    bool         // the learned limit's windows (see windowState.usedAligned)
	paced      bool         // the learned limit's windows spread their admissions (windowState.earliest)
	tat        int64        // GCRA: µs, 0 none
	win        *windowState // fixed: the counts
	log        []int64      // sliding: the admissions' instants (µs), oldest first
	leases     []lease      // concurrent: the unexpired leases, by expiry
}

// windowState counts admissions per window start (µs), and the origin of
// unaligned windows (µs, 0 none).
type windowState struct {
	origin int64
	counts map[int64]int64
}

func (s *limitState) earliest(l LimitSpec, p Params, al alignment, now, t, cost int64) int64 {
	if l.sliding {
		return slidingEarliest(s.log, l, t, cost)
	}
	if l.concurrent {
		return concEarliest(s.leases, l, t, cost)
	}
	if !l.fixed {
		tat := max(s.tat, now)
		return max(t, tat+l.per*cost-l.per*l.n)
	}
	return s.win.earliest(l, p, al, t, cost, !s.learned, s.paced)
}

func (s *limitState) spend(l LimitSpec, p Params, al alignment, now, t, cost int64, id string) {
	if l.sliding {
		s.log = slidingAdd(s.log, t, cost)
		return
	}
	if l.concurrent {
		s.leases = concAdd(s.leases, l, t, cost, id)
		return
	}
	if !l.fixed {
		s.tat = max(s.tat, now, t) + l.per*cost
		return
	}
	s.win.spend(l, p, al, t, cost)
}

// refuse empties a GCRA bucket at now; a hinted refusal realigns fixed
// windows to its deadline (learnState.refuse) and clears their counts, and
// fills a sliding log (slidingFill); a concurrency limit's leases stay
// (each is released by its request).
func (s *limitState) refuse(l LimitSpec, now int64, hinted bool) {
	if l.concurrent {
		return
	}
	if l.sliding {
		if hinted {
			s.log = slidingFill(s.log, l, now)
		}
		return
	}
	if !l.fixed {
		s.tat = max(s.tat, now+l.per*l.n)
		return
	}
	if hinted {
		*s.win = windowState{}
	}
}

// window returns the start of the window of t and the instant until which
// it admits. Unaligned windows follow each other a period and
// windowSettle apart.
func (w *windowState) window(l LimitSpec, p Params, al alignment, t int64) (start, stop int64) {
	a, allow, per := al.at, max(l.per-al.prec, l.per/2, 1), l.per
	if a == 0 {
		a, allow, per = w.origin, max(min(p.Hold, l.per/2), 1), l.per+windowSettle
		if a == 0 {
			a = t
		}
	}
	start = a + floorDiv(t-a, per)*per
	return start, start + allow
}

// windowSettle is how much longer than its period an unaligned window
// lasts, µs: the origin is the Redis TIME of a window's first admission, and
// a provider counting from its first request starts its window when that
// request arrives, a few milliseconds later and more under load (the first
// request of a run the slowest: a connection is dialled); the next window's
// requests, admitted a period after the origin, must not arrive before the
// provider's window has ended, or they are refused. The sliding log's
// settling time, for the same reason; it costs a clock-aligned provider
// that much of every window.
const windowSettle = SlidingSettle

// used is what the window starting at start has spent: the counts of every
// recorded window that overlaps it.
func (w *windowState) used(l LimitSpec, start int64) int64 {
	c := int64(0)
	for s, n := range w.counts {
		if s > start-l.per && s < start+l.per {
			c += n
		}
	}
	return c
}

// usedAligned is used for a configured limit under the alignment al: a
// window recorded before the windows were aligned (its start follows the
// origin) counts as the aligned window that holds every instant it may
// have admitted at (see stands), and a recorded window that overlaps the
// one starting at start only by its tail where it admits nothing (an
// aligned window stops admitting the reset's precision before its end)
// spent nothing in it. Resets read one after the other move the alignment
// by their reading's jitter (a millisecond for a reset in ms): without the
// tail's exception each window would count its predecessor, realigned a
// millisecond earlier, whole, and spend less than the provider's quota.
func (w *windowState) usedAligned(l LimitSpec, p Params, al alignment, start int64) int64 {
	tail := int64(0)
	if al.at != 0 {
		_, stop := w.window(l, p, al, start)
		tail = start + l.per - stop
	}
	c := int64(0)
	for s, n := range w.counts {
		if s = w.stands(l, p, al, s); s > start-l.per+tail && s < start+l.per {
			c += n
		}
	}
	return c
}

// stands is the start of the window the count recorded under s stands for.
// An unaligned window admits only at its head, [start, start +
// min(hold, period/2)); once the windows are aligned, a head that lies in
// the first half of an aligned window was counted by the provider in that
// window, not in the next one, which would otherwise count it as an
// overlapping predecessor's and leave the provider's quota unspent. The
// first half, not the whole admitting part: an alignment read from a
// response is late by up to the answer's round trip, which a reset's
// precision (a millisecond for one in ms) does not cover; half a window
// does. Any other head stands where it was recorded: both windows it may
// fall in count it.
func (w *windowState) stands(l LimitSpec, p Params, al alignment, s int64) int64 {
	if al.at == 0 || w.origin == 0 || (s-w.origin)%(l.per+windowSettle) != 0 {
		return s
	}
	if start, _ := w.window(l, p, al, s); s+max(min(p.Hold, l.per/2), 1) <= start+l.per/2 {
		return start
	}
	return s
}

// earliestRounds bounds the windows one limit looks ahead: its search
// moves to the next window when this one is spent, and a window just
// opened admits any cost the limit can (checkCost).
const earliestRounds = 3

// earliest is the earliest instant at or after t the windows admit cost:
// in a window that has room, before its stop; a paced window (the learned
// limit a hintless refusal taught: learnState.paced) admits its k-th at
// k·per/n into it at the earliest.
func (w *windowState) earliest(l LimitSpec, p Params, al alignment, t, cost int64, configured, paced bool) int64 {
	for range earliestRounds {
		start, stop := w.window(l, p, al, t)
		used := w.used(l, start)
		if configured {
			used = w.usedAligned(l, p, al, start)
		}
		if paced {
			t = max(t, start+used*(l.per/l.n))
		}
		if t < stop && used+cost <= l.n {
			return t
		}
		next := start + l.per // the next window's start
		if al.at == 0 {
			next += windowSettle
		}
		t = max(t, next)
	}
	return t
}

// spend counts cost in the window of t. It drops no count: t may be a
// slot ahead, in the next window, while the window of now still counts
// what overlaps it (live drops what no window from now on overlaps).
func (w *windowState) spend(l LimitSpec, p Params, al alignment, t, cost int64) {
	start, _ := w.window(l, p, al, t)
	if al.at == 0 && w.origin == 0 {
		w.origin = t
	}
	if w.counts == nil {
		w.counts = map[int64]int64{}
	}
	w.counts[start] += cost
}

// live drops what the window counts no longer say at now: a window two
// periods old overlaps no window an admission at now or later can be in,
// and a scope idle that long starts its windows again (no origin). Redis
// expires the key a margin after the same instant; the expiry only
// collects what the values already say is over.
func (w *windowState) live(l LimitSpec, now int64) {
	for s := range w.counts {
		if s+2*l.per <= now {
			delete(w.counts, s)
		}
	}
	if len(w.counts) == 0 {
		w.origin = 0
	}
}

// luaWindow is the fixed windows' arithmetic (windowState.window, used,
// stands, usedAligned, live; as admissions meet them, luaWindowAdmit). A
// Lua limit is its
// LimitSpec and its limitState in one table {key, fixed, learned, paced,
// per, n}, with its windowState's origin and counts; where the Go passes
// a spec seen as work leaving a keeper sees it (active.kept), the Lua
// passes that n. Windows are hash fields named by their start (µs); the
// origin is the field "origin".
const luaWindow = `
local function window(l, al, t)
  local a, allow, per = al.at, math.max(l.per - al.prec, math.floor(l.per / 2), 1), l.per
  if a == 0 then
    a, allow, per = l.origin, math.max(math.min(C.hold, math.floor(l.per / 2)), 1), l.per + C.windowSettle
    if a == 0 then a = t end
  end
  local start = a + math.floor((t - a) / per) * per
  return start, start + allow
end
local function window_used(l, start)
  local c = 0
  for s, n in pairs(l.counts) do
    if s > start - l.per and s < start + l.per then c = c + n end
  end
  return c
end
local function window_stands(l, al, s)
  if al.at == 0 or l.origin == 0 or (s - l.origin) % (l.per + C.windowSettle) ~= 0 then return s end
  local start = window(l, al, s)
  if s + math.max(math.min(C.hold, math.floor(l.per / 2)), 1) <= start + math.floor(l.per / 2) then return start end
  return s
end
local function window_used_aligned(l, al, start)
  local tail = 0
  if al.at ~= 0 then
    local _, stop = window(l, al, start)
    tail = start + l.per - stop
  end
  local c = 0
  for s, n in pairs(l.counts) do
    s = window_stands(l, al, s)
    if s > start - l.per + tail and s < start + l.per then c = c + n end
  end
  return c
end
local function window_live(l)
  for s in pairs(l.counts) do
    if s + 2 * l.per <= now_us then l.counts[s] = nil end
  end
  if next(l.counts) == nil then l.origin = 0 end
end
`

// luaWindowAdmit is the fixed windows as admissions meet them
// (windowState.earliest, spend).
const luaWindowAdmit = `
local function window_earliest(l, al, t, cost, n, configured, paced)
  for _ = 1, C.earliestRounds do
    local start, stop = window(l, al, t)
    local used
    if configured then used = window_used_aligned(l, al, start) else used = window_used(l, start) end
    if paced then t = math.max(t, start + used * math.floor(l.per / n)) end
    if t < stop and used + cost <= n then return t end
    local next = start + l.per -- the next window's start
    if al.at == 0 then next = next + C.windowSettle end
    t = math.max(t, next)
  end
  return t
end
local function window_spend(l, al, t, cost)
  local start = window(l, al, t)
  if al.at == 0 and l.origin == 0 then l.origin = t end
  l.counts[start], l.dirty = (l.counts[start] or 0) + cost, true
end
`

// luaLimit is the limits' transaction (limitState.earliest, spend,
// refuse; LimitSpec.gcra). A limit is a table {key, fixed, sliding,
// concurrent, per, n} with its loaded state: tat (GCRA), origin and counts
// (fixed: luaWindow), log (sliding: luaSliding) or leases (concurrent:
// luaConcurrency).
const luaLimit = `
local function limit_spec_gcra(l) return not l.fixed and not l.sliding and not l.concurrent end
local function limit_earliest(l, al, t, cost, n)
  if l.sliding then return sliding_earliest(l, t, cost, n) end
  if l.concurrent then return conc_earliest(l, t, cost, n) end
  if not l.fixed then return math.max(t, math.max(l.tat, now_us) + l.per * cost - l.per * n) end
  return window_earliest(l, al, t, cost, n, not l.learned, l.paced)
end
local function limit_spend(l, al, t, cost, id)
  l.dirty = true
  if l.sliding then sliding_add(l, t, cost); return end
  if l.concurrent then conc_add(l, t, cost, id); return end
  if not l.fixed then l.tat = math.max(l.tat, now_us, t) + l.per * cost; return end
  window_spend(l, al, t, cost)
end
local function limit_refuse(l, hinted)
  if l.concurrent then return end
  if l.sliding then
    if hinted then sliding_fill(l) end
    return
  end
  if not l.fixed then l.dirty, l.tat = true, math.max(l.tat, now_us + l.per * l.n); return end
  if hinted then l.dirty, l.origin, l.counts = true, 0, {} end
end
`

// luaLimitRecord loads a limit's state (a TAT, or window counts without
// the stale ones: window_live) and saves it back when changed.
const luaLimitRecord = `
local function limit_load(l)
  if l.sliding then sliding_load(l); return end
  if l.concurrent then conc_load(l); return end
  if not l.fixed then l.tat = int(redis.pcall('GET', l.key)) or 0; return end
  local raw = redis.pcall('HGETALL', l.key)
  if type(raw) ~= 'table' or raw.err then redis.call('DEL', l.key); raw = {} end
  l.origin, l.counts = 0, {}
  for i = 1, #raw, 2 do
    local v = int(raw[i + 1])
    if raw[i] == F.origin then l.origin = v or 0
    elseif v and string.match(raw[i], '^%d+$') then l.counts[tonumber(raw[i])] = v end
  end
  window_live(l)
end
local function limit_save(l)
  if not l.dirty then return end
  if l.sliding then sliding_save(l); return end
  if l.concurrent then conc_save(l); return end
  if not l.fixed then
    if l.tat > now_us then redis.call('SET', l.key, num(l.tat), 'PX', math.ceil((l.tat - now_us) / 1000) + C.margin) end
    return
  end
  redis.call('DEL', l.key)
  local args, last = {}, 0
  if l.origin ~= 0 then args[#args + 1] = F.origin; args[#args + 1] = num(l.origin) end
  for s, n in pairs(l.counts) do
    args[#args + 1] = num(s); args[#args + 1] = n
    last = math.max(last, s)
  end
  if #args == 0 then return end
  redis.call('HSET', l.key, unpack(args))
  redis.call('PEXPIREAT', l.key, math.ceil((last + 2 * l.per) / 1000) + C.margin)
end
`
