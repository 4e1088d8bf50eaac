// Package sim simulates rate-limited providers: how real limiters count a
// credential's requests (the shapes, Model) and how they speak about it on
// every response (the dialects, Dialect), for the example, the benchmark
// matrix and the tests to share.
//
// A Model is pure: it takes its clock as an argument (no time.Now inside),
// and its instants must not go backwards from one call to the next. Models
// are not safe for concurrent use; Server locks around them.
//
// The shapes (Quota.Shape):
//
//	fixed            N per window W, windows at origin + k·W (on the clock)
//	fixed-first      N per window W, each window starting at the first
//	                 request after the previous one ended (INCR + EXPIRE)
//	bucket           token bucket: Rate tokens per second, Burst of them,
//	                 starting full
//	sliding-log      N in any window (t−W, t]: the exact sliding window of
//	                 the sorted-set limiters
//	sliding-counter  Cloudflare's approximation: the previous window's count
//	                 weighted by its overlap with (t−W, t], plus the current
//	gcra             GCRA / leaky bucket, nginx limit_req burst=Burst
//	                 nodelay: Burst+1 at once, then Rate per second, refused
//	                 beyond
//	gcra-delay       nginx limit_req burst=Burst without nodelay: requests
//	                 beyond the rate are held by the server (Decision.Delay)
//	                 until their turn, up to Burst of them; refused beyond
//	concurrency      N in flight (Rate); refused beyond
//
// Any shape but concurrency may also cap its requests in flight
// (Quota.InFlight): a provider that limits a rate and concurrent requests
// both, named shape+concurrency in the matrix.
//
// A Dialect writes what a provider says: its headers on every response and
// its refusal's status and body (see Dialects). Server applies one Quota
// and one Dialect per credential on an injectable clock and latency, and
// records every arrival (Arrival) so that waste and leaks can be measured.
package sim
