// Package local is what one process keeps about scopes between round
// trips: what a gate knows, or counts, without asking Redis, and what Redis
// never needs to know.
//
// Redis holds every scope's shared state (internal/model, internal/store),
// and every decision that spends capacity is one of its scripts. A process
// also keeps a little of its own:
//
//   - OpenCache: the scopes it saw open, admitted without a round trip
//     while the subscription to the pause announcements vouches that no
//     pause was recorded since (opencache.go).
//
// None of it is shared, none of it survives the process, and losing any of
// it costs at most a round trip, never a request sent into a closed
// window: a forgotten entry asks Redis again.
//
// It sits above internal/failover (whose announcements the open cache
// parses) and below quotagate, whose Gate holds one. It imports
// nothing of the root.
package local
