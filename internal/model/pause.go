package model

// The pause: a scope's deadline, set by refusals (and Gate.Pause), that
// only ever moves later. It is stored to the millisecond under the scope's
// pause key and expires at that same instant.
//
// Invariants: the deadline in force never moves earlier (refuse keeps the
// later of the two); a deadline in the past, or farther ahead than
// MaxPause (malformed), is no pause at all.

// pauseState is the deadline, Unix ms (0 when open), and whether an
// operator set it (Gate.Pause) rather than a provider's refusal: who moved
// it last. The second fact is kept under its own key, expiring with the
// deadline.
type pauseState struct {
	untilMs  int64
	operator bool
}

// inForce reports whether the deadline holds the scope at now (µs).
func (s pauseState) inForce(p Params, now int64) bool {
	nowMs := floorDiv(now, 1000)
	return s.untilMs > nowMs && s.untilMs-nowMs <= p.MaxPause
}

// earliest is the first instant (µs) the pause admits: its deadline, or 0
// when it is not in force.
func (s pauseState) earliest(p Params, now int64) int64 {
	if s.inForce(p, now) {
		return s.untilMs * 1000
	}
	return 0
}

// refuse moves the deadline to max(in force, now + pause ms) and returns
// it. s must be normalized (see State.Normalize: a deadline not in
// force is none).
func (s *pauseState) refuse(now, pauseMs int64, operator bool) int64 {
	deadline := floorDiv(now, 1000) + pauseMs
	if s.untilMs < deadline {
		s.untilMs, s.operator = deadline, operator
	}
	return s.untilMs
}

// luaPause is the pause's transaction. pause_load reads the deadline in
// force (nil when open or malformed); pause_refuse moves it later, never
// earlier, with the key expiring at it, and records who moved it
// (pause_by).
const luaPause = `
local function pause_load(key)
  local v = int(redis.pcall('GET', key))
  if v and v > now_ms and v - now_ms <= C.maxPause then return v end
  return nil
end
local function pause_by(key) return redis.pcall('GET', key) == 'operator' end
local function pause_refuse(key, byKey, cur, ms, operator)
  local deadline = now_ms + ms
  if cur and cur >= deadline then return cur end
  redis.call('SET', key, deadline)
  redis.call('PEXPIREAT', key, deadline)
  if operator then
    redis.call('SET', byKey, 'operator')
    redis.call('PEXPIREAT', byKey, deadline)
  else
    redis.call('DEL', byKey)
  end
  return deadline
end
`
