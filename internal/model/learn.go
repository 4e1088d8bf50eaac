package model

// The learned limit: the quota a scope whose provider advertises no
// budget is seen to grant between refusals, applied as a fixed window
// aligned to the last refusal's deadline when no limit is configured.
// Every admission counts in the cycle; the limit also applies beside an
// advertised budget once a refusal advertised budget left (secondary):
// that budget is another quota's (GitHub's primary budget beside its
// secondary limit).
//
// A refusal with a hint ends a cycle at its deadline D (the provider's
// window resets then) and starts the next one there. What the scope got
// accepted in a cycle is what it admitted, less what was refused: the
// refusal that ends the cycle sets the limit to the admissions of the
// cycle's window minus one, and each refusal that arrives while the scope
// is paused at D (the requests already on their way) takes one more off.
// Windows are rounded to the hint's precision when it is a second or more
// ("5 seconds" read at any point of the last second).
//
//   - The first admission of a scope that learned nothing starts the first
//     cycle; a hinted refusal learns the limit n and its window w = D −
//     (the cycle's start), and starts the next cycle at D.
//   - Under a learned limit, a refusal whose deadline is the learned
//     window's end (within the hint's precision) says n was too many: n
//     becomes what the window got accepted. A deadline elsewhere says the
//     windows are not the provider's (it counts from its first request,
//     or its window is longer): n and w are learned again from the
//     admissions since the last refusal, like a second refusal.
//   - A window spent whole without a refusal raises n: back to the most
//     the scope was seen to get accepted in a window (best) at once, and
//     beyond it by one, so a provider that grants more is found again.
//   - Except for raiseAfter (frozen) after a refusal that refused the level
//     it came at: the one that ends a cycle n and w are learned from, when
//     the cycle began at a deadline, or the refusal came within the hint's
//     precision of the cycle's start (the first contact's began anywhere
//     in the provider's window, which may have been partly spent; but a
//     first contact whose burst was refused at once has the whole learned
//     window ahead of its refusal, and a raise refused with the same hint
//     would pause the scope for all of it), and one at the learned window's end of a window
//     spent whole at a level never sustained (n at or above best), which
//     also forgets best (a bucket's slack can raise it once). Restoring
//     best is no raise. Raises are frozen because a raise refused with a
//     hint of the whole window pauses the scope for all of it.
//   - A learned window longer than MaxHold is applied as a sliding log of
//     n per w (logSpec): a log's admissions are ones a fixed window of the
//     same n and w admits, whatever its alignment, so the log is right
//     for a provider that counts either way; and its slots are reserved
//     ahead (within MaxHold) as a configured log's are, so the tasks asynq
//     brings back at its whole seconds wait in-process for the slot a
//     request of the window before gives back, and do not race it. The
//     windows above still count its admissions (lwin): they tell the
//     probe, the raises and the refusals' windows.
//   - A hintless refusal teaches too (Refusal.teaching), as one hinted with
//     its episode's pause read to a second, and paces the windows it
//     aligns: the k-th admission of a window goes k·w/n into it (nothing
//     tells a window's edges, and a proxy's limiter refills a bucket: a
//     window's burst at once gets what its bucket holds, one at a time
//     when it has no burst). A hintless refusal of a paced window says its
//     pace is above the provider's: n − 1 (at least 1), raises frozen as
//     above; one of the episode's probe (the provider refused even one
//     after the pause: an outage, or a window not over) keeps n. A cycle
//     that got nothing accepted (its refusals took n to 0) teaches no
//     limit: the episode's pauses answer an outage.
//   - The window after one spent whole opens with one request, its probe:
//     the others wait for its answer (at most MaxHold and a second). An
//     answer without a refusal aligns the windows to the probe (a provider
//     that counts from its first request started its window then); a
//     refusal says the provider's window has not ended: it realigns to the
//     refusal's deadline, and n stays. A refused probe's entry leaves the
//     learned log (one entry, at probeAt): a provider counts no refused
//     request, by a log or by a fixed window, and the entry would hold a
//     slot a whole window although the provider's is free, and learning
//     would be slower than the plain pause (a clock window met partway
//     through: TestModelLearningOnlyHelps). No hinted refusal fills the
//     learned log, as one fills a configured log (slidingFill): its n is
//     what the refusals taught and the pause holds the scope until D; the
//     fill would put the refused probe's slot back at the refusal's
//     instant.
//   - A refused probe tells where the provider's window ends (relearn):
//     the window spent whole before the probe's, from s, got its n
//     accepted in one window of the provider's, which ends at the
//     refusal's deadline D and began at s or before (at s for a provider
//     counting from its first request, or a log by its oldest entry).
//     When the probe's wait D − now is longer than the hint's precision
//     (a "1 second" may be a bucket's next token, a window begun up to a
//     second after s, a reset just passed: no window's end) and shorter
//     than w by it (the provider's window ends inside the learned one), and
//     D − s, read to the hint's precision, is longer than w beyond it,
//     the provider's window is D − s long: w becomes it, and n stays. A
//     longer wait may be a sliding log's hint stating its whole window
//     (where D − s is two windows); a D − s within the hint's precision of
//     w is a window that began up to a second after s (one counted from
//     its first request) or a reset rounded down and probed early: they
//     keep w, and so does a window a second longer than learned, which
//     they cannot be told from.
//
// Invariants: 1 ≤ n while a limit is learned (refusals that take it to 0
// leave none); 1 s ≤ w ≤ 1 h; no refusal lowers n below what the
// refused window got accepted, and one refusal-free window restores best;
// what was learned is forgotten LearnTTL after the refusal that taught it
// (a scope with no news is open).

