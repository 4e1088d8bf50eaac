package main

import (
	"fmt"
	"time"
)

// A quotaModel is how the fake carrier counts one credential's requests.
// Models are not safe for concurrent use (the carrier locks) and take their
// clock as an argument.
type quotaModel interface {
	// take spends one request arriving at now. When it is refused, wait is
	// the exact time until a request would be accepted again (what the
	// carrier tells is its hint; see quotaSpec.hint).
	take(now time.Time) (ok bool, wait time.Duration)
	// budget is what the quota has left at now, as the carrier advertises
	// it with -headers.
	budget(now time.Time) budget
}

// budget is a quota's state as a provider advertises it.
type budget struct {
	Limit     int // requests per window; a bucket's size
	Remaining int // requests that would be accepted now
	// Reset is how long until Remaining next grows: the end of the window
	// (fixed), until the oldest request in the window leaves it, freeing
	// one slot (sliding), until the next token (bucket). Zero when nothing
	// is spent.
	Reset time.Duration
}

// The quota models.
const (
	modelFixed   = "fixed"
	modelBucket  = "bucket"
	modelSliding = "sliding"
)

// quotaSpec is the quota the constrained carrier enforces per credential.
type quotaSpec struct {
	Model  string        // modelFixed, modelBucket or modelSliding
	Rate   int           // fixed, sliding: requests per window; bucket: tokens per second
	Burst  int           // bucket: its size
	Window time.Duration // fixed, sliding: the window's length
}

func (q quotaSpec) validate() error {
	switch {
	case q.Model != modelFixed && q.Model != modelBucket && q.Model != modelSliding:
		return fmt.Errorf("quota model %q: want fixed, bucket or sliding", q.Model)
	case q.Rate < 1:
		return fmt.Errorf("rate %d: want at least 1", q.Rate)
	case q.Model == modelBucket && q.Burst < 1:
		return fmt.Errorf("burst %d: want at least 1", q.Burst)
	case q.Model != modelBucket && q.Window < time.Millisecond:
		return fmt.Errorf("window %v: want at least 1ms", q.Window)
	}
	return nil
}

// String describes the quota for the table's header.
func (q quotaSpec) String() string {
	switch q.Model {
	case modelBucket:
		return fmt.Sprintf("token bucket, %d tokens/s, burst %d", q.Rate, q.Burst)
	case modelSliding:
		return fmt.Sprintf("sliding window, %d requests per %v", q.Rate, q.Window)
	}
	return fmt.Sprintf("fixed window, %d requests per %v", q.Rate, q.Window)
}

// newModel returns a fresh model. A fixed window's windows start at origin,
// or, when origin is zero, at the first request. The others do not depend
// on an origin: the bucket starts full, the sliding log empty.
func (q quotaSpec) newModel(origin time.Time) quotaModel {
	switch q.Model {
	case modelBucket:
		return &tokenBucket{interval: time.Second / time.Duration(q.Rate), burst: q.Burst}
	case modelSliding:
		return &slidingLog{n: q.Rate, w: q.Window}
	}
	return &fixedWindow{n: q.Rate, w: q.Window, origin: origin}
}

// hint is the wait a refusal announces when the exact wait is wait. The
// fixed window and the bucket tell the truth. The sliding window always
// says its whole window, as go-chi/httprate's Retry-After does
// (go-chi/httprate#47): a safe upper bound, while its capacity comes back
// one slot at a time, as each request of the past window ages out.
func (q quotaSpec) hint(wait time.Duration) time.Duration {
	if q.Model == modelSliding {
		return q.Window
	}
	return wait
}

// ideal is the least time the quota allows between the start of its first
// window and the last of accepted requests, all sent as early as the quota
// admits them. It is computed by running a fresh model greedily: every
// request is sent at the earliest instant the model accepts one (after a
// refusal, its exact wait), until accepted have been accepted. That is,
// for windows starting at the first request:
//
//	fixed window:  (ceil(P/N) - 1) · W   the last window opens at the start of the ceil(P/N)-th
//	sliding log:   (ceil(P/N) - 1) · W   N at once, then each slot again W after its use
//	bucket:        max(0, P - b) / r     b at once, then one per refill
//
// With 200 polls: 40 per 5 s gives 20 s, a bucket of 8/s with burst 10
// gives 23.75 s.
func (q quotaSpec) ideal(accepted int) time.Duration {
	origin := time.Unix(0, 0)
	m, t := q.newModel(origin), origin
	for n := 0; n < accepted; {
		ok, wait := m.take(t)
		if !ok {
			t = t.Add(wait)
			continue
		}
		n++
	}
	return t.Sub(origin)
}

