package model

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/internal/schema"

	"github.com/redis/go-redis/v9"
)

// The scripts: the model's transitions (model.go) as Redis transactions,
// composed from one fragment per concern (the model's files). Each runs on Redis
// TIME, touches only the keys of one scope (one hash tag), and answers with
// a named reply: a flat list of the names and values of its fields that
// are not zero (or false), in the order of the reply's names, an integer
// sent as a number, anything else as a string (see reply and NamedReply).
//
// Every script starts with luaPrelude (the clock, strict readers), the
// constants C and the field lists (luaConstants), the reply (luaReply) and
// the fragments, then its own body.

// luaPrelude is shared by the scripts: the Redis clock, a strict reader of
// integer records (anything else is malformed and reads as absent) and num
// (an integer written in full, never in exponent form).
const luaPrelude = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local function int(v)
  if type(v) == 'string' and #v <= 17 and string.match(v, '^%d+$') then return tonumber(v) end
  return nil
end
local function num(v) return string.format('%.0f', v) end
`

// luaReply is the named reply (see script), after the constants C it
// reads: a field that is true is sent as C.flagOn.
const luaReply = `
local function reply(names, r)
  local out = {}
  for _, n in ipairs(names) do
    local v = r[n]
    if v == true then v = C.flagOn end
    if type(v) == 'number' and v ~= math.floor(v) then v = num(v) end
    if v and v ~= 0 then out[#out + 1] = n; out[#out + 1] = v end
  end
  return out
end
`

// luaConstants declares C, the constants the fragments share, from their
// Go definitions, the flags among them (flagOn, the modes, the refusal
// kinds, the class, the limit kinds, the verdict codes) that the
// arguments, records and replies carry; the per-call ones, Params' fields
// (hold, nowOnly, maxPause, probe, answer, reserve, lend, expect, limits:
// how many are configured, longestWindow: p.longestWindow, 0 for none),
// are set by the script body from its arguments.
var luaConstants = func() string {
	c := map[string]int64{
		"maxRounds": maxRounds, "earliestRounds": earliestRounds, "probePoll": probePoll,
		"learnTTL": LearnTTL, "margin": ExpiryMargin.Milliseconds(),
		"minLearnedWindow": minLearnedWindow, "maxLearnedWindow": maxLearnedWindow, "claimGrace": claimGrace,
		"concurrentPoll": concurrentPoll, "raiseAfter": raiseAfter, "fallbackFirst": fallbackFirst, "windowSettle": windowSettle,
		"slidingSettle": SlidingSettle, "minPause": MinPause.Milliseconds(), "hintlessPrec": hintlessPrec, "minCounterWindow": minCounterWindow, "startFirst": startFirst, "startAnswers": startAnswers,
		"millisPrec": millisPrec, "recordVersion": schema.RecordVersion,
		"millisRatio": millisRatio,
		"modeAdmit":   modeAdmit, "modeDry": modeDry, "modeNowOnly": modeNowOnly,
		"hintless": Hintless, "hinted": Hinted, "operator": Operator,
		"flagOn": flagOn, "flagOff": flagOff, "classInteractive": int64(Interactive),
		"kindGCRA": int64(schema.GCRA), "kindFixed": int64(schema.Fixed), "kindSliding": int64(schema.Sliding), "kindConcurrent": int64(schema.Concurrent),
		"admitted": Admitted, "paused": Paused, "limited": Limited,
		"reasonPause": int64(ReasonPause), "reasonBudget": int64(ReasonBudget), "reasonProbe": int64(ReasonProbe),
		"reasonLimit": int64(ReasonLimit), "reasonLearned": int64(ReasonLearned), "reasonInFlight": int64(ReasonInFlight),
		"flightNone": flightNone, "flightProbation": flightProbation, "flightConfirmed": flightConfirmed, "flightRate": flightRate, "flightBoth": flightBoth,
		"flightPause": flightPause, "flightOwn": flightOwn, "flightSpent": flightSpent, "flightLease": flightLease, "flightConfirm": flightConfirm, "flightProbes": flightProbes,
	}
	var b strings.Builder
	b.WriteString("local C = {")
	for _, k := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(&b, "%s = %d, ", k, c[k])
	}
	b.WriteString("}\nlocal F = {origin = '" + schema.FieldOrigin + "', version = '" + schema.FieldVersion + "'}\n")
	b.WriteString("local budgetFields = " + luaList(schema.BudgetFields) + "\n")
	b.WriteString("local learnFields = " + luaList(schema.LearnFields) + "\n")
	b.WriteString("local classFields = " + luaList(schema.ClassFields) + "\n")
	b.WriteString("local fallbackFields = " + luaList(schema.FallbackFields) + "\n")
	b.WriteString("local startFields = " + luaList(schema.StartFields) + "\n")
	b.WriteString("local flightFields = " + luaList(schema.FlightFields) + "\n")
	return b.String()
}()

func luaList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = strconv.Quote(s)
	}
	return "{" + strings.Join(q, ", ") + "}"
}

// ExpiryMargin is how long after the instant a record's values say it is
// over its key expires: expiry collects, it never decides (a key read a
// moment before it expires says the same as no key).
const ExpiryMargin = time.Second

// fragments are the concerns' Lua in the order a script defines them: a
// fragment calls only functions defined before it (or by itself).
var fragments = []string{luaLearnRecord, luaLearnCount, luaClass, luaPause, luaFallback, luaStart, luaSliding, luaConcurrency,
	luaWindow, luaWindowAdmit, luaLimitRecord, luaFlight, luaFlightAnswer, luaLimit, luaBudgetRefill, luaBudgetCounter, luaBudgetRecord, luaBudgetPause, luaBudget,
	luaBudgetObserve, luaLearn, luaLearnProbe, luaLearnRefusal, luaLine, luaCompose, luaActive, luaAdmitShown, luaAdmitDeadline, luaAdmitRetried, luaAdmitFlight, luaAdmitCommit, luaAdmitLimits}

// script composes a script from the prelude, the functions of the
// fragments body uses and body, whose reply has the fields names (REPLY
// in the body).
func script(names []string, body string) *redis.Script {
	return scriptWith(names, "", body)
}

// scriptWith is script with head run before the functions only body uses
// are defined: a path that needs few of them returns early, having
// defined no more than those.
func scriptWith(names []string, head, body string) *redis.Script {
	return redis.NewScript(composeScript(names, head, body))
}

// composeScript is the source of scriptWith's script: of the fragments'
// functions, those head uses, then head, then those body uses besides,
// then body, each in the fragments' order. A script defines only the
// functions it may call, since Redis runs every definition on every call:
// a fragment is the concern's Lua as a reader finds it, not a unit of
// composition.
func composeScript(names []string, head, body string) string {
	first := uses(head, nil)
	return luaPrelude + luaConstants + luaReply + luaHash + "local REPLY = " + luaList(names) + "\n" +
		pick(first, nil) + head + pick(uses(body, first), first) + body
}

// luaDefinition finds where a fragment's functions begin: a fragment is
// a sequence of top-level local functions, each until the next.
var luaDefinition = regexp.MustCompile(`(?m)^local function ([A-Za-z_][A-Za-z0-9_]*)`)

// luaFunction is one function of a fragment: its name and source.
type luaFunction struct{ name, src string }

// functions are the fragments' functions in the order a script defines
// them; a fragment that holds anything but functions is a mistake.
var functions = func() []luaFunction {
	var out []luaFunction
	for _, f := range fragments {
		ms := luaDefinition.FindAllStringSubmatchIndex(f, -1)
		if len(ms) == 0 || strings.TrimSpace(f[:ms[0][0]]) != "" {
			panic("quotagate: a Lua fragment holds more than its functions: " + f)
		}
		for k, m := range ms {
			end := len(f)
			if k+1 < len(ms) {
				end = ms[k+1][0]
			}
			out = append(out, luaFunction{name: f[m[2]:m[3]], src: f[m[0]:end]})
		}
	}
	return out
}()

// luaName finds the names of a fragment, and what follows each up to
// its next character that is not a space.
var luaName = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(\s*=?=?)`)