// raiseAfter is how long a refusal of the level it came at (the rules above)
// keeps n from being raised beyond what the windows got accepted: probing
// for a grown quota costs at most one climb a minute. Unfrozen, n raised
// by one every window spent whole climbs on a bucket's slack above its
// rate and is refused again every few windows, each refusal a pause. A
// minute is short beside LearnTTL: a provider that grants more is found a
// minute after its last refusal.
const raiseAfter = 60_000_000 // µs

// Bounds of a learned window: shorter than a second is no window a hint
// in seconds can tell; longer than an hour is a daily quota, which the
// pause itself (MaxPause) handles better than a count.
const (
	minLearnedWindow = 1_000_000     // µs
	maxLearnedWindow = 3_600_000_000 // µs
)

// learnState is what refusals taught the scope.
type learnState struct {
	limit, window, best int64 // n per w µs (0: nothing learned), the most seen accepted
	since, admits       int64 // the cycle: started at (µs, 0 none), admissions since
	alignAt, alignPrec  int64 // a window of the provider's ends at (µs, 0 none), read to (µs)
	absorb              int64 // µs: refusals before it take one off n (0 none)
	refused             int64 // µs: the last refusal that taught the scope
	probeAt             int64 // µs: a window's probe went at, its answer awaited (0 none)
	frozen              int64 // µs: n is not raised beyond best before it (0 none; see raiseAfter)
	// secondary: µs, a refusal advertised budget left then (0 never): the
	// advertised budget is not the quota that refuses (GitHub's secondary
	// limit beside its primary budget), so the learned limit applies
	// beside it
	secondary int64
	// paced: 1 when the last refusal that taught the scope had no hint:
	// its windows spread their admissions (windowState.earliest)
	paced   int64
	expires int64 // µs: forgotten at (0: empty)
}

// earliest is when the learned limit lets an admission at now ask: after
// the answer of a window's probe, or its timeout (0: now).
func (s learnState) earliest(p Params, now int64) int64 {
	if s.probeAt > 0 && now < s.probeAt+p.Answer {
		return min(s.probeAt+p.Answer, now+probePoll)
	}
	return 0
}

// opens reports whether an admission at at opens a window of the fixed
// window l (configured or learned) after one spent whole: it goes alone,
// as the window's probe (see answer).
func (s learnState) opens(l LimitSpec, p Params, w *windowState, al alignment, at int64) bool {
	start, _ := w.window(l, p, al, at)
	return w.used(l, start) == 0 && w.used(l, start-l.per) >= l.n
}

// answer records at now that the probe sent at at was answered without a
// refusal: the provider's window began with it (a provider counting from
// its first request started it when the probe arrived, between at and
// now), so the windows align to now, the one instant known to be at or
// after the provider's start: the next window cannot open before the
// provider's has ended.
//
// An answer that advertised its window's reset aligned the windows to it
// already (align): the provider's own word beats the instant.
func (s *learnState) answer(now, at, reset int64) {
	if at > 0 && s.probeAt == at {
		s.probeAt = 0
		if reset == 0 {
			s.alignAt = now
		}
	}
}

