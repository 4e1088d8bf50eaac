package model

import (
	"cmp"
	"slices"
	"strconv"
)

// The concurrency limit (Concurrent): at most n requests in flight at once.
//
// Every admission takes a lease: an id (chosen by the gate, unique per
// admission), its cost in units, and the instant it expires (the
// admission's instant plus per, the lease's longest life: Limit.Period).
// A request of cost c is admitted at t when the unexpired leases at t
// (expiry > t) and c are at most n (of what the class leaves of it:
// n − keeper.of(n)). A lease ends when it is released (release: the
// request's response, or its handler's return) or when it expires,
// whichever comes first; a released id is gone, so a second release of it
// changes nothing.
//
// The leases held only fall as time passes, so the earliest instant the
// limit certainly admits is the expiry that leaves room (concEarliest).
// That instant is a bound, usually far off: leases are released long
// before they expire. So a scope whose concurrency limit has no room now
// reserves no slot ahead: it answers "ask again" at the earliest instant
// the other limits admit, but at least concurrentPoll from now, and never
// later than that bound (State.admitAs); the worker holds and asks
// again then, or sooner when a release of its own gate wakes it.
//
// A refusal leaves the leases as they are: each is released by its own
// request, and the pause holds the scope meanwhile. Resume drops them.
//
// In Redis the leases are a sorted set (internal/schema: conc) whose members
// are "<cost>:<id>" scored by the expiry (µs); the scripts read the
// members scored after now, drop the others when they write, and expire
// the key a margin after its last lease. The release is its own script
// (ReleaseScript).
//
// Invariant: no admission makes the unexpired leases at any instant sum
// to more than n (TestConcurrentNeverExceeds).

// concurrentPoll is how long a worker that found every slot of a
// concurrency limit taken waits before it asks again (µs), unless a
// release of its own gate wakes it sooner: a slot released by another
// process idles at most this long before a waiting worker finds it: below
// the latency of a nearby API, at 50 round trips a second per waiting
// worker. Within one process the poll hardly matters: a worker whose
// request ends takes the slot it frees with its next task at once, and a
// release wakes the gate's own waiters.
const concurrentPoll = 20_000

// lease is one admission's hold on a concurrency limit.
type lease struct {
	exp  int64 // µs: when it expires unreleased
	id   string
	cost int64
}

// member is the lease's sorted-set member.
func (l lease) member() string { return strconv.FormatInt(l.cost, 10) + ":" + l.id }

// concHeld is what the leases of ls hold at t.
func concHeld(ls []lease, t int64) int64 {
	h := int64(0)
	for _, l := range ls {
		if l.exp > t {
			h += l.cost
		}
	}
	return h
}

// concEarliest is the earliest instant at or after t at which the leases
// admit cost more under l (whose n is what the class may spend), if none
// is released meanwhile: t when they have room, else the expiry that
// leaves it. A cost above n is never admitted (the search's final check
// fails at the instant answered).
func concEarliest(ls []lease, l LimitSpec, t, cost int64) int64 {
	if cost > l.n {
		return t + l.per
	}
	held := concHeld(ls, t)
	for _, x := range ls { // sorted by expiry
		if held+cost <= l.n {
			break
		}
		if x.exp > t {
			held -= x.cost
			t = x.exp
		}
	}
	return t
}

// concAdd returns ls with the lease id of cost admitted at t, in order.
// A lease of the same member held already (its admission asked again,
// see admission.retried) is the one lease, its expiry moved, as ZADD
// moves a member's score.
func concAdd(ls []lease, l LimitSpec, t, cost int64, id string) []lease {
	x := lease{exp: t + l.per, id: id, cost: cost}
	out := slices.DeleteFunc(slices.Clone(ls), func(y lease) bool { return y.member() == x.member() })
	out = append(out, x)
	slices.SortFunc(out, compareLeases)
	return out
}

// compareLeases orders leases as the sorted set does: by expiry, then by
// member.
func compareLeases(a, b lease) int {
	return cmp.Or(cmp.Compare(a.exp, b.exp), cmp.Compare(a.member(), b.member()))
}

// concRelease returns ls without the lease id.
func concRelease(ls []lease, id string) []lease {
	out := slices.DeleteFunc(slices.Clone(ls), func(x lease) bool { return x.id == id })
	if len(out) == 0 {
		return nil
	}
	return out
}

// concLive drops the leases that have expired at now.
func concLive(ls []lease, now int64) []lease {
	out := slices.DeleteFunc(slices.Clone(ls), func(x lease) bool { return x.exp <= now })
	if len(out) == 0 {
		return nil
	}
	return out
}

// Release ends the lease id on every concurrency limit of the scope, the
// learned one's included; answered tells that its request was answered
// without a refusal (flightState.answer).
func (s *State) Release(p Params, now int64, id string, answered bool) {
	s.Normalize(p, now)
	for i, l := range p.Limits {
		if l.concurrent {
			s.limits[i].leases = concRelease(s.limits[i].leases, id)
		}
	}
	if slices.ContainsFunc(s.lease.leases, func(x lease) bool { return x.id == id }) {
		s.lease.leases = concRelease(s.lease.leases, id)
		s.flight.released(now, answered)
	}
}

// luaConcurrency is the concurrency limit's transaction (concHeld,
// concEarliest, concAdd, compareLeases as the order's less). A
// concurrency limit's table holds leases (lease's fields; by expiry, then
// member: concLive, those scored after now, as ZRANGEBYSCORE reads them)
// and adds (the leases this call added).
const luaConcurrency = `
local function lease_member(x) return x.cost .. ':' .. x.id end
local function conc_load(l)
  l.leases, l.adds = {}, {}
  local raw = redis.pcall('ZRANGEBYSCORE', l.key, '(' .. num(now_us), '+inf', 'WITHSCORES')
  if type(raw) ~= 'table' or raw.err then redis.call('DEL', l.key); raw = {} end
  for i = 1, #raw, 2 do
    local c, id = string.match(raw[i], '^(%d+):(.+)$')
    local exp = tonumber(raw[i + 1])
    if int(c) and exp and exp > now_us then l.leases[#l.leases + 1] = {exp = exp, id = id, cost = int(c)} end
  end
end
local function conc_held(l, t)
  local h = 0
  for _, x in ipairs(l.leases) do if x.exp > t then h = h + x.cost end end
  return h
end
local function conc_earliest(l, t, cost, n)
  if cost > n then return t + l.per end
  local held = conc_held(l, t)
  for _, x in ipairs(l.leases) do -- sorted by expiry
    if held + cost <= n then break end
    if x.exp > t then held, t = held - x.cost, x.exp end
  end
  return t
end
local function compare_leases(a, b)
  return a.exp < b.exp or a.exp == b.exp and lease_member(a) < lease_member(b)
end
local function conc_add(l, t, cost, id)
  local x, kept = {exp = t + l.per, id = id, cost = cost}, {}
  for _, y in ipairs(l.leases) do if lease_member(y) ~= lease_member(x) then kept[#kept + 1] = y end end
  l.leases = kept
  l.leases[#l.leases + 1] = x
  table.sort(l.leases, compare_leases)
  l.adds[#l.adds + 1] = x
end
local function conc_save(l)
  redis.call('ZREMRANGEBYSCORE', l.key, '-inf', num(now_us))
  for _, x in ipairs(l.adds) do redis.call('ZADD', l.key, num(x.exp), lease_member(x)) end
  l.adds = {}
  if #l.leases > 0 then redis.call('PEXPIREAT', l.key, math.ceil(l.leases[#l.leases].exp / 1000) + C.margin) end
end
`