// mentions are the names src mentions that may be a function of the
// fragments, called or passed (table.sort's less): a field's or a
// method's name (after a '.' or a ':') and a table constructor's key
// (before a single '=') are left out.
func mentions(src string) []string {
	var out []string
	for _, m := range luaName.FindAllStringSubmatchIndex(src, -1) {
		if m[0] > 0 && (src[m[0]-1] == '.' || src[m[0]-1] == ':') {
			continue
		}
		if tail := strings.TrimSpace(src[m[2]:m[3]]); tail == "=" {
			continue
		}
		out = append(out, src[m[0]:m[2]])
	}
	return out
}

// definedIn maps every function of the fragments to its index in
// functions.
var definedIn = func() map[string]int {
	m := map[string]int{}
	for i, f := range functions {
		m[f.name] = i
	}
	return m
}()

// uses marks, in need (a fresh one when nil), the functions src
// mentions, and those they mention, transitively: a field named as a
// function is no use of it.
func uses(src string, need []bool) []bool {
	if need == nil {
		need = make([]bool, len(functions))
	} else {
		need = slices.Clone(need)
	}
	var visit func(string)
	visit = func(src string) {
		for _, n := range mentions(src) {
			if i, ok := definedIn[n]; ok && !need[i] {
				need[i] = true
				visit(functions[i].src)
			}
		}
	}
	visit(src)
	return need
}