// logSpec is the learned limit as a sliding log (see the rules above), ok
// when its window is longer than p.Hold: a slot reserved ahead then lies
// in the learned window of now or the next one. A shorter one stays a
// fixed window: its slots reserved up to MaxHold ahead would lie in
// windows not yet seen, sent whatever a refusal meanwhile says.
func (s learnState) logSpec(p Params) (LimitSpec, bool) {
	return LimitSpec{sliding: true, per: s.window + SlidingSettle, n: s.limit}, s.limit > 0 && s.window > p.Hold
}

func (s learnState) spec() (LimitSpec, bool) {
	return LimitSpec{fixed: true, per: s.window, n: s.limit}, s.limit > 0 && s.window > 0
}

func (s learnState) alignment() alignment { return alignment{s.alignAt, s.alignPrec} }

// contradicted records at now a refusal whose own answer advertised
// remaining budget left: that budget is not what refuses.
func (s *learnState) contradicted(now int64) {
	s.secondary = now
	s.expires = max(s.expires, now+LearnTTL)
}

// align records a provider's reset at u (µs) read to prec: windows align
// to it.
func (s *learnState) align(now, u, prec int64) {
	s.alignAt, s.alignPrec = u, prec
	s.expires = max(s.expires, now+LearnTTL)
}

// count adds an admission of the cycle; the first admission of a scope
// that learned nothing starts the first cycle (its first contact).
func (s *learnState) count(at, cost int64) {
	if s.since == 0 && s.limit == 0 {
		s.since, s.admits = at, 0
		s.expires = max(s.expires, at+LearnTTL)
	}
	if s.since > 0 && at >= s.since {
		s.admits += cost
	}
}

// report adds n admissions that no script counted (a gate admitted them
// without a round trip), the first of them age µs before now, to the
// cycle they belong to: the one in progress; or, while the scope is
// paused by the refusal that closed a cycle, that cycle (they were sent
// before it closed), whose n they raise; or, when the scope learned
// nothing and counts no cycle, the first cycle, begun at the first of
// them: the scope's first contact, which no script saw (count).
func (s *learnState) report(now, n, age int64) {
	switch {
	case n <= 0:
	case now < s.absorb:
		s.limit += n
	case s.since > 0 && now >= s.since:
		s.admits += n
	case s.since == 0 && s.limit == 0:
		s.count(now-max(age, 0), n)
	}
}

// grow raises n when the learned window of at is the first admission of
// a window that follows one spent whole without a refusal.
func (s *learnState) grow(l LimitSpec, p Params, w *windowState, al alignment, at int64) {
	start, _ := w.window(l, p, al, at)
	if w.used(l, start) > 0 || w.used(l, start-l.per) < s.limit || s.refused >= start-l.per {
		return
	}
	s.best = max(s.best, s.limit)
	if s.limit < s.best {
		s.limit = s.best
	} else if at >= s.frozen {
		s.limit++
	}
}

// hintlessPrec is the precision (µs) a hintless refusal teaches the
// learned limit with: its deadline is its episode's pause, not the
// provider's reset, which may be anywhere within the pause's first
// second (fallbackFirst): the learned window is rounded to whole seconds,
// as a hint read in seconds is. Hintless refusals teach at all because,
// with nothing learned, every episode's probe answer sends the whole
// fleet, and a bucket's refill refuses all it has no token for. The
// windows they align are paced (learnState.paced): unpaced, a limiter
// without a burst (nginx's limit_req) accepts one of each window's burst,
// and the scope would learn one request a window.
const hintlessPrec = fallbackFirst * 1000

// teaching is the refusal as the learned limit learns from it: a hinted
// one as it is; a hintless one of a provider, with no limit configured,
// as a refusal hinted with its episode's pause read to hintlessPrec (the
// scope is paused until the deadline in force, and what the cycle before it
// got accepted is the quota it saw, as for a hint); an operator's pause
// teaches nothing, nor does a hintless refusal beside configured limits
// (their windows align to hints only).
func (r Refusal) teaching(configured bool) Refusal {
	if !r.Hinted && !r.Operator && !configured {
		r.Hinted, r.Prec, r.Hintless = true, hintlessPrec, true
	}
	return r
}

