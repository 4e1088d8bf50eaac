package model

// The reopening line: the slots at which the tasks deferred by a pause or
// a GCRA limit come back, one interval (the smallest GCRA interval × cost)
// apart from the instant the scope admits again, so that they return at
// the limit's pace instead of all at once. Fixed windows open at once:
// with no GCRA limit the line hands out no slots (every task comes back at
// the instant itself). Taking a slot is the commit of a deferral.
//
// Invariant: every slot is at or after the instant asked for, and no two
// deferrals get the same slot while the line is spread.

// lineState is the next free slot, µs; 0 (or a past instant) when the
// line is empty.
type lineState struct{ next int64 }

// take returns the wait from now until the deferral's slot: the first
// free one at or after earliest, which it takes when inc > 0.
func (s *lineState) take(now, earliest, inc int64) int64 {
	if inc <= 0 {
		return earliest - now
	}
	slot := max(s.next, earliest)
	s.next = slot + inc
	return slot - now
}

// luaLine is the line's transaction (lineState.take) on the line's key,
// which holds its next slot.
const luaLine = `
local function line_take(key, earliest, inc)
  if inc <= 0 then return earliest - now_us end
  local slot = math.max(int(redis.pcall('GET', key)) or 0, earliest)
  local nxt = slot + inc
  redis.call('SET', key, num(nxt), 'PX', math.ceil((nxt - now_us) / 1000) + C.margin)
  return slot - now_us
end
`
