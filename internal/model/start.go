package model

// The slow start: how a scope whose provider says nothing of its quota
// sends its first requests.
//
// A provider that advertises no budget (the first contact's probe answered
// with none: budgetState.silent) and of which nothing was learned tells
// its quota only by refusing. Sent at once, a fleet's first requests are
// all on their way when the first refusal comes back, and every one the
// quota had no room for is refused with it (twenty workers in front of a
// bucket of 11 have nine refused before the first answer comes back, and
// their retries meet a bucket still empty). So such a scope starts as TCP
// does: a request answered without a refusal lets two more go, so the
// requests in flight double with every round trip, from startFirst, while
// the answers say the provider takes them. Requests counted: sent, and
// answered (each answer is reported: the admission's answer id, as a
// learned window's probe's, Decision.Opens). A scope admits while
//
//	sent + cost ≤ startFirst + 2·answered
//
// and the others wait (looking every concurrentPoll, woken by an answer
// reported in their process), as for a concurrency limit's slot
// (ReasonInFlight). A task with no place to wait in its process
// (Params.NowOnly: the fair share of waiting workers, internal/local's holders) goes at
// once: deferred, asynq would bring it back a second later, more than the
// start's round trips save (a carrier without quota beside a paced one had
// its first tasks deferred: TestModesEndToEnd).
//
// The start also tells what the provider was seen to accept at once
// (most): a run of answers without a refusal is of requests all admitted
// before its first answer, so all were in flight together at that
// instant; an answer of a request admitted since begins the next run.
// A concurrency limit's probation starts no lower (flightState.begin):
// a refused request's level counts the requests admitted before it, but
// those admitted with it in the same moment may reach the provider first.
//
// The start ends at the first refusal (what the refusals teach paces the
// scope from there: learn.go, fallback.go), after startAnswers
// answers, or when no answer came for the answer timeout (Params.Answer),
// so a lost answer holds no scope longer than that. Nothing but a silent
// provider starts slowly: a budget advertised paces the scope by itself,
// configured limits by themselves. Resume forgets the start with the
// budget: the scope's next request is a first contact again.
//
// Invariants: while the start is in force and no task lacks a place to
// wait, the requests admitted in it are at most startFirst + 2·answered;
// it holds no scope past its last answer and the answer timeout; it is
// forgotten LearnTTL after it began or was refused.

// startFirst is how many requests a slow start sends before its first
// answer: the first contact's probe, answered, doubled (TCP's rule).
const startFirst = 2

// startAnswers is how many answers end a slow start that no refusal
// ended: its room is then startFirst + 2·startAnswers requests at once
// (66), beyond the workers per scope of most asynq fleets, whose first
// requests it paces; a larger fleet goes at once from there. It bounds
// what the start costs a scope that is never refused: its first 32
// answers each a round trip to Redis, its admissions one each until then
// (the open cache waits for its end). It does not end once its room is
// twice the requests in flight: that comes within the first few requests,
// while the fleet's other workers still wait for the first contact's
// probe, and they would all go at once after it.
const startAnswers = 32

// StartAnswerWakes is how many of its workers waiting in this process an
// answer reported here wakes at once (local.SlotWakers), instead of at
// their next look: the two the answer lets go.
const StartAnswerWakes = 2

// startState is the scope's slow start.
type startState struct {
	began    int64 // µs: its first admission (0: none)
	last     int64 // µs: its last answer (or its first admission)
	sent     int64 // units admitted in it
	answered int64 // requests admitted in it answered without a refusal
	run      int64 // µs: the first answer of the current run (0: none)
	along    int64 // the answers of the current run
	most     int64 // the most answers of one run: requests accepted at once
	over     bool  // it ended: a refusal, or it no longer held the scope back
	expires  int64 // µs: forgotten at (0: empty)
}

// on reports whether a scope whose budget is b, with a learned limit
// (learned), starts slowly (or goes on doing so) at now.
func (s startState) on(p Params, b budgetState, learned bool, now int64) bool {
	if len(p.Limits) > 0 || !b.silent || learned || s.over {
		return false
	}
	return s.began == 0 || now < s.last+p.Answer
}

// room is how many units the start lets go at once.
func (s startState) room() int64 { return startFirst + 2*s.answered - s.sent }

// earliest is when the start admits cost more at now (0: now).
func (s startState) earliest(p Params, now, cost int64) int64 {
	if s.began == 0 || cost <= s.room() {
		return 0
	}
	return min(s.last+p.Answer, now+concurrentPoll)
}

// spend commits an admission of cost at now.
func (s *startState) spend(now, cost int64) {
	if s.began == 0 {
		*s = startState{began: now, last: now, expires: now + LearnTTL}
	}
	s.sent += cost
}

// answer records that the request admitted at at was answered without a
// refusal, at now.
func (s *startState) answer(now, at int64) {
	if at > 0 && s.began > 0 && at >= s.began && !s.over {
		s.answered++
		s.last = now
		s.over = s.answered >= startAnswers
		s.runs(now, at)
	}
}

// runs counts at now the answer of the request admitted at at in its run:
// the current one if it was admitted before the run's first answer (it
// was in flight then), or a new run from now.
func (s *startState) runs(now, at int64) {
	if s.run == 0 || at >= s.run {
		s.run, s.along = now, 0
	}
	s.along++
	s.most = max(s.most, s.along)
}

// end ends the start at now: a refusal of its provider.
func (s *startState) end(now int64) {
	if s.began > 0 && !s.over {
		s.over, s.expires = true, now+LearnTTL
	}
}

// luaStart is the slow start's transaction (startState.on, room,
// earliest, spend, answer, end), on a hash with the fields of
// startFields, loaded as a record past its expires is none and saved
// when a transition changed it.
const luaStart = `
local function start_load(key)
  local s = hrecord(key, startFields)
  s.over = s.over == C.flagOn
  return s
end
local function start_save(s) hsave(s, startFields) end
local function start_on(s, b, learned)
  if C.limits > 0 or not b.silent or learned or s.over then return false end
  return s.began == 0 or now_us < s.last + C.answer
end
local function start_room(s) return C.startFirst + 2 * s.answered - s.sent end
local function start_earliest(s, cost)
  if s.began == 0 or cost <= start_room(s) then return 0 end
  return math.min(s.last + C.answer, now_us + C.concurrentPoll)
end
local function start_spend(s, at, cost)
  if s.began == 0 then
    s.began, s.last, s.sent, s.answered, s.over, s.expires = at, at, 0, 0, false, at + C.learnTTL
    s.run, s.along, s.most = 0, 0, 0
  end
  s.sent, s.dirty = s.sent + cost, true
end
local function start_runs(s, at)
  if s.run == 0 or at >= s.run then s.run, s.along = now_us, 0 end
  s.along = s.along + 1
  s.most = math.max(s.most, s.along)
end
local function start_answer(s, at)
  if at > 0 and s.began > 0 and at >= s.began and not s.over then
    s.answered, s.last, s.dirty = s.answered + 1, now_us, true
    s.over = s.answered >= C.startAnswers
    start_runs(s, at)
  end
end
local function start_end(s)
  if s.began > 0 and not s.over then s.over, s.expires, s.dirty = true, now_us + C.learnTTL, true end
end
`
