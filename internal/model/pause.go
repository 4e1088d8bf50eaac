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

// luaPause is the pause's transaction (pauseState.inForce, earliest,
// refuse) on the pause key and its pauseby key. pause_load reads the
// deadline as State.Normalize leaves it (untilMs 0 when it is not in
// force); pause_refuse writes a deadline it moves, the keys expiring at
// it. Who moved it (operator) is read only where the admission's reply
// shows it (pause_operator).
const luaPause = `
local function pause_in_force(s) return s.untilMs > now_ms and s.untilMs - now_ms <= C.maxPause end
local function pause_earliest(s)
  if pause_in_force(s) then return s.untilMs * 1000 end
  return 0
end
local function pause_load(key, byKey)
  local s = {key = key, byKey = byKey, untilMs = int(redis.pcall('GET', key)) or 0}
  if not pause_in_force(s) then s.untilMs = 0 end
  return s
end
local function pause_operator(s) return redis.pcall('GET', s.byKey) == 'operator' end
local function pause_refuse(s, pauseMs, operator)
  local deadline = now_ms + pauseMs
  if s.untilMs < deadline then
    s.untilMs, s.operator = deadline, operator
    redis.call('SET', s.key, deadline)
    redis.call('PEXPIREAT', s.key, deadline)
    if operator then
      redis.call('SET', s.byKey, 'operator')
      redis.call('PEXPIREAT', s.byKey, deadline)
    else
      redis.call('DEL', s.byKey)
    end
  end
  return s.untilMs
end
`