// refuse learns from a refusal at now whose deadline in force is D (µs).
// open tells whether the scope was open (the refusal ends a cycle) or
// paused (a request on its way when it paused); configured whether limits
// are configured, or the learned concurrency limit paced the cycle
// (nothing is learned then but the alignment). It reports
// whether the learned windows' counts are over (they were refused), and the
// instant of the learned window's probe it refused (0 none): its entry
// leaves the learned log (State.Refuse).
//
// A refusal of a paused scope changes the cycle that paused it only
// (absorbOne, followPause). One of an open scope answers the probe that
// was out (it is no longer awaited); unhinted, it ends the cycle with no
// successor: nothing tells where the provider's window ends. Hinted, it
// teaches by what it refused (refusing): a probe's window had not begun
// (refuseProbe), a paced window's pace was too fast (slowDown), any other
// says what the cycle got accepted (learnFrom); and the next cycle starts
// at D (nextCycle).
func (s *learnState) refuse(now, D int64, r Refusal, open, configured bool, lwin *windowState) (over bool, probe int64) {
	if !open {
		s.absorbOne(now)
		s.followPause(D, r)
		return false, 0
	}
	pacedOut, probed := s.refusing(r)
	at := s.probeAt
	s.probeAt = 0
	if !r.Hinted {
		s.since, s.admits, s.absorb = 0, 0, 0
		return false, 0
	}
	s.expires = now + LearnTTL
	switch {
	case configured: // the configured limits pace the scope: it learns the alignment only
	case probed:
		probe = s.refuseProbe(now, D, at, r, lwin)
	case pacedOut:
		s.slowDown(now)
	default:
		s.learnFrom(now, D, r.Prec, lwin)
	}
	s.nextCycle(now, D, r)
	return true, probe
}

// absorbOne takes one off n for a refusal at now of a request that was on
// its way when the refusal that closed the cycle paused the scope (before
// absorb): the cycle got one fewer accepted than it admitted. At 0 the
// cycle got nothing accepted, so it taught no quota (an outage: the pause
// answers it), nor a window: the learned log and windows are forgotten
// with it.
func (s *learnState) absorbOne(now int64) {
	if now < s.absorb && s.limit > 0 {
		s.limit--
		if s.limit == 0 {
			s.window = 0
		}
	}
}

// followPause moves the next cycle's start to D when a hinted refusal of
// a paused scope moved the pause later and the next cycle was to start at
// the end of the pause before (since, where the refusal that paused the
// scope aligned the windows: nextCycle): the provider's window resets at
// the deadline in force, not at the one before.
func (s *learnState) followPause(D int64, r Refusal) {
	if r.Hinted && D > s.since && s.since > 0 && s.since == s.alignAt {
		s.since, s.alignAt = D, D
	}
}

// refusing is what a refusal of an open scope refused. pacedOut: a
// hintless refusal of a paced window of a learned limit, whose pace is
// then above the provider's. probed: otherwise, a refusal while a learned
// window's probe is out, or a refusal of the hintless episode's probe:
// the provider refused even one request, so the probe's window has not
// begun.
func (s learnState) refusing(r Refusal) (pacedOut, probed bool) {
	pacedOut = r.Hintless && s.paced > 0 && s.limit > 0
	return pacedOut, s.probeAt > 0 && !pacedOut || r.Hintless && r.Probe
}

// refuseProbe learns from a hinted refusal of a probe: the learned
// window's, sent at at (0: none was out, the hintless episode's probe was
// refused). Its window has not begun, so n stays, and no
// refusal still on its way takes one off it. A hint tells where the
// provider's window ends (relearn); a hintless refusal's deadline is the
// episode's own pause, which tells nothing of the window. It returns at:
// the provider counted nothing for the refused probe, so its entry leaves
// the learned log.
func (s *learnState) refuseProbe(now, D, at int64, r Refusal, lwin *windowState) int64 {
	s.absorb = 0
	if !r.Hintless {
		s.relearn(now, D, at, r.Prec, lwin)
	}
	return at
}

// slowDown learns from a hintless refusal of a paced window at now: its
// pace is above the provider's, so n is one less (at least 1). The level
// was refused, so best is forgotten and raises frozen for raiseAfter; no
// refusal still on its way takes more off n.
func (s *learnState) slowDown(now int64) {
	s.limit, s.best, s.frozen, s.absorb = max(s.limit-1, 1), 0, now+raiseAfter, 0
}

