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
// The calls (calls.go) build each script's KEYS and ARGV in one place, for
// the store that runs them and for the differential test alike.
//
// The package imports nothing of quotagate: its inputs are values (Params,
// LimitSpec, Observation, Refusal), its instants Unix microseconds of Redis
// TIME (a pause deadline is kept to the millisecond, as it is stored).
//
// # Files
//
//	pause.go        the pause: a deadline that only moves later
//	limit.go        the configured limits: GCRA buckets and fixed windows
//	sliding.go      ... sliding logs
//	concurrency.go  ... concurrency limits: leases in flight
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