// pick concatenates, in order, the functions need marks and done does
// not.
func pick(need, done []bool) string {
	var b strings.Builder
	for i, f := range functions {
		if need[i] && (done == nil || !done[i]) {
			b.WriteString(f.src)
		}
	}
	return b.String()
}

// AdmitReply names the fields of the admission's reply (see Decision).
var AdmitReply = []string{"code", "reason", "wait", "deadline", "byOp", "reopen", "probe", "opens", "seq", "spread", "unreserved", "limited", "cache", "now",
	"budgetRemaining", "budgetReset", "budgetLimit", "learnedLimit", "learnedWindow", "backlog", "leased", "level", "mark", "learnedInFlight", "slots"}

// AdmitScript is the admission of one task (State.Admit); with dry
// set it commits nothing and answers what an admission would, with what
// the scope keeps (Gate.State). A record of a newer format (luaHash)
// answers paused until it expires, or until the pause if later, and
// commits nothing.
//
// KEYS[1] pause  KEYS[2] the class's line (line or iline)  KEYS[3] budget
// KEYS[4] learn  KEYS[5] lwin  KEYS[6] pauseby  KEYS[7] class
// KEYS[8] fallback  KEYS[9] llog  KEYS[10] start  KEYS[11] flight
// KEYS[12] fconc  KEYS[12+i] the state of the i-th configured limit
// ARGV[1] cost  ARGV[2] hold µs  ARGV[3] max pause ms  ARGV[4] probe µs
// ARGV[5] mode (modeAdmit; modeDry: commit nothing; modeNowOnly: reserve
// no slot ahead, Params.NowOnly)  ARGV[6] a learned window's probe's
// timeout µs  ARGV[7] admissions no script counted (State.Report)
// ARGV[8] how long before the call the first of them was admitted, µs
// ARGV[9] class (Background, Interactive)  ARGV[10] reserve per mille
// ARGV[11] lend µs  ARGV[12] the admission's lease id (its concurrency
// limits' lease)  ARGV[13] expect (flagOn: interactive work is expected,
// Params.Expect)
// ARGV[14] n, the number of configured limits, then 3 values per limit:
// its kind (schema.LimitKind: GCRA, Fixed, Sliding, Concurrent), period
// (a sliding log's with its settling time; a lease's life) or interval
// µs, rate, burst or the requests in flight
// returns: admitReply
var AdmitScript = scriptWith(AdmitReply, luaAdmitArgs+luaAdmitOpen, luaAdmitBody)

// luaAdmitArgs binds the admission's KEYS and ARGV to names (see
// AdmitScript), for luaAdmitOpen and luaAdmitBody.
const luaAdmitArgs = `
local keys = {pause = KEYS[1], line = KEYS[2], budget = KEYS[3], learn = KEYS[4], lwin = KEYS[5], pauseby = KEYS[6], class = KEYS[7],
  fallback = KEYS[8], llog = KEYS[9], start = KEYS[10], flight = KEYS[11], fconc = KEYS[12]}
local argv = {cost = tonumber(ARGV[1]), hold = tonumber(ARGV[2]), maxPause = tonumber(ARGV[3]), probe = tonumber(ARGV[4]), mode = tonumber(ARGV[5]),
  answer = tonumber(ARGV[6]), counts = tonumber(ARGV[7]), age = tonumber(ARGV[8]), interactive = tonumber(ARGV[9]) == C.classInteractive,
  reserve = tonumber(ARGV[10]), lend = tonumber(ARGV[11]), lease = ARGV[12], expect = tonumber(ARGV[13]) == C.flagOn, nlim = tonumber(ARGV[14])}
`