// nextCycle starts the next cycle at D, the hinted refusal's deadline at
// now: the provider's window resets then, so the learned windows align to
// it, read to the hint's precision, unpaced. A hintless refusal's D is its
// episode's own pause, not the provider's reset: nothing tells a window's
// edges, so it aligns to no precision and paces the windows
// (learnState.paced).
func (s *learnState) nextCycle(now, D int64, r Refusal) {
	s.since, s.admits, s.refused = D, 0, now
	s.alignAt, s.alignPrec, s.paced = D, r.Prec, 0
	if r.Hintless {
		s.alignPrec, s.paced = 0, 1
	}
}

// learnFrom learns from a hinted refusal at now whose deadline is D, read
// to prec, that ended a cycle and refused no probe (the rules above). It
// absorbs no refusal unless it learns n: then the refusals on their way
// until D take one off each (absorbOne). Under a learned limit, a deadline
// at the learned window's end says what the window got accepted
// (fromWindowEnd). A deadline elsewhere says the windows are not the
// provider's: n and w are learned again from the cycle since the last
// refusal (fromCycle), as from a first refusal. A cycle not begun before
// now teaches nothing.
func (s *learnState) learnFrom(now, D, prec int64, lwin *windowState) {
	s.absorb = 0
	if s.fromWindowEnd(now, D, prec, lwin) {
		return
	}
	if s.since == 0 || s.since >= now {
		return
	}
	s.fromCycle(now, D, prec)
}

// fromWindowEnd learns from a refusal at now whose deadline D is the
// learned window's end, within the hint's precision (at least a
// millisecond), and reports whether it was: n was too many, so n becomes
// what the window got accepted (its admissions less the refused one, at
// least 1). A window spent whole at a level never sustained (n at or above
// best) refused that level: best is forgotten, raises frozen (raiseAfter).
func (s *learnState) fromWindowEnd(now, D, prec int64, lwin *windowState) bool {
	l, ok := s.spec()
	if !ok {
		return false
	}
	start := s.alignAt + floorDiv(now-s.alignAt, l.per)*l.per
	if abs(D-(start+l.per)) > max(prec, 1000) {
		return false
	}
	if lwin.used(l, start) >= s.limit && s.limit >= s.best {
		s.best, s.frozen = 0, now+raiseAfter
	}
	s.limit, s.absorb = max(lwin.used(l, start)-1, 1), D
	return true
}

// fromCycle learns n and w from the cycle a refusal at now with deadline
// D ended: w is D less the cycle's start (rounded to the hint's
// precision), n what it admitted less the refused one. A cycle of fewer
// than two admissions, or a window outside [minLearnedWindow,
// maxLearnedWindow], teaches nothing. When the cycle began at a deadline
// (a limit was learned), or was refused within the hint's precision of
// its start, it refused the level the provider's window reached: raises
// are frozen (raiseAfter).
func (s *learnState) fromCycle(now, D, prec int64) {
	w := roundWindow(D-s.since, prec)
	if s.admits < 2 || w < minLearnedWindow || w > maxLearnedWindow {
		return
	}
	if s.limit > 0 || D-now >= w-prec {
		s.frozen = now + raiseAfter
	}
	s.limit, s.window, s.absorb = s.admits-1, w, D
}

// relearn learns w again from the refusal at now of the probe sent at at,
// whose deadline is D (the rules above): the window before the probe's,
// from start, got its n accepted, all in the provider's window the probe
// was refused in, which ends at D; the refusal came in the probe's window,
// not after a probe whose answer never came.
func (s *learnState) relearn(now, D, at, prec int64, lwin *windowState) {
	l, ok := s.spec()
	if !ok {
		return
	}
	tol := max(prec, 1000)
	start := s.alignAt + floorDiv(at-s.alignAt, l.per)*l.per - l.per
	w := roundWindow(D-start, prec)
	if now < start+2*l.per && lwin.used(l, start) >= s.limit && D-now > tol && D-now <= l.per-tol && w > l.per+tol && w <= maxLearnedWindow {
		s.window = w
	}
}

// roundWindow is a learned window w read from a hint of precision prec:
// to the second when the hint was read to the second ("5 seconds" read at
// any point of its last second).
func roundWindow(w, prec int64) int64 {
	if prec >= 1_000_000 {
		return floorDiv(w+500_000, 1_000_000) * 1_000_000
	}
	return w
}