// fixedWindow accepts n requests in each window [origin + k·w, origin + (k+1)·w),
// as providers with per-minute or per-second counters do; the counter resets at
// each boundary. A refused request is told to wait until the window ends. A
// zero origin is set by the first request.
type fixedWindow struct {
	n      int
	w      time.Duration
	origin time.Time
	cur    int64 // index of the window used counts in
	used   int
}

// window moves the counter to the window of now and returns its end.
func (f *fixedWindow) window(now time.Time) time.Time {
	if f.origin.IsZero() {
		f.origin = now
	}
	k := int64(max(now.Sub(f.origin), 0) / f.w)
	if k != f.cur {
		f.cur, f.used = k, 0
	}
	return f.origin.Add(time.Duration(k+1) * f.w)
}

func (f *fixedWindow) take(now time.Time) (bool, time.Duration) {
	end := f.window(now)
	if f.used < f.n {
		f.used++
		return true, 0
	}
	return false, end.Sub(now)
}

func (f *fixedWindow) budget(now time.Time) budget {
	end := f.window(now)
	return budget{Limit: f.n, Remaining: f.n - f.used, Reset: end.Sub(now)}
}

// slidingLog accepts a request when fewer than n accepted requests arrived
// in the window of length w that ends with it, (now - w, now]: a sliding
// log, the exact sliding window of the Redis sorted-set limiters. Refused
// requests are not logged. Unlike the fixed window, no boundary lets 2n
// through in a short span, and capacity comes back gradually: each accepted
// request frees its slot w after it arrived.
type slidingLog struct {
	n   int
	w   time.Duration
	log []time.Time // accepted arrivals still in the window, oldest first
}

// expire drops the arrivals that have left the window at now.
func (s *slidingLog) expire(now time.Time) {
	i := 0
	for i < len(s.log) && !now.Before(s.log[i].Add(s.w)) {
		i++
	}
	s.log = append(s.log[:0], s.log[i:]...)
}

func (s *slidingLog) take(now time.Time) (bool, time.Duration) {
	s.expire(now)
	if len(s.log) < s.n {
		s.log = append(s.log, now)
		return true, 0
	}
	return false, s.log[0].Add(s.w).Sub(now)
}

func (s *slidingLog) budget(now time.Time) budget {
	s.expire(now)
	b := budget{Limit: s.n, Remaining: s.n - len(s.log)}
	if len(s.log) > 0 {
		b.Reset = s.log[0].Add(s.w).Sub(now)
	}
	return b
}

// tokenBucket refills continuously, one token every interval (1/rate), up to
// burst tokens, and starts full. It is kept as the instant the bucket would
// be full again (a theoretical arrival time), so the arithmetic is exact in
// nanoseconds: tokens(now) = burst - (full - now)/interval. A refused request
// is told to wait until its token has refilled.
type tokenBucket struct {
	interval time.Duration
	burst    int
	full     time.Time
}

func (b *tokenBucket) take(now time.Time) (bool, time.Duration) {
	full := b.full
	if full.Before(now) {
		full = now
	}
	// Accept when at least one token is left: full - now ≤ (burst-1)·interval.
	if over := full.Sub(now) - time.Duration(b.burst-1)*b.interval; over > 0 {
		return false, over
	}
	b.full = full.Add(b.interval)
	return true, 0
}

// budget: missing = ceil((full - now)/interval) tokens are refilling; the
// next of them is whole after what is left of its interval.
func (b *tokenBucket) budget(now time.Time) budget {
	d := b.full.Sub(now)
	if d <= 0 {
		return budget{Limit: b.burst, Remaining: b.burst}
	}
	missing := (d + b.interval - 1) / b.interval
	return budget{
		Limit:     b.burst,
		Remaining: b.burst - int(missing),
		Reset:     d - (missing-1)*b.interval,
	}
}

// hintSeconds is what the carrier writes in its refusal: the wait rounded up
// to whole seconds, at least 1, as providers do ("try again in 1 second").
func hintSeconds(wait time.Duration) int {
	s := int((wait + time.Second - 1) / time.Second)
	return max(s, 1)
}

// refusalMessage is the prose of the carrier's 429.
func refusalMessage(seconds int) string {
	unit := "seconds"
	if seconds == 1 {
		unit = "second"
	}
	return fmt.Sprintf("Rate limit exceeded. Please try again in %d %s.", seconds, unit)
}
