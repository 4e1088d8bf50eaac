// Package model is the admission model of one scope: its state (pause,
// configured limits, advertised budget, learned quota, reopening lines,
// classes, hintless episode, slow start) and its transitions (admit,
// refuse, observe, release, resume), as pure functions of explicit
// instants in the manner of golang.org/x/time/rate's reserveN.
//
// # The Lua runs; the Go is its specification
//
// Every admission, refusal and observation runs in production as one Lua
// script in Redis, on Redis TIME: AdmitScript, RefuseScript, ObserveScript,
// ReleaseScript, ResumeScript and ReassertScript, composed in scripts.go
// from one fragment per concern, each written beside the Go rule it
// transacts. The Go model (State and its methods) runs only in tests: it is
// the specification the scripts implement and the differential test's
// oracle (differential_test.go runs random event sequences through both, on
// miniredis, a real redis-server and a Redis Cluster, and requires the same
// verdicts and the same state after every event). A rule is written twice,
// side by side, with the same names.
//
// The names pair by one convention. A Go method T.m is the Lua function
// t_m, t the receiver's type in snake case less its State
// (budgetState.counterPause is budget_counter_pause, windowState.used
// window_used, admission.deadline admission_deadline, LimitSpec.gcra
// limit_spec_gcra, State.active state_active), and t once where m begins
// with it (windowState.window is window, learnState.learnFrom
// learn_from); a Go function f is f in snake case (roundWindow is
// round_window, paced paced). A Lua function takes its twin's receiver
// first, named as the Go names it (s, w, a, k, h), then its arguments in
// order, less p (the script's C: Params' fields, and len(p.Limits) as
// C.limits) and now (now_us). A table has its Go type's fields, exported
// ones lower-cased (Observation's reset is o.reset), and the script bodies
// name the loaded records as State's fields (s.pause, s.budget, s.learn,
// s.class, s.fall, s.start, s.limits, s.lwin, s.llog). Three shapes
// differ, each said where it is: a Lua limit is its LimitSpec and its
// limitState in one table (its windowState's origin and counts among its
// fields), so where the Go passes a spec seen by a keeper (active.kept)
// the Lua passes that n; an active is the list of its limits, with
// learned; a line is its key. The Lua's own arguments are said where they
// are taken (the keys of the records an admission loads only when they
// apply; a dry run's). Arithmetic the Go spells as helpers
// (floorDiv, ceilMs, abs, min, max) is Lua's math.floor, math.ceil,
// math.abs, math.min and math.max.
//
// The calls (calls.go) build each script's KEYS and ARGV in one place, for
// the store that runs them and for the differential test alike.
//
// The package imports nothing of quotagate: its inputs are values (Params,
// LimitSpec, Observation, Refusal), its instants Unix microseconds of Redis
// TIME (a pause deadline is kept to the millisecond, as it is stored).
//
// # The rules
//
// What the model infers, each rule one named function whose Lua twin
// carries its name by the convention above; their step tables are in
// steps_test.go, model_rules_test.go and budget_rules_test.go. The budget's sixteen
// rules, what an admission and a response read of it, are numbered in
// budget.go's header (silent, untilReset, awaitingProbe, ... counterPause).
// The others:
//
// The learned limit (learn.go), of a provider that advertises nothing and
// is assumed to count a fixed quota per window:
//
//  1. count: every admission counts in the cycle since the last refusal.
//  2. fromCycle: a hinted refusal that ends a cycle learns n, the cycle's
//     admissions less one, and w, the time from the cycle's start to the
//     refusal's deadline D rounded to the hint's precision; the next cycle
//     starts at D (nextCycle, followPause).
//  3. absorbOne: each refusal of a request already on its way when the
//     scope paused takes one more off n.
//  4. fromWindowEnd: a refusal at the learned window's end says n was too
//     many: n is what the window got accepted; a window spent whole at a
//     level never sustained forgets best and freezes raises.
//  5. grow: a window spent whole without a refusal raises n (back to best
//     at once, beyond it by one), unless raises are frozen.
//  6. opens, answer: the window after one spent whole opens with one
//     request, its probe; the others wait for its answer, which aligns the
//     windows when it is no refusal.
//  7. refuseProbe: a refused probe keeps n, realigns to the hint and
//     leaves the learned log (the provider counted nothing for it).
//  8. slowDown: a hintless refusal of a paced window takes n − 1.
//  9. contradicted: a refusal with budget left says the budget is another
//     quota's: the learned limit applies beside it (secondary).
//
// The slow start (start.go), of a provider that advertises nothing and of
// which nothing is learned yet:
//
//  10. room: admitted while sent + cost ≤ startFirst + 2·answered.
//  11. end: the start ends at the first refusal, after startAnswers
//     answers, or when an answer is overdue.
//
// The hintless episode (fallback.go), of a refusal with no readable hint:
//
//  12. refuse: a hintless refusal of an open scope starts an episode whose
//     pause is fallbackFirst, then twice the last for each refused probe,
//     at most the cap; one while paused moves nothing.
//  13. probes, answer: after the pause one request goes alone; an answer
//     without a refusal ends the episode.
//
// The learned concurrency limit (flight.go), of a provider that advertises
// nothing and may limit requests in flight rather than per window; each
// admission's level (the requests in flight once it is admitted, itself
// included) is what its refusal tells:
//
//  14. begin, below, mark, told: a hinted refusal that teaches the learned
//     limit puts the scope on probation under it and a limit of c in
//     flight, c below every refused level, but the refusals of the moment
//     that paused the scope lower it no lower than the most requests the
//     slow start saw accepted at once (startState.most), and c so set is
//     untried (a raise from c − 1: rule 19); once the scope reopened, a
//     refusal is one too many in flight, whatever its level: c − 1, and the
//     scope is paused. A refused request alone says rate-limited. Alone is level 1 with
//     nothing admitted at a level after it until its refusal (each
//     admission's mark counts them): requests reach the provider in any
//     order, and one admitted alone may be refused behind those admitted
//     after it.
//  15. beyond, probe: on probation, a request that only the spent learned
//     window holds goes as a probe beyond it: the first alone, then two at
//     a time (flightProbes), a level every concurrency limit of two or
//     more accepts, so a refused probe is a window's, not a c set too
//     high.
//  16. answer, refuse, verdictRate: a refused probe (or request alone)
//     says the window is the provider's (rate-limited: it paces the
//     scope as before, and the refusal teaches it nothing), and, when
//     probes beyond a learned window were answered on the probation,
//     that c is too (limited by both: c stays, fixed, beside the learned
//     window, every refusal the window's); n + 1 probes beyond one
//     learned window answered say the provider limits requests in flight
//     (a fixed window of n, however it lies across the learned one,
//     accepts at most n beyond it): the concurrency limit is confirmed
//     and the window no longer applies. A probe beyond a later window
//     starts the count again (probe).
//  17. lower: confirmed, a refusal above level 1 does not pause the scope:
//     the refused request waits its own hint, and c goes below its level,
//     and to c − 1; a refusal of a request alone says a window refuses
//     too, and refused those that lowered c since it was confirmed or
//     raised: limited by both, c goes back to what it was before them
//     (before), and the refusal teaches the learned window its alignment
//     only (learnRefusal): the cycle it ends was c's, and a lower n
//     learned from it would hold the scope below what the provider was
//     seen to accept. So does any refusal that ends a cycle c paced: on
//     probation, one in which c held a request back (paced).
//  18. released: confirmed, every c answers while the limit was full raise
//     c by one, unless a refusal froze raises (raiseAfter).
//  19. grow: on probation, a learned window that ended unspent while c
//     held a request back raises c by one (to at most n); the first
//     refusal once the scope reopened after a raise, or after the probation
//     began with c untried, refused it: it does not pause the scope, c
//     goes one lower, and growth stops for raiseAfter. A window that ends
//     refused was not left unspent by c, and raises nothing.
//  20. retried: an admission asked with the id of a lease it holds already
//     (a call whose answer was lost, asked again) is admitted again at its
//     level and commits nothing: answered otherwise, its task would not
//     run and its lease would hold a slot of c for its whole life.
//
// # Files
//
//	pause.go        the pause: a deadline that only moves later
//	limit.go        the configured limits: GCRA buckets and fixed windows
//	sliding.go      ... sliding logs
//	concurrency.go  ... concurrency limits: leases in flight
//	flight.go       the concurrency limit learned from refusals, and its probation
//	budget.go       the budget the provider advertises, and its probe
//	learn.go        the quota learned from refusals (a fixed window, or a log)
//	line.go         the reopening line: where deferred tasks come back
//	class.go        the classes of work: the reserve interactive work finds
//	fallback.go     the hintless pause: its episodes and their probes
//	start.go        the slow start of a provider that advertises nothing
//	model.go        State: admit asks every concern, commits what it admits
//	scripts.go      the prelude and the scripts composed from the fragments
//	calls.go        each script's KEYS and ARGV, and the admission's reply
package model