// luaLearnProbe is a refused probe's relearning of the window
// (learnState.relearn) and a learned window's rounding (roundWindow); lwin
// is the learned windows' counts, as a fixed limit of the learned window.
const luaLearnProbe = `
local function round_window(w, prec)
  if prec >= 1000000 then return math.floor((w + 500000) / 1000000) * 1000000 end
  return w
end
local function learn_relearn(s, D, at, prec, lwin)
  local l, ok = learn_spec(s)
  if not ok then return end
  local tol = math.max(prec, 1000)
  local start = s.alignAt + math.floor((at - s.alignAt) / l.per) * l.per - l.per
  local w = round_window(D - start, prec)
  if now_us < start + 2 * l.per and window_used(lwin, start) >= s.limit and D - now_us > tol and D - now_us <= l.per - tol
    and w > l.per + tol and w <= C.maxLearnedWindow then s.window = w end
end
`

// luaLearn is the learned limit's transaction as admissions and answers
// meet it (learnState.grow, earliest, opens, answer, contradicted, align):
// the window grown, opened by its probe and answered, aligned by a reset
// within State.alignsWithin (state_aligns_within); lwin is the learned
// windows' counts, as a fixed limit of the learned window.
const luaLearn = `
local function learn_grow(s, lwin, al, at)
  local start = window(lwin, al, at)
  if window_used(lwin, start) > 0 or window_used(lwin, start - lwin.per) < s.limit or s.refused >= start - lwin.per then return end
  s.best = math.max(s.best, s.limit)
  if s.limit < s.best then s.limit = s.best elseif at >= s.frozen then s.limit = s.limit + 1 end
  s.dirty = true
end
local function learn_earliest(s)
  if s.probeAt > 0 and now_us < s.probeAt + C.answer then
    return math.min(s.probeAt + C.answer, now_us + C.probePoll)
  end
  return 0
end
local function learn_opens(s, lwin, al, at)
  local start = window(lwin, al, at)
  return window_used(lwin, start) == 0 and window_used(lwin, start - lwin.per) >= lwin.n
end
local function learn_answer(s, at, reset)
  if at > 0 and s.probeAt == at then
    s.probeAt, s.dirty = 0, true
    if reset == 0 then s.alignAt = now_us end
  end
end
local function learn_contradicted(s)
  s.secondary, s.expires, s.dirty = now_us, math.max(s.expires, now_us + C.learnTTL), true
end
local function learn_align(s, u, prec)
  s.alignAt, s.alignPrec, s.expires, s.dirty = u, prec, math.max(s.expires, now_us + C.learnTTL), true
end
local function state_aligns_within(s)
  local w = C.longestWindow
  if w == 0 then w = math.huge end -- Params.longestWindow: no fixed window configured
  local l, ok = learn_spec(s.learn)
  if ok and w == math.huge then w = l.per end
  return w
end
`

// luaLearnCount is learnState.count: an admission counted in the cycle
// since the last refusal (the learned limit's evidence).
const luaLearnCount = `
local function learn_count(s, at, cost)
  if s.since == 0 and s.limit == 0 then
    s.since, s.admits, s.expires = at, 0, math.max(s.expires, at + C.learnTTL)
  end
  if s.since > 0 and at >= s.since then s.admits, s.dirty = s.admits + cost, true end
end
`

// luaLearnRecord loads the learned hash as learnState (a record past its
// expires is none) and saves it back when a transition changed it; and the
// shapes of the learned limit (learnState.spec, logSpec, alignment): a
// LimitSpec is a table of its fields, an alignment {at, prec}.
const luaLearnRecord = `
local function learn_load(key) return hrecord(key, learnFields) end
local function learn_save(s) hsave(s, learnFields) end
local function learn_spec(s) return {fixed = true, per = s.window, n = s.limit}, s.limit > 0 and s.window > 0 end
local function learn_log_spec(s)
  return {sliding = true, per = s.window + C.slidingSettle, n = s.limit}, s.limit > 0 and s.window > C.hold
end
local function learn_alignment(s) return {at = s.alignAt, prec = s.alignPrec} end
`

// luaLearnRefusal is the learned limit's transaction as refusals and
// uncounted admissions teach it (learnState.refuse, report): what a cycle
// got accepted (luaLearnTeach), then the rules of a refusal, each a local
// function named as its Go twin (luaLearnRefuse).
const luaLearnRefusal = luaLearnTeach + luaLearnRefuse

