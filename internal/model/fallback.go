package model

// The hintless pause: how long a refusal that says nothing of when pauses
// the scope, and how the scope finds out that its provider takes requests
// again.
//
// A provider that refuses with no readable hint (a reverse proxy's
// limit_req: 429 and nothing else) may take requests again within a second
// (a bucket's next tokens) or within hours (an outage, a daily quota
// spent). The scope finds out as a client with capped exponential backoff
// does, once for the whole fleet: a hintless refusal while the scope is
// open starts an episode whose pause is fallbackFirst the first time, and
// twice the episode before's each time the scope is refused again before
// its provider accepted a request, at most the cap (Config.FallbackPause).
// A hintless refusal while the scope is paused (a request already on its
// way when it paused) moves nothing: the pause in force answers it.
//
// After the pause, the first admission is the episode's probe: it goes
// alone, the others wait for its answer (at most the answer timeout,
// Params.Answer: MaxHold and a second), looking every probePoll. An answer
// without a refusal ends the episode: the scope is open, and its next
// hintless refusal starts at fallbackFirst again. A refusal of the probe is
// the next episode, twice as long. So while the provider refuses, the scope
// sends one request per pause, and the pauses double up to the cap.
//
// The cap is Config.FallbackPause, 12 hours by default (the reference
// article's cap): a provider that refuses all day without a hint (a daily
// quota spent) gets one request per pause from the whole scope, after 1,
// 2, 4 s … 12 h: the refusal that started the episode and sixteen probes
// in its first day. The first probes still come within seconds, so a
// short window is found as fast as with a short cap; what the long cap
// costs is the end of a long outage, found up to one pause late: each
// pause is about as long as all the pauses before it together, so the end
// is found at most about the outage's own length after it (and at most
// the cap).
//
// Invariants: an episode's pause is within [fallbackFirst, cap] and at most
// twice its predecessor's; at most one probe per episode, after its pause;
// an episode is forgotten LearnTTL after its pause ends (a scope with no
// news is open), so its level outlives the pause it set however long it
// is, and the probe's refusal doubles it. Hinted refusals and Gate.Pause
// leave it.

// fallbackFirst is the pause of a hintless episode's first refusal, ms:
// MinPause, the shortest pause the gate records. A bucket refills some
// tokens in a second, and a longer outage is found by the doubling within
// log2(cap/fallbackFirst) probes (sixteen for 12 hours).
const fallbackFirst = 1000

// fallbackState is the scope's hintless episode.
type fallbackState struct {
	level   int64 // ms: the episode's pause (0: none: the provider accepted the last probe)
	probeAt int64 // µs: the episode's probe went at (0: not yet)
	expires int64 // µs: forgotten at (0: empty)
}

// refuse returns the pause (ms) of a hintless refusal at now whose cap is
// capMs: when the scope is open, the next episode's, which it starts; 0
// (nothing beyond the pause in force) when it is paused.
func (s *fallbackState) refuse(now, capMs int64, open bool) int64 {
	if !open {
		return 0
	}
	level := int64(fallbackFirst)
	if s.level > 0 {
		level = 2 * s.level
	}
	s.level, s.probeAt = min(level, capMs), 0
	s.expires = now + s.level*1000 + LearnTTL // the pause, then as long as any news
	return s.level
}

// probes reports whether the next admission is the episode's probe.
func (s fallbackState) probes() bool { return s.level > 0 && s.probeAt == 0 }

// earliest is when the episode lets an admission at now ask: after its
// probe's answer, or its timeout (0: now).
func (s fallbackState) earliest(p Params, now int64) int64 {
	if s.level > 0 && s.probeAt > 0 && now < s.probeAt+p.Answer {
		return min(s.probeAt+p.Answer, now+probePoll)
	}
	return 0
}

// answer records that the request admitted at at was answered without a
// refusal: if it was the episode's probe, the episode is over.
func (s *fallbackState) answer(at int64) {
	if at > 0 && s.probeAt == at {
		*s = fallbackState{}
	}
}

// luaFallback is the episode's transaction (fallbackState.refuse,
// probes, earliest, answer), on a hash with the fields of fallbackFields,
// loaded as a record past its expires is none and saved when a transition
// changed it.
const luaFallback = `
local function fallback_load(key) return hrecord(key, fallbackFields) end
local function fallback_save(s) hsave(s, fallbackFields) end
local function fallback_refuse(s, capMs, open)
  if not open then return 0 end
  local level = C.fallbackFirst
  if s.level > 0 then level = 2 * s.level end
  s.level, s.probeAt, s.expires, s.dirty = math.min(level, capMs), 0, now_us + math.min(level, capMs) * 1000 + C.learnTTL, true
  return s.level
end
local function fallback_probes(s) return s.level > 0 and s.probeAt == 0 end
local function fallback_earliest(s)
  if s.level > 0 and s.probeAt > 0 and now_us < s.probeAt + C.answer then
    return math.min(s.probeAt + C.answer, now_us + C.probePoll)
  end
  return 0
end
local function fallback_answer(s, at)
  if at > 0 and s.probeAt == at then s.level, s.probeAt, s.expires, s.dirty = 0, 0, 0, true end
end
`
