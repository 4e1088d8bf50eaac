package model

// The classes of work within a scope: interactive work (a poll somebody
// waits for) goes ahead of background work (a sweep nobody waits for).
//
// While interactive work has asked within the lending delay (Tuning.
// LendAfter), background work sees every capacity of the scope smaller by
// the reserve (Config.Reserve of it, rounded down, at least one unit and
// never all of it): a
// GCRA bucket's burst, a fixed window's rate (configured or learned), the
// advertised budget's size. So the reserve is what the bucket keeps, the
// window leaves, the budget holds back, and an interactive request finds
// it at once; the sweep runs at the rest (a bucket refills the reserve
// first, and gives background every token beyond it, so a sweep behind a
// bucket keeps the bucket's whole rate). When no interactive work has
// asked for the lending delay, background may spend everything: the
// reserve is lent, and given back at the next interactive request. While
// the scope has had interactive work within LearnTTL, or while interactive
// work is expected (Params.Expect: the gate serves interactive queues), it
// is lent for now only: a slot reserved ahead (within Tuning.MaxHold) still
// leaves it, so background work never spends the reserve of the next
// window (or the bucket's next tokens) in advance, and the next interactive
// request finds it there, the scope's first among them. (This costs a sweep little: the holders asking as a window
// opens spend what the slots ahead left, and a bucket gives every token
// beyond the reserve.) A scope that has had no interactive work for
// LearnTTL, and none is expected, is exactly as without classes.
//
// An interactive task that has to wait claims its cost from the capacity
// it comes back to: until it is back (admitted), background work leaves
// the claims unspent (within the reserve, when one is kept: keeper.of),
// and may not send a budget's probe; so a background task never takes a
// slot an interactive one is waiting for.
// A claim lapses claimGrace after the slot it waits for (a task that does
// not come back gives it up). Interactive deferrals take their slots from
// a line of their own, from the instant the scope admits again: they are
// never behind background work deferred before them (the line's key
// "iline", the same lineState).
//
// A sliding log's n is such a capacity too (sliding.go): background
// work sees a log of n − keeper.of(n).
//
// Invariants: interactive work is never held back by the class concern;
// background work is held back only until the reserve and the claims
// lapse (then it asks again); the reserve of a capacity n is at most n−1.

// classState is what the scope keeps of its interactive work.
type classState struct {
	seen    int64 // µs: interactive work last asked at, 0 none within LearnTTL
	claims  int64 // the cost of interactive deferrals not yet back
	claimed int64 // µs: the claims lapse at (0: none)
}

// claimGrace is how long after its slot an interactive deferral's claim
// holds: asynq retries a task at a whole second (up to a second after its
// slot) and forwards it within DelayedTaskCheckInterval (the README
// advises at most a second); a task later than that gives its claim up.
const claimGrace = 2_000_000 // µs

// keeper is what background work leaves unspent at an instant.
type keeper struct {
	share  int64 // per mille of every capacity (0: no reserve now)
	claims int64 // interactive cost waiting to come back
	lapse  int64 // µs: after it nothing is held back (ask again then); 0 with nothing held
	lent   int64 // per mille: the reserve, lent, that a slot ahead of now leaves (see admit)
}

// keeper returns what an admission of class c at now leaves unspent.
func (s classState) keeper(p Params, now int64, interactive bool) keeper {
	if interactive {
		return keeper{}
	}
	var k keeper
	if s.seen > 0 && now < s.seen+p.Lend {
		k.share, k.lapse = p.Reserve, s.seen+p.Lend
	}
	if s.claims > 0 && now < s.claimed {
		k.claims, k.lapse = s.claims, max(k.lapse, s.claimed)
	}
	if (s.seen > 0 || p.Expect) && !k.holds() {
		k.lent = p.Reserve
	}
	return k
}

// holds reports whether k holds anything back.
func (k keeper) holds() bool { return k.share > 0 || k.claims > 0 }