// luaAdmitOpen is the admission of a scope that has no record but its
// learned cycle, nothing learned in it, nothing configured, no probe to
// send, asked by background work with no uncounted admission: no concern
// can hold it, so it is admitted at once and its cycle counted
// (learnState.count), as State.Admit does on such a state, without reading
// the records that are not there (one EXISTS for them all). A cycle under
// way is counted by HINCRBY of its admissions, the one field the count
// changes; a cycle to begin (or a record that will not count) is loaded,
// counted and saved whole.
const luaAdmitOpen = `
if argv.nlim == 0 and argv.mode == C.modeAdmit and argv.probe == 0 and not argv.interactive and argv.counts == 0
  and redis.call('EXISTS', keys.pause, keys.line, keys.budget, keys.lwin, keys.pauseby, keys.class, keys.fallback, keys.llog, keys.start,
    keys.flight, keys.fconc) == 0 then
  local v = hload(keys.learn, {'limit', 'since', 'expires'})
  local limit, since = int(v.limit) or 0, int(v.since) or 0
  if (int(v.expires) or 0) <= now_us then limit, since = 0, 0 end
  if limit == 0 and foreign_until == 0 then
    local counted = since > 0 and now_us >= since and redis.pcall('HINCRBY', keys.learn, 'admits', argv.cost)
    if since == 0 or type(counted) == 'table' then
      local learn = learn_load(keys.learn); learn_count(learn, now_us, argv.cost); learn_save(learn)
    end
    return reply(REPLY, {cache = true, now = now_us, budgetRemaining = -1})
  end
end
`

const luaAdmitBody = `
local dry = argv.mode == C.modeDry
C.hold, C.maxPause, C.probe, C.answer = argv.hold, argv.maxPause, argv.probe, argv.answer
C.reserve, C.lend, C.expect, C.limits, C.nowOnly = argv.reserve, argv.lend, argv.expect, argv.nlim, argv.mode == C.modeNowOnly
local s = {pause = pause_load(keys.pause, keys.pauseby), budget = budget_load(keys.budget), learn = learn_load(keys.learn),
  class = class_load(keys.class), fall = fallback_load(keys.fallback), start = start_load(keys.start), limits = limits_args(12, 14, argv.nlim),
  flight = flight_load(keys.flight, keys.fconc, argv.nlim)}
s.lease = flight_lease(s.flight)
if foreign_until > 0 then -- a record of a newer format: closed until it expires (luaHash)
  local untilMs = math.max(foreign_until, s.pause.untilMs)
  return reply(REPLY, {code = C.paused, reason = C.reasonPause, deadline = untilMs, wait = untilMs * 1000 - now_us, now = now_us, budgetRemaining = -1})
end
if argv.nlim == 0 and not dry then learn_report(s.learn, argv.counts, argv.age); learn_save(s.learn) end
local lim = state_active(s, keys)
local k = class_keeper(s.class, argv.interactive)
local d = state_admit_as(s, argv.cost, lim, k, keys.line, argv.lease, dry)
if argv.interactive and not dry then
  class_asked(s.class, (d.code or C.admitted) == C.admitted, now_us + d.wait, argv.cost); class_save(s.class)
end
return reply(REPLY, d)
`

// RefuseReply names the fields of the refusal's reply.
var RefuseReply = []string{"deadline", "now", "moved", "own"}

// RefuseScript records a refusal, or a pause by hand (State.Refuse). Its
// reply's deadline and Redis TIME are what the store announces
// (internal/feed), unless own says the scope was not paused.
//
// KEYS[1] pause  KEYS[2] learn  KEYS[3] lwin  KEYS[4] pauseby  KEYS[5] fallback
// KEYS[6] llog  KEYS[7] budget (a counter's hint: budgetState.counterPause)
// KEYS[8] start  KEYS[9] flight  KEYS[10] fconc  KEYS[10+i] the state of
// the i-th configured limit
// ARGV[1] pause ms (clamped; without a hint, the cap of the hintless
// episode's pause)  ARGV[2] max pause ms  ARGV[3] kind: Hintless, Hinted
// or Operator (Gate.Pause)
// ARGV[4] the hint's precision µs  ARGV[5] admissions no script counted
// (State.Report)  ARGV[6] how long before the call the first of them was
// admitted, µs  ARGV[7] the hint read as milliseconds ms (0: not in
// question; Refusal.Alt)  ARGV[8] the refused request's level
// (Refusal.Level)  ARGV[9] its answer id µs (Refusal.Opens)  ARGV[10] its
// admission's mark (Refusal.Mark)  ARGV[11] n, then the limits as for
// AdmitScript
// returns: RefuseReply
var RefuseScript = script(RefuseReply, luaRefuseBody)

