// Package local is what one process keeps about scopes between round
// trips: what a gate knows, counts or waits on without asking Redis.
//
// Redis holds every scope's shared state (internal/model, internal/store),
// and every decision that spends capacity is one of its scripts. Beside
// it, each process keeps a little of its own, none of it shared and none
// of it surviving the process:
//
//   - OpenCache (opencache.go): the scopes that must ask Redis (the asks:
//     every scope the feed of pauses, internal/feed, named) and those it
//     saw open; any scope not an ask is admitted without a round trip
//     while the feed is fresh, one never met too when the gate observes no
//     responses. A forgotten entry costs one round trip, never a request
//     sent into a closed window.
//   - Holders (holders.go): the workers that wait in-process, per scope
//     and in all, so that one scope's waiting never takes every worker
//     from the other scopes' tasks, and the places per scope of those
//     that hold for a short wait.
//   - SlotWakers (slots.go): a release of a concurrency limit's slot here
//     wakes one worker of this process waiting for it, at once.
//   - Uncounted and Absorbed (counts.go): the admissions made from the
//     open cache and when the first was, which the next round trip of
//     their scope reports, and
//     the refusals of requests already on their way when a pause began,
//     counted for the log.
//
// Each is safe for concurrent use; the zero value of each but OpenCache
// (NewOpenCache) is ready to use.
//
// It sits above internal/failover (whose announcements the open cache
// parses) and below quotagate, whose Gate holds one of each. It imports
// nothing of the root.
package local
