package sim

import (
	"fmt"
	"time"
)

// A Model is how a limiter counts one credential's requests. Its methods
// take the clock as an argument; successive calls must not go back in time.
// A Model is not safe for concurrent use.
type Model interface {
	// Take decides on the request arriving at now and spends it when it
	// is accepted.
	Take(now time.Time) Decision
	// State is the quota as the limiter knows it at now, for its dialect.
	State(now time.Time) State
	// Release ends an accepted request at now. Only a concurrency limit
	// counts it; the others ignore it.
	Release(now time.Time)
}

// Decision is a model's answer to one request.
type Decision struct {
	// OK reports whether the request is accepted.
	OK bool
	// Wait is, for a refusal, the exact time from its arrival until a
	// request would be accepted if nothing else arrived meanwhile; 0 when
	// the model cannot know (a concurrency limit: it depends on when the
	// requests in flight end).
	Wait time.Duration
	// Delay is, for an accepted request, how long the server holds it
	// before answering (gcra-delay); 0 for the other shapes.
	Delay time.Duration
}

// State is a quota's state as a limiter advertises it.
type State struct {
	// Limit is the quota's size: requests per window, a bucket's size, the
	// requests allowed in flight.
	Limit int
	// Remaining is how many requests would be accepted now, one after
	// another.
	Remaining int
	// Reset is how long until Remaining next grows: the end of the window
	// (fixed, sliding-counter), until the oldest request leaves the window
	// (sliding-log), until the next token (bucket, gcra); 0 when nothing
	// is spent, or unknown (concurrency).
	Reset time.Duration
	// Full is how long until the quota is whole again: the end of the
	// window, until the bucket is full, until the newest request leaves the
	// log; 0 when it is whole.
	Full time.Duration
	// Window is the quota's policy window: W for windows, the time a bucket
	// takes to refill from empty; 0 for a concurrency limit.
	Window time.Duration
}

// Shape names a way of counting (see the package documentation).
type Shape string

// The shapes.
const (
	FixedClock     Shape = "fixed"
	FixedFirst     Shape = "fixed-first"
	TokenBucket    Shape = "bucket"
	SlidingLog     Shape = "sliding-log"
	SlidingCounter Shape = "sliding-counter"
	GCRA           Shape = "gcra"
	GCRADelay      Shape = "gcra-delay"
	Concurrency    Shape = "concurrency"
)

// Shapes lists every shape, in the order of the package documentation.
var Shapes = []Shape{FixedClock, FixedFirst, TokenBucket, SlidingLog, SlidingCounter, GCRA, GCRADelay, Concurrency}

// Quota is the quota a provider enforces per credential.
type Quota struct {
	Shape Shape
	// Rate is: windows (fixed, fixed-first, sliding-*): requests per
	// Window; bucket and gcra*: tokens per second; concurrency: requests in
	// flight.
	Rate int
	// Burst is: bucket: its size; gcra*: nginx's burst, the requests
	// allowed beyond the rate (Burst+1 at once).
	Burst int
	// Window is the length of a window (fixed, fixed-first, sliding-*).
	Window time.Duration
	// InFlight caps the requests in flight beside the shape's own count,
	// as a provider that limits both a rate and its concurrent requests
	// (GitHub's primary and secondary limits): a request is accepted only
	// when both accept it, and one refused for the cap spends nothing of
	// the rate. 0: no such cap; a concurrency shape has none (its Rate is
	// the cap).
	InFlight int
}

// Validate reports a quota that cannot be simulated.
func (q Quota) Validate() error {
	switch {
	case !q.known():
		return fmt.Errorf("sim: unknown shape %q", q.Shape)
	case q.Rate < 1:
		return fmt.Errorf("sim: rate %d: want at least 1", q.Rate)
	case q.Shape == TokenBucket && q.Burst < 1:
		return fmt.Errorf("sim: burst %d: want at least 1", q.Burst)
	case (q.Shape == GCRA || q.Shape == GCRADelay) && q.Burst < 0:
		return fmt.Errorf("sim: burst %d: want at least 0", q.Burst)
	case q.windowed() && q.Window < time.Millisecond:
		return fmt.Errorf("sim: window %v: want at least 1ms", q.Window)
	case q.InFlight < 0 || q.InFlight > 0 && q.Shape == Concurrency:
		return fmt.Errorf("sim: in flight %d on %s: want 0, or at least 1 beside a rate", q.InFlight, q.Shape)
	}
	return nil
}

func (q Quota) known() bool {
	for _, s := range Shapes {
		if s == q.Shape {
			return true
		}
	}
	return false
}

// windowed reports whether the shape counts in windows of q.Window.
func (q Quota) windowed() bool {
	switch q.Shape {
	case FixedClock, FixedFirst, SlidingLog, SlidingCounter:
		return true
	}
	return false
}

// interval is the time one token takes to refill (bucket, gcra*).
func (q Quota) interval() time.Duration { return time.Second / time.Duration(q.Rate) }

// String describes the quota in a table's words.
func (q Quota) String() string {
	if q.InFlight > 0 {
		return fmt.Sprintf("%s, at most %d in flight", q.rate(), q.InFlight)
	}
	return q.rate()
}

// Name is the quota's name in the matrix: its shape, and +concurrency
// where it caps the requests in flight too.
func (q Quota) Name() string {
	if q.InFlight > 0 {
		return string(q.Shape) + "+concurrency"
	}
	return string(q.Shape)
}

