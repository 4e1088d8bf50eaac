// Package decide is the admission decision: given the admission script's
// answer for one task (Answer), and what the configuration and the task
// allow (Policy), what the gate does with the task (Verdict): run now,
// perhaps after a slot reserved a moment ahead; hold the worker
// in-process and ask again; or defer the task through asynq.
//
// Decide is a pure function, without I/O or a clock, tested by a step
// table (decide_test.go) in the manner of x/time/rate's reserveN. The
// loop that asks Redis, sleeps and asks again is the root package's
// Gate.admission (middleware.go); what it keeps between round trips (the
// open cache, the holders' places, the slot wakers) is internal/local's;
// the answer itself is internal/model's (the Lua that runs, and its Go
// specification).
//
// asynq shapes every rule here: a deferred task comes back through
// asynq's retry set, which keeps its retry time as a whole second
// (truncated) and forwards, once per DelayedTaskCheckInterval, every task
// whose second has come. A task deferred to an instant comes back at the
// first forwarder tick within or after that instant's second: up to a
// second before it, or a second or more after it, however short the wait.
// Short waits therefore hold in-process, and long ones wake early enough
// to hold the rest.
package decide