const luaRefuseBody = `
local keys = {pause = KEYS[1], learn = KEYS[2], lwin = KEYS[3], pauseby = KEYS[4], fallback = KEYS[5], llog = KEYS[6], budget = KEYS[7],
  start = KEYS[8], flight = KEYS[9], fconc = KEYS[10]}
local argv = {pause = tonumber(ARGV[1]), maxPause = tonumber(ARGV[2]), kind = tonumber(ARGV[3]), prec = tonumber(ARGV[4]),
  counts = tonumber(ARGV[5]), age = tonumber(ARGV[6]), alt = tonumber(ARGV[7]), level = tonumber(ARGV[8]), opens = tonumber(ARGV[9]),
  mark = tonumber(ARGV[10]), nlim = tonumber(ARGV[11])}
C.maxPause, C.limits = argv.maxPause, argv.nlim
local r = {pause = argv.pause, hinted = argv.kind == C.hinted, prec = argv.prec, operator = argv.kind == C.operator, alt = argv.alt,
  level = argv.level, mark = argv.mark, opens = argv.opens}
local s = {pause = pause_load(keys.pause, keys.pauseby), budget = budget_load(keys.budget), limits = limits_args(10, 11, argv.nlim),
  flight = flight_load(keys.flight, keys.fconc, argv.nlim), learn = learn_load(keys.learn)}
r.level = flight_told(s.flight, r.level, r.mark)
local open = pause_earliest(s.pause) <= now_us
local before = s.pause.untilMs
local paced = flight_paced(s.flight, s.learn.since, s.learn.window) -- the learned concurrency limit paced the cycle (State.learnRefusal)
if not r.operator and s.flight.phase == C.flightProbation then s.start = start_load(keys.start) end -- rule 1's floor, the one use before start_end
local verdict, own = state_refuse_flight(s, r, open)
if verdict == C.flightOwn then return reply(REPLY, {deadline = own, now = now_us, own = true}) end
if verdict == C.flightSpent then -- the learned window was spent, as known: it teaches nothing
  local deadline = pause_refuse(s.pause, r.pause, false)
  return reply(REPLY, {deadline = deadline, now = now_us, moved = open or deadline > before})
end
local ms = r.pause
if r.alt > 0 and s.budget.millis then ms, r.prec = r.alt, C.millisPrec end
if not r.hinted and not r.operator then -- the hintless episode, read only for its refusals
  s.fall = fallback_load(keys.fallback)
  r.probe = s.fall.level > 0 and s.fall.probeAt > 0
  ms = fallback_refuse(s.fall, r.pause, open); fallback_save(s.fall)
end
if r.hinted and not r.operator and C.limits == 0 then ms = budget_counter_pause(s.budget, ms, r.prec) end
local deadline = pause_refuse(s.pause, ms, r.operator)
if not r.operator then s.start = s.start or start_load(keys.start); start_end(s.start); start_save(s.start) end
for _, l in ipairs(s.limits) do limit_refuse(l, r.hinted); limit_save(l) end
if C.limits == 0 then learn_report(s.learn, argv.counts, argv.age) end -- State.Report
s.lwin = limit_with(keys.lwin, {fixed = true, per = math.max(s.learn.window, 1), n = s.learn.limit})
local w = s.learn.window
local over, probe = learn_refuse(s.learn, deadline * 1000, refusal_teaching(r, C.limits > 0), open, C.limits > 0 or paced, s.lwin)
if over then redis.call('DEL', keys.lwin) end
if probe > 0 then sliding_drop(keys.llog, probe) end -- the provider counted nothing for the refused probe
if s.learn.window ~= w then redis.call('DEL', keys.llog) end -- the learned log's entries are of another window
learn_save(s.learn)
local l, learned = learn_spec(s.learn)
if learned and r.hinted and not r.operator and open then
  flight_begin(s.flight, l.n, r.level, s.start.most, C.limits > 0 or s.budget.known); flight_save(s.flight)
end
return reply(REPLY, {deadline = deadline, now = now_us, moved = open or deadline > before})
`

