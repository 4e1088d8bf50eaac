package main

import (
	"fmt"
	"time"
)

// A quotaModel is how the fake carrier counts one credential's requests.
// take spends one request arriving at now; when it is refused, wait is the
// exact time until a request would be accepted again. Models are not safe
// for concurrent use (the carrier locks) and take their clock as an argument.
type quotaModel interface {
	take(now time.Time) (ok bool, wait time.Duration)
}

// quotaSpec is the quota the constrained carrier enforces per credential.
type quotaSpec struct {
	Model  string        // "fixed" or "bucket"
	Rate   int           // fixed: requests per window; bucket: tokens per second
	Burst  int           // bucket: its size
	Window time.Duration // fixed: the window's length
}

func (q quotaSpec) validate() error {
	switch {
	case q.Model != "fixed" && q.Model != "bucket":
		return fmt.Errorf("quota model %q: want fixed or bucket", q.Model)
	case q.Rate < 1:
		return fmt.Errorf("rate %d: want at least 1", q.Rate)
	case q.Model == "bucket" && q.Burst < 1:
		return fmt.Errorf("burst %d: want at least 1", q.Burst)
	case q.Model == "fixed" && q.Window < time.Millisecond:
		return fmt.Errorf("window %v: want at least 1ms", q.Window)
	}
	return nil
}

// String describes the quota for the table's header.
func (q quotaSpec) String() string {
	if q.Model == "bucket" {
		return fmt.Sprintf("token bucket, %d tokens/s, burst %d", q.Rate, q.Burst)
	}
	return fmt.Sprintf("fixed window, %d requests per %v", q.Rate, q.Window)
}

// newModel returns a fresh model. A fixed window's windows start at origin,
// or, when origin is zero, at the first request (so the quota's clock starts
// with the workload, as ideal assumes).
func (q quotaSpec) newModel(origin time.Time) quotaModel {
	if q.Model == "bucket" {
		return &tokenBucket{interval: time.Second / time.Duration(q.Rate), burst: q.Burst}
	}
	return &fixedWindow{n: q.Rate, w: q.Window, origin: origin}
}

// ideal is the least time the quota allows between the first and the last of
// accepted requests, all sent as early as the quota admits them:
//
//	fixed window: (ceil(P/N) - 1) · W   the last window opens at the start of the ceil(P/N)-th
//	bucket:       max(0, P - b) / r     b at once, then one per refill
func (q quotaSpec) ideal(accepted int) time.Duration {
	if accepted <= 0 {
		return 0
	}
	if q.Model == "bucket" {
		return time.Duration(max(0, accepted-q.Burst)) * time.Second / time.Duration(q.Rate)
	}
	windows := (accepted + q.Rate - 1) / q.Rate
	return time.Duration(windows-1) * q.Window
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

func (f *fixedWindow) take(now time.Time) (bool, time.Duration) {
	if f.origin.IsZero() {
		f.origin = now
	}
	k := int64(max(now.Sub(f.origin), 0) / f.w)
	if k != f.cur {
		f.cur, f.used = k, 0
	}
	if f.used < f.n {
		f.used++
		return true, 0
	}
	end := f.origin.Add(time.Duration(k+1) * f.w)
	return false, end.Sub(now)
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