// luaLearnTeach is learnState.report, and learnFrom with its rules
// (fromWindowEnd, fromCycle).
const luaLearnTeach = `
local function learn_report(s, n, age)
  if n <= 0 then return end
  if now_us < s.absorb then s.limit, s.dirty = s.limit + n, true
  elseif s.since > 0 and now_us >= s.since then s.admits, s.dirty = s.admits + n, true
  elseif s.since == 0 and s.limit == 0 then learn_count(s, now_us - math.max(age, 0), n) end
end
local function learn_from_window_end(s, D, prec, lwin)
  local l, ok = learn_spec(s)
  if not ok then return false end
  local start = s.alignAt + math.floor((now_us - s.alignAt) / l.per) * l.per
  if math.abs(D - (start + l.per)) > math.max(prec, 1000) then return false end
  if window_used(lwin, start) >= s.limit and s.limit >= s.best then s.best, s.frozen = 0, now_us + C.raiseAfter end
  s.limit, s.absorb = math.max(window_used(lwin, start) - 1, 1), D
  return true
end
local function learn_from_cycle(s, D, prec)
  local w = round_window(D - s.since, prec)
  if s.admits < 2 or w < C.minLearnedWindow or w > C.maxLearnedWindow then return end
  if s.limit > 0 or D - now_us >= w - prec then s.frozen = now_us + C.raiseAfter end
  s.limit, s.window, s.absorb = s.admits - 1, w, D
end
local function learn_from(s, D, prec, lwin)
  s.absorb = 0
  if learn_from_window_end(s, D, prec, lwin) then return end
  if s.since == 0 or s.since >= now_us then return end
  learn_from_cycle(s, D, prec)
end
`

// luaLearnRefuse is learnState.refuse and its rules: absorbOne,
// followPause, refusing, refuseProbe, slowDown and nextCycle; and the
// refusal as the learned limit learns from it (Refusal.teaching), r a
// table of Refusal's fields, lower-cased.
const luaLearnRefuse = `
local function refusal_teaching(r, configured)
  local t = {hinted = r.hinted, prec = r.prec, operator = r.operator, hintless = r.hintless, probe = r.probe}
  if not r.hinted and not r.operator and not configured then t.hinted, t.prec, t.hintless = true, C.hintlessPrec, true end
  return t
end
local function learn_absorb_one(s)
  if now_us < s.absorb and s.limit > 0 then
    s.limit = s.limit - 1
    if s.limit == 0 then s.window = 0 end
  end
end
local function learn_follow_pause(s, D, r)
  if r.hinted and D > s.since and s.since > 0 and s.since == s.alignAt then s.since, s.alignAt = D, D end
end
local function learn_refusing(s, r)
  local pacedOut = r.hintless and s.paced > 0 and s.limit > 0
  return pacedOut, s.probeAt > 0 and not pacedOut or r.hintless and r.probe
end
local function learn_refuse_probe(s, D, at, r, lwin)
  s.absorb = 0
  if not r.hintless then learn_relearn(s, D, at, r.prec, lwin) end
  return at
end
local function learn_slow_down(s)
  s.limit, s.best, s.frozen, s.absorb = math.max(s.limit - 1, 1), 0, now_us + C.raiseAfter, 0
end
local function learn_next_cycle(s, D, r)
  s.since, s.admits, s.refused, s.alignAt, s.alignPrec, s.paced = D, 0, now_us, D, r.prec, 0
  if r.hintless then s.alignPrec, s.paced = 0, 1 end
end
local function learn_refuse(s, D, r, open, configured, lwin)
  s.dirty = s.expires > 0 or r.hinted
  if not open then
    learn_absorb_one(s)
    learn_follow_pause(s, D, r)
    return false, 0
  end
  local pacedOut, probed = learn_refusing(s, r)
  local at = s.probeAt
  s.probeAt = 0
  if not r.hinted then s.since, s.admits, s.absorb = 0, 0, 0; return false, 0 end
  s.expires = now_us + C.learnTTL
  local probe = 0
  if configured then -- the configured limits pace the scope: it learns the alignment only
  elseif probed then probe = learn_refuse_probe(s, D, at, r, lwin)
  elseif pacedOut then learn_slow_down(s)
  else learn_from(s, D, r.prec, lwin) end
  learn_next_cycle(s, D, r)
  return true, probe
end
`