// ReportReply names the fields of the report's reply.
var ReportReply = []string{"now"}

// ReportScript reports admissions no script counted (State.Report) of a
// scope with nothing configured, apart from any admission: those an
// open cache let through before the feed brought the scope's pause,
// which its learned limit takes while the pause lasts (learnState.report),
// and the next admission would come after it.
//
// KEYS[1] learn
// ARGV[1] the admissions no script counted  ARGV[2] how long before the
// call the first of them was admitted, µs
// returns: ReportReply
var ReportScript = script(ReportReply, luaReportBody)

const luaReportBody = `
local keys = {learn = KEYS[1]}
local argv = {counts = tonumber(ARGV[1]), age = tonumber(ARGV[2])}
local s = {learn = learn_load(keys.learn)}
learn_report(s.learn, argv.counts, argv.age); learn_save(s.learn)
return reply(REPLY, {now = now_us})
`

// ObserveReply names the fields of the observation's reply.
var ObserveReply = []string{"remaining", "reset", "now", "announce"}

// ObserveScript records the budget a response advertised
// (State.Observe); announce says the scope has a budget it did not have,
// which the store announces (internal/feed): its admissions must now ask
// Redis.
//
// KEYS[1] budget  KEYS[2] learn  KEYS[3] fallback  KEYS[4] start
// KEYS[5] flight
// ARGV[1] remaining (-1: none advertised)  ARGV[2] reset µs (0 unknown)
// ARGV[3] limit (0 unknown)  ARGV[4] the reset's precision µs
// ARGV[5] the answered request's sequence number (0 unknown)
// ARGV[6] the learned window the answered request opened (its instant µs,
// 0 none: see learnState.answer; a hintless episode's probe's, a slow
// start's admission's, too)  ARGV[7] the longest configured fixed
// window µs (0: none, then the learned window's; a reset beyond it aligns nothing: State.alignsWithin)
// ARGV[8] refused (flagOn: the response is a refusal; with budget left it
// contradicts the budget: learnState.secondary)
// ARGV[9] the answered request's round trip µs (0 unknown: Observation.RTT)
// ARGV[10] the reset read as milliseconds µs (0: not in question)
// ARGV[11] millis (flagOn: the reset was read as milliseconds from a name
// of seconds; Observation.Alt, Observation.Millis)
// returns: ObserveReply
var ObserveScript = script(ObserveReply, luaObserveBody)

const luaObserveBody = `
local keys = {budget = KEYS[1], learn = KEYS[2], fallback = KEYS[3], start = KEYS[4], flight = KEYS[5]}
local o = {remaining = tonumber(ARGV[1]), reset = tonumber(ARGV[2]), limit = tonumber(ARGV[3]), prec = tonumber(ARGV[4]), seq = tonumber(ARGV[5]),
  opened = tonumber(ARGV[6]), refused = tonumber(ARGV[8]) == C.flagOn, rtt = tonumber(ARGV[9]), alt = tonumber(ARGV[10]),
  millis = tonumber(ARGV[11]) == C.flagOn}
local argv = {longest = tonumber(ARGV[7])}
C.longestWindow = argv.longest
local s = {budget = budget_load(keys.budget), learn = learn_load(keys.learn)}
local u, prec, announce = budget_observe(s.budget, o)
budget_save(s.budget)
if o.refused and o.remaining > 0 then learn_contradicted(s.learn) end
if u > 0 and u - now_us <= state_aligns_within(s) + prec then learn_align(s.learn, u, math.max(prec, o.rtt)) end
learn_answer(s.learn, o.opened, u)
learn_save(s.learn)
s.fall = fallback_load(keys.fallback)
fallback_answer(s.fall, o.opened); fallback_save(s.fall)
s.start = start_load(keys.start)
start_answer(s.start, o.opened); start_save(s.start)
if o.opened > 0 then -- only a probe's answer tells the learned concurrency limit anything
  s.flight = flight_load(keys.flight, '', 0)
  flight_answer(s.flight, o.opened, s.learn.limit); flight_save(s.flight)
end
return reply(REPLY, {remaining = s.budget.known and s.budget.remaining or -1, reset = u, now = now_us, announce = announce})
`