// of is what k leaves of a capacity n: its reserve (the share of n rounded
// down, at least 1 and at most n−1), or the claims when they are more.
// Rounded down, the sweep keeps at least 1 − Config.Reserve of every
// capacity of 5 or more; rounded up, a small capacity would keep more
// than its share from the sweep (of a learned window of 9, the default
// reserve would keep 2). A claim is interactive work's, and the reserve
// is what interactive work finds: claims within it are its, and leaving
// both would keep a unit from the sweep for each interactive task that
// waited, while no more interactive work than the reserve came.
func (k keeper) of(n int64) int64 {
	held := int64(0)
	if k.share > 0 && n > 1 {
		held = min(n-1, max(n*k.share/1000, 1))
	}
	return max(held, k.claims)
}

// asked records interactive work asking at now: admitted (its claim, if
// it had one, is back), or deferred to come back at slot with its cost
// claimed.
func (s *classState) asked(now int64, admitted bool, slot, cost int64) {
	s.seen = max(s.seen, now)
	if admitted {
		s.claims = max(s.claims-cost, 0)
		if s.claims == 0 {
			s.claimed = 0
		}
		return
	}
	s.claims += cost
	s.claimed = max(s.claimed, slot+claimGrace)
}

// expires is when the record says nothing any more.
func (s classState) expires(p Params) int64 {
	e := s.claimed
	if s.seen > 0 {
		e = max(e, s.seen+LearnTTL)
	}
	return e
}

// normalize drops what is over at now.
func (s *classState) normalize(p Params, now int64) {
	if s.claimed <= now {
		s.claims, s.claimed = 0, 0
	}
	if s.seen+LearnTTL <= now {
		s.seen = 0
	}
}

// luaClass is the class concern's transaction (classState.normalize,
// keeper, asked, expires; keeper.holds, of) on a hash with the fields of
// classFields; class_load reads the record as normalize leaves it.
const luaClass = `
local function class_normalize(s)
  if s.claimed <= now_us then s.claims, s.claimed = 0, 0 end
  if s.seen + C.learnTTL <= now_us then s.seen = 0 end
end
local function class_load(key)
  local v = hload(key, classFields)
  local s = {key = key}
  for _, f in ipairs(classFields) do s[f] = int(v[f]) or 0 end
  class_normalize(s)
  return s
end
local function keeper_holds(k) return k.share > 0 or k.claims > 0 end
local function class_keeper(s, interactive)
  local k = {share = 0, claims = 0, lapse = 0, lent = 0}
  if interactive then return k end
  if s.seen > 0 and now_us < s.seen + C.lend then k.share, k.lapse = C.reserve, s.seen + C.lend end
  if s.claims > 0 and now_us < s.claimed then k.claims, k.lapse = s.claims, math.max(k.lapse, s.claimed) end
  if (s.seen > 0 or C.expect) and not keeper_holds(k) then k.lent = C.reserve end
  return k
end
local function keeper_of(k, n)
  local held = 0
  if k.share > 0 and n > 1 then held = math.min(n - 1, math.max(math.floor(n * k.share / 1000), 1)) end
  return math.max(held, k.claims)
end
local function class_asked(s, admitted, slot, cost)
  s.seen, s.dirty = math.max(s.seen, now_us), true
  if admitted then
    s.claims = math.max(s.claims - cost, 0)
    if s.claims == 0 then s.claimed = 0 end
    return
  end
  s.claims, s.claimed = s.claims + cost, math.max(s.claimed, slot + C.claimGrace)
end
local function class_expires(s)
  local e = s.claimed
  if s.seen > 0 then e = math.max(e, s.seen + C.learnTTL) end
  return e
end
local function class_save(s)
  if not s.dirty then return end
  s.expires = class_expires(s)
  if s.expires <= now_us then s.expires = 0 end -- nothing left to say: deleted
  hsave(s, classFields)
end
`
