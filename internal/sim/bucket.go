package sim

import "time"

// bucket is a token bucket that refills one token every interval, up to
// burst tokens, and starts full. It is kept as the instant it would be full
// again (GCRA's theoretical arrival time), so the arithmetic is exact in
// nanoseconds: tokens(now) = burst − (full − now)/interval.
//
// It is also GCRA (nginx limit_req): burst = nginx's burst + 1. With delay
// (limit_req without nodelay) an accepted request is held until its turn:
// Delay = max(full, now) − now, the time the backlog ahead of it takes to
// drain, at most (burst−1)·interval.
type bucket struct {
	interval time.Duration
	burst    int
	delay    bool
	full     time.Time
}

func (b *bucket) Take(now time.Time) Decision {
	full := b.full
	if full.Before(now) {
		full = now
	}
	// Accept when at least one token is left: full − now ≤ (burst−1)·interval.
	if over := full.Sub(now) - time.Duration(b.burst-1)*b.interval; over > 0 {
		return Decision{Wait: over}
	}
	d := Decision{OK: true}
	if b.delay {
		d.Delay = full.Sub(now)
	}
	b.full = full.Add(b.interval)
	return d
}

// State: missing = ⌈(full − now)/interval⌉ tokens are refilling; the next
// of them is whole after what is left of its interval.
func (b *bucket) State(now time.Time) State {
	s := State{Limit: b.burst, Remaining: b.burst, Window: time.Duration(b.burst) * b.interval}
	d := b.full.Sub(now)
	if d <= 0 {
		return s
	}
	missing := (d + b.interval - 1) / b.interval
	s.Remaining -= int(missing)
	s.Reset = d - (missing-1)*b.interval
	s.Full = d
	return s
}

func (b *bucket) Release(time.Time) {}

// concurrency accepts a request while fewer than n are in flight.
type concurrency struct {
	n, inFlight int
}

func (c *concurrency) Take(time.Time) Decision {
	if c.inFlight < c.n {
		c.inFlight++
		return Decision{OK: true}
	}
	return Decision{}
}

func (c *concurrency) State(time.Time) State {
	return State{Limit: c.n, Remaining: c.n - c.inFlight}
}

func (c *concurrency) Release(time.Time) {
	if c.inFlight > 0 {
		c.inFlight--
	}
}

// capped is a rate's Model with a cap on the requests in flight
// (Quota.InFlight): the cap is asked first, so a request it refuses spends
// nothing of the rate, and one the rate refuses leaves the flight at once.
// Its State is the rate's, which is what the dialects advertise.
type capped struct {
	Model
	cap concurrency
}

func (c *capped) Take(now time.Time) Decision {
	if !c.cap.Take(now).OK {
		return Decision{}
	}
	d := c.Model.Take(now)
	if !d.OK {
		c.cap.Release(now)
	}
	return d
}

func (c *capped) Release(now time.Time) { c.cap.Release(now) }
