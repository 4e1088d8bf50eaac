package model

import (
	"slices"
	"sort"
)

// The sliding window limit (SlidingWindow): an exact sliding log, as the
// sorted-set limiters of Redis keep it.
//
// The log holds the instant (µs) of every admission that has not left its
// window: an admission at x holds a slot until x + per, where per is the
// configured window plus slidingSettle (see SlidingWindow). A request of
// cost c is admitted at t when the log's entries after t − per, and c, are
// at most n (of what the class leaves of it: n − keeper.of(n)); otherwise
// at the instant the (count+c−n)-th oldest of them leaves. The entries
// counted include slots already reserved after t (within Tuning.MaxHold):
// every window of the provider's that contains t and ends later holds no
// entry the count leaves out, so the count is at least the provider's for
// every window the request is in. A cost above n is never admitted (the
// search answers an instant it does not admit; checkCost refuses a cost
// above the configured n before Redis is asked).
//
// A hinted refusal fills a configured log up to n entries at or before its instant,
// the missing ones at the instant itself: the provider counted n in its
// window, and those the gate did not admit may be as recent as the
// refusal. So nothing but the log's own entries (as they leave) goes
// before a window after the refusal, and the pause holds the scope until
// the hint meanwhile. An unhinted refusal, or Gate.Pause, keeps the log.
// The learned limit's log (learnState.logSpec) is filled by none: a
// refusal of its window's probe takes the probe's entry out of it instead
// (slidingDrop; learnState.refuse).
//
// In Redis the log is a sorted set (internal/schema: slog) whose members are
// "<instant>:<j>" (j tells apart admissions of one instant) scored by the
// instant; the scripts read the entries after now − per, drop the others
// when they write, and expire the key a margin after its last entry
// leaves.
//
// Invariant: the log is sorted, and after normalize holds no entry that has
// left (x + per ≤ now); no admission makes any window of per hold more than
// n entries (TestSlidingNeverExceeds).

// SlidingSettle is how much longer than its window an admission's slot
// takes to come back, µs: the provider logs a request when it arrives, a
// few milliseconds after the Redis TIME of its admission and more under
// load, and the next request of its slot must not arrive within the window
// of it.
const SlidingSettle = 50_000

// slidingEarliest is the earliest instant at or after t at which log
// admits cost more under l (whose n is what the class may spend).
func slidingEarliest(log []int64, l LimitSpec, t, cost int64) int64 {
	if cost > l.n {
		return t + l.per // never: the final check of the search fails
	}
	i0 := sort.Search(len(log), func(i int) bool { return log[i] > t-l.per })
	need := int64(len(log)-i0) + cost - l.n
	if need <= 0 {
		return t
	}
	return log[i0+int(need)-1] + l.per
}

// slidingAdd returns log with cost entries at t, in order.
func slidingAdd(log []int64, t, cost int64) []int64 {
	i := sort.Search(len(log), func(i int) bool { return log[i] > t })
	out := make([]int64, 0, len(log)+int(cost))
	out = append(append(out, log[:i]...), slices.Repeat([]int64{t}, int(cost))...)
	return append(out, log[i:]...)
}

// slidingFill is a hinted refusal at now: the log filled up to n entries
// at or before now, the missing ones at now.
func slidingFill(log []int64, l LimitSpec, now int64) []int64 {
	k := int64(sort.Search(len(log), func(i int) bool { return log[i] > now }))
	if k >= l.n {
		return log
	}
	return slidingAdd(log, now, l.n-k)
}

// slidingDrop returns log without one of its entries at x (log itself
// when it has none): a refused request the provider did not count.
func slidingDrop(log []int64, x int64) []int64 {
	i := sort.Search(len(log), func(i int) bool { return log[i] >= x })
	if i == len(log) || log[i] != x {
		return log
	}
	return append(slices.Clone(log[:i]), log[i+1:]...)
}

// slidingLive drops the entries that have left at now.
func slidingLive(log []int64, l LimitSpec, now int64) []int64 {
	i := sort.Search(len(log), func(i int) bool { return log[i] > now-l.per })
	if i == len(log) {
		return nil
	}
	return log[i:]
}

// luaSliding is the sliding log's transaction (slidingEarliest, slidingAdd,
// slidingFill, slidingDrop on the key itself: the refusal does not load
// the log). A sliding limit's table holds log (the entries, sorted:
// slidingLive, the entries after now − per, as ZRANGEBYSCORE reads them)
// and adds (what this call added: {t, j0, cost}, its members
// "<t>:<j0+1>" …).
const luaSliding = `
local function sliding_load(l)
  l.log, l.adds = {}, {}
  local raw = redis.pcall('ZRANGEBYSCORE', l.key, '(' .. num(now_us - l.per), '+inf')
  if type(raw) ~= 'table' or raw.err then redis.call('DEL', l.key); raw = {} end
  for _, m in ipairs(raw) do
    local v = int(string.match(m, '^(%d+):%d+$'))
    if v and v + l.per > now_us then l.log[#l.log + 1] = v end
  end
  table.sort(l.log)
end
local function sliding_earliest(l, t, cost, n)
  if cost > n then return t + l.per end
  local i0 = 1
  while i0 <= #l.log and l.log[i0] <= t - l.per do i0 = i0 + 1 end
  local need = #l.log - i0 + 1 + cost - n
  if need <= 0 then return t end
  return l.log[i0 + need - 1] + l.per
end
local function sliding_add(l, t, cost)
  local pos = #l.log + 1
  while pos > 1 and l.log[pos - 1] > t do pos = pos - 1 end
  local j0, i = 0, pos - 1
  while i >= 1 and l.log[i] == t do j0, i = j0 + 1, i - 1 end
  for _ = 1, cost do table.insert(l.log, pos, t) end
  l.adds[#l.adds + 1] = {t, j0, cost}
end
local function sliding_fill(l)
  local k = 0
  for _, x in ipairs(l.log) do if x <= now_us then k = k + 1 end end
  if k < l.n then l.dirty = true; sliding_add(l, now_us, l.n - k) end
end
local function sliding_drop(key, x)
  local m = redis.pcall('ZRANGEBYSCORE', key, num(x), num(x), 'LIMIT', 0, 1)
  if type(m) == 'table' and not m.err and m[1] then redis.call('ZREM', key, m[1]) end
end
local function sliding_save(l)
  redis.call('ZREMRANGEBYSCORE', l.key, '-inf', num(now_us - l.per))
  for _, a in ipairs(l.adds) do
    local args = {}
    for j = 1, a[3] do args[#args + 1] = num(a[1]); args[#args + 1] = num(a[1]) .. ':' .. (a[2] + j) end
    redis.call('ZADD', l.key, unpack(args))
  end
  l.adds = {}
  if #l.log > 0 then redis.call('PEXPIREAT', l.key, math.ceil((l.log[#l.log] + l.per) / 1000) + C.margin) end
end
`