// rate describes the shape's own count.
func (q Quota) rate() string {
	switch q.Shape {
	case TokenBucket:
		return fmt.Sprintf("token bucket, %d tokens/s, burst %d", q.Rate, q.Burst)
	case GCRA:
		return fmt.Sprintf("GCRA, %d/s, burst %d, nodelay", q.Rate, q.Burst)
	case GCRADelay:
		return fmt.Sprintf("GCRA, %d/s, burst %d, delayed", q.Rate, q.Burst)
	case Concurrency:
		return fmt.Sprintf("concurrency, %d in flight", q.Rate)
	case FixedFirst:
		return fmt.Sprintf("fixed window from the first request, %d per %v", q.Rate, q.Window)
	case SlidingLog:
		return fmt.Sprintf("sliding log, %d per %v", q.Rate, q.Window)
	case SlidingCounter:
		return fmt.Sprintf("sliding window counter, %d per %v", q.Rate, q.Window)
	}
	return fmt.Sprintf("fixed window, %d per %v", q.Rate, q.Window)
}

// New returns a fresh model of q. The windows of fixed and
// sliding-counter start at origin + k·Window (the clock's windows when
// origin is a whole multiple of Window since the epoch); the other shapes
// do not depend on an origin: buckets start full, logs empty, fixed-first
// with no window. New panics on a quota that does not Validate.
func (q Quota) New(origin time.Time) Model {
	if err := q.Validate(); err != nil {
		panic(err)
	}
	m := q.shape(origin)
	if q.InFlight > 0 {
		return &capped{Model: m, cap: concurrency{n: q.InFlight}}
	}
	return m
}

// shape returns a fresh model of the shape's own count.
func (q Quota) shape(origin time.Time) Model {
	switch q.Shape {
	case FixedFirst:
		return &fixedFirst{n: q.Rate, w: q.Window}
	case TokenBucket:
		return &bucket{interval: q.interval(), burst: q.Burst}
	case GCRA:
		return &bucket{interval: q.interval(), burst: q.Burst + 1}
	case GCRADelay:
		return &bucket{interval: q.interval(), burst: q.Burst + 1, delay: true}
	case SlidingLog:
		return &slidingLog{n: q.Rate, w: q.Window}
	case SlidingCounter:
		return &slidingCounter{n: q.Rate, w: q.Window, origin: origin}
	case Concurrency:
		return &concurrency{n: q.Rate}
	}
	return &fixedClock{n: q.Rate, w: q.Window, origin: origin}
}

// Ideal is the least time the quota allows from the start of its first
// window until the last of accepted requests is answered (its arrival plus
// the server's Delay, latency aside), all sent greedily: every request at
// the earliest instant the model accepts one (after a refusal, its exact
// Wait). That is, with P requests:
//
//	fixed, fixed-first, sliding-log:  (⌈P/N⌉ − 1) · W
//	bucket:                           max(0, P − b) / r
//	gcra:                             max(0, P − b − 1) / r
//	gcra-delay:                       (P − 1) / r    (each answered in turn)
//	concurrency:                      0              (see IdealLatency)
//
// With 200 requests: 40 per 5 s gives 20 s, a bucket of 8/s burst 10
// 23.75 s, a GCRA of 8/s burst 10 23.625 s.
func (q Quota) Ideal(accepted int) time.Duration { return q.IdealLatency(accepted, 0) }

// IdealLatency is Ideal when every accepted request stays in flight for
// latency: only a limit on requests in flight depends on it; a
// concurrency limit's ideal is (⌈P/N⌉ − 1) · latency. It is the last
// instant of Schedule, with a gcra-delay's Delay.
func (q Quota) IdealLatency(accepted int, latency time.Duration) time.Duration {
	var last time.Duration
	for _, at := range q.schedule(accepted, latency) {
		last = max(last, at.arrival+at.delay)
	}
	return last
}

// Schedule is when the quota accepts each of n requests at the earliest,
// all sent greedily from the start of its first window, each staying in
// flight for latency: the instant of its arrival after the first
// window's start. No run's accepted requests can rise above this line.
func (q Quota) Schedule(n int, latency time.Duration) []time.Duration {
	out := make([]time.Duration, 0, n)
	for _, at := range q.schedule(n, latency) {
		out = append(out, at.arrival)
	}
	return out
}

// slot is a request of schedule: its arrival, and a gcra-delay's Delay.
type slot struct{ arrival, delay time.Duration }

// schedule sends each of n requests at the earliest instant the quota
// accepts it: the shape's, and, under a cap on requests in flight (a
// concurrency limit's Rate, or InFlight), latency after the request the
// cap's size before it.
func (q Quota) schedule(n int, latency time.Duration) []slot {
	origin := time.Unix(0, 0)
	var m Model
	capN := q.InFlight
	if q.Shape == Concurrency {
		capN = q.Rate
	} else {
		m = q.shape(origin)
	}
	out := make([]slot, 0, max(n, 0))
	t := origin
	for len(out) < n {
		if k := len(out) - capN; capN > 0 && k >= 0 {
			t = maxTime(t, origin.Add(out[k].arrival+latency))
		}
		var d Decision
		if m == nil {
			d = Decision{OK: true}
		} else if d = m.Take(t); !d.OK {
			t = t.Add(max(d.Wait, time.Nanosecond)) // exact: positive for a refusal
			continue
		}
		out = append(out, slot{arrival: t.Sub(origin), delay: d.Delay})
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