// NamedReply decodes a script's named reply: the fields of names it
// carries, in their order, each once, an integer value into ints and any
// other into texts; a field it leaves out is zero. A name not in names,
// or out of their order, is an error: the script and the Go disagree.
func NamedReply(v any, names []string) (ints map[string]int64, texts map[string]string, err error) {
	list, ok := v.([]any)
	if !ok || len(list)%2 != 0 {
		return nil, nil, fmt.Errorf("quotagate: unexpected script reply %v", v)
	}
	ints, texts = make(map[string]int64, len(names)), map[string]string{}
	next := 0 // the first of names the next field may be
	for i := 0; i < len(list); i += 2 {
		name, _ := list[i].(string)
		j := slices.Index(names[next:], name)
		if j < 0 {
			return nil, nil, fmt.Errorf("quotagate: unexpected script reply: field %q is not one of %v after %d", name, names, next)
		}
		next += j + 1
		switch x := list[i+1].(type) {
		case int64: // an integer, sent as a number
			ints[name] = x
		case string:
			if n, err := strconv.ParseInt(x, 10, 64); err == nil {
				ints[name] = n
			} else {
				texts[name] = x
			}
		}
	}
	return ints, texts, nil
}

// luaHash is the load and save of a record hash. hload reads a hash's
// fields (a key of the wrong type dropped); hrecord reads fields
// (integers, 0 when absent or malformed) into a record of key, every field
// 0 when its expires has passed (a record past it is none), and returns
// the fields as read too (a field's presence); hsave writes
// the record s when a rule changed it (s.dirty, which it clears), its
// fields (a boolean as C.flagOn or C.flagOff) over those of s.key, all
// but skip, which it removes, with the record's format version
// (schema.RecordVersion), expiring a margin after s.expires (µs); a
// record whose expires is 0 is deleted. Every field is
// written, so none of an earlier save is left but skip (and hload dropped
// a key of another type).
//
// A record of a newer format than the script's (schema.FieldVersion above
// schema.RecordVersion) is another release's: hload reads it as absent,
// hsave leaves it as it is, and foreign_until holds the scope closed until
// the latest such record expires (Unix ms), which the admission answers
// (see AdmitScript). A record without the field was written before
// records carried one, in this format.
const luaHash = `
local foreign, foreign_until = {}, 0
local function hload(key, fields)
  local v = redis.pcall('HMGET', key, F.version, unpack(fields))
  if type(v) ~= 'table' or v.err then redis.call('DEL', key); return {} end
  if (int(v[1]) or 0) > C.recordVersion then
    local ttl = redis.call('PTTL', key)
    if ttl <= 0 then ttl = C.minPause end
    foreign[key], foreign_until = true, math.max(foreign_until, now_ms + ttl)
    return {}
  end
  local out = {}
  for i, f in ipairs(fields) do if v[i + 1] then out[f] = v[i + 1] end end
  return out
end
local function hrecord(key, fields)
  local v = hload(key, fields)
  local s = {key = key}
  for _, f in ipairs(fields) do s[f] = int(v[f]) or 0 end
  if s.expires <= now_us then
    for _, f in ipairs(fields) do s[f] = 0 end
  end
  return s, v
end
local function hsave(s, fields, skip)
  if not s.dirty or foreign[s.key] then return end
  s.dirty = false
  if s.expires == 0 then redis.call('DEL', s.key); return end
  if skip then redis.call('HDEL', s.key, skip) end
  local args = {F.version, C.recordVersion}
  for _, f in ipairs(fields) do
    local v = s[f]
    if type(v) == 'boolean' then v = v and C.flagOn or C.flagOff end
    if f ~= skip then args[#args + 1] = f; args[#args + 1] = num(v) end
  end
  redis.call('HSET', s.key, unpack(args))
  redis.call('PEXPIREAT', s.key, math.ceil(s.expires / 1000) + C.margin)
end
`

// ReleaseScript ends a lease (State.Release): its member removed from
// every configured concurrency limit of the scope (a key of another type
// is left alone), or, with none configured, from the learned one, whose
// record counts the answer (flightState.released) when the lease was live.
//
// KEYS[1] flight  KEYS[2] fconc  KEYS[3…] the sorted sets of the scope's
// configured concurrency limits
// ARGV[1] the lease's member, "<cost>:<id>"  ARGV[2] answered (flagOn: its
// request was not refused)  ARGV[3] n, the number of configured limits
// returns: how many of the sets held it
var ReleaseScript = script(nil, luaReleaseBody)

const luaReleaseBody = `
local keys = {flight = KEYS[1], fconc = KEYS[2]}
local argv = {member = ARGV[1], answered = tonumber(ARGV[2]) == C.flagOn, nlim = tonumber(ARGV[3])}
local n = 0
for i = 3, #KEYS do
  local r = redis.pcall('ZREM', KEYS[i], argv.member)
  if type(r) == 'number' then n = n + r end
end
if argv.nlim > 0 then return n end
local exp = tonumber(redis.pcall('ZSCORE', keys.fconc, argv.member)) -- nil: none, or a key of another type
if exp and redis.pcall('ZREM', keys.fconc, argv.member) == 1 and exp > now_us then
  local flight = flight_load(keys.flight, keys.fconc, 0)
  flight_released(flight, argv.answered); flight_save(flight)
  n = n + 1
end
return n
`

// ResumeScript deletes the records that hold a scope back and notes when
// (the gates re-assert no pause known in force only before it:
// internal/failover); the store announces that the scope was resumed
// (internal/feed).
//
// KEYS[1] resumed  KEYS[2] pause  KEYS[3…] the other records
// ARGV[1] max pause ms (how long the note is kept: no pause known before
// it can be in force longer)
// returns: Redis TIME, Unix µs
var ResumeScript = redis.NewScript(luaPrelude + `
redis.call('DEL', unpack(KEYS, 2))
redis.call('SET', KEYS[1], num(now_ms), 'PX', tonumber(ARGV[1]))
return now_us
`)

// ReassertReply names the fields of the re-assertion's reply.
var ReassertReply = []string{"deadline", "now", "moved", "resumed"}

// ReassertScript re-asserts a remembered pause: unless the scope was
// resumed since the pause was known in force, the deadline becomes the
// later of the one in force, the remembered one and now plus the
// remaining time the gate measured, within MaxPause (the pause
// transition, pause_refuse); the store announces a deadline it moved as
// a refusal's (internal/feed). The remaining time moves a deadline in force only when it
// ends more than the slack later (as lostFrom: the gate's measure is late
// by up to an answer's transit, and must not creep).
//
// KEYS[1] pause  KEYS[2] pauseby  KEYS[3] resumed
// ARGV[1] the remembered deadline, Unix ms  ARGV[2] the remaining time by
// the gate's clock, ms  ARGV[3] the Redis TIME it was known in force at, ms
// ARGV[4] max pause ms  ARGV[5] operator (flagOn) or not
// ARGV[6] the slack, ms
// returns: ReassertReply (deadline 0: no pause in force)
var ReassertScript = script(ReassertReply, luaReassertBody)

const luaReassertBody = `
local keys = {pause = KEYS[1], pauseby = KEYS[2], resumed = KEYS[3]}
local argv = {untilMs = tonumber(ARGV[1]), leftMs = tonumber(ARGV[2]), seenMs = tonumber(ARGV[3]), maxPause = tonumber(ARGV[4]),
  operator = tonumber(ARGV[5]) == C.flagOn, slackMs = tonumber(ARGV[6])}
C.maxPause = argv.maxPause
local pause = pause_load(keys.pause, keys.pauseby)
local r = int(redis.pcall('GET', keys.resumed))
if r and r >= argv.seenMs then
  return reply(REPLY, {deadline = pause.untilMs, now = now_us, resumed = true})
end
local abs, rel = argv.untilMs, math.min(now_ms + argv.leftMs, now_ms + C.maxPause)
if abs - now_ms > C.maxPause then abs = 0 end
local want = math.max(abs, rel)
if pause.untilMs > 0 and rel <= pause.untilMs + argv.slackMs then want = abs end
if want <= now_ms or pause.untilMs >= want then
  return reply(REPLY, {deadline = pause.untilMs, now = now_us})
end
local d = pause_refuse(pause, want - now_ms, argv.operator)
return reply(REPLY, {deadline = d, now = now_us, moved = true})
`
