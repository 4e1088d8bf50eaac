package sim

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// This file holds a reference of each shape's algorithm, written the
// straightforward way (explicit logs of every request, rational
// arithmetic, nginx's own excess formula, a search for the next accepted
// instant), independently of the models, and compares the two over random
// request sequences.

// reference is one shape's reference: the same questions as a Model.
type reference interface {
	take(t time.Time) Decision
	remaining(t time.Time) int
	release(t time.Time)
}

func newReference(q Quota, origin time.Time) reference {
	switch q.Shape {
	case FixedClock:
		return &refFixedClock{q: q, origin: origin}
	case FixedFirst:
		return &refFixedFirst{q: q}
	case TokenBucket:
		return &refBucket{q: q}
	case GCRA, GCRADelay:
		return &refNginx{q: q}
	case SlidingLog:
		return &refSlidingLog{q: q}
	case SlidingCounter:
		return &refSlidingCounter{q: q, origin: origin}
	}
	return &refConcurrency{q: q}
}

// refFixedClock logs every accepted request and counts those in the
// window of t, [origin + k·W, origin + (k+1)·W).
type refFixedClock struct {
	q        Quota
	origin   time.Time
	accepted []time.Time
}

func (r *refFixedClock) bounds(t time.Time) (start, end time.Time) {
	k := max(t.Sub(r.origin), 0) / r.q.Window
	start = r.origin.Add(k * r.q.Window)
	return start, start.Add(r.q.Window)
}

func (r *refFixedClock) count(t time.Time) int {
	start, end := r.bounds(t)
	n := 0
	for _, a := range r.accepted {
		if !a.Before(start) && a.Before(end) {
			n++
		}
	}
	return n
}

func (r *refFixedClock) take(t time.Time) Decision {
	if r.count(t) < r.q.Rate {
		r.accepted = append(r.accepted, t)
		return Decision{OK: true}
	}
	_, end := r.bounds(t)
	return Decision{Wait: end.Sub(t)}
}
func (r *refFixedClock) remaining(t time.Time) int { return r.q.Rate - r.count(t) }
func (r *refFixedClock) release(time.Time)         {}

// refFixedFirst logs every request (a refused one too: INCR counts it) and
// finds the window of t by walking the log from the start: a window opens
// with the first request at or after the end of the previous one.
type refFixedFirst struct {
	q        Quota
	arrivals []time.Time
	accepted []time.Time
}

// start is the start of the window t falls in, if t itself arrived.
func (r *refFixedFirst) start(t time.Time) time.Time {
	var s time.Time
	for _, a := range append(r.arrivals, t) {
		if s.IsZero() || !a.Before(s.Add(r.q.Window)) {
			s = a
		}
	}
	return s
}

func (r *refFixedFirst) inWindow(s time.Time) int {
	n := 0
	for _, a := range r.accepted {
		if !a.Before(s) {
			n++
		}
	}
	return n
}

func (r *refFixedFirst) take(t time.Time) Decision {
	s := r.start(t)
	r.arrivals = append(r.arrivals, t)
	if r.inWindow(s) < r.q.Rate {
		r.accepted = append(r.accepted, t)
		return Decision{OK: true}
	}
	return Decision{Wait: s.Add(r.q.Window).Sub(t)}
}

func (r *refFixedFirst) remaining(t time.Time) int {
	if len(r.arrivals) == 0 || !t.Before(r.start(r.arrivals[len(r.arrivals)-1]).Add(r.q.Window)) {
		return r.q.Rate
	}
	return r.q.Rate - r.inWindow(r.start(r.arrivals[len(r.arrivals)-1]))
}
func (r *refFixedFirst) release(time.Time) {}

// refBucket counts tokens as a rational number: tokens += elapsed/interval,
// at most burst; a request takes one whole token.
type refBucket struct {
	q      Quota
	tokens *big.Rat
	last   time.Time
}

func (r *refBucket) refill(t time.Time) {
	if r.tokens == nil {
		r.tokens, r.last = big.NewRat(int64(r.q.Burst), 1), t
	}
	add := big.NewRat(int64(t.Sub(r.last)), int64(r.q.interval()))
	r.tokens.Add(r.tokens, add)
	if burst := big.NewRat(int64(r.q.Burst), 1); r.tokens.Cmp(burst) > 0 {
		r.tokens = burst
	}
	r.last = t
}

func (r *refBucket) take(t time.Time) Decision {
	r.refill(t)
	one := big.NewRat(1, 1)
	if r.tokens.Cmp(one) >= 0 {
		r.tokens.Sub(r.tokens, one)
		return Decision{OK: true}
	}
	missing := new(big.Rat).Sub(one, r.tokens)
	missing.Mul(missing, big.NewRat(int64(r.q.interval()), 1))
	return Decision{Wait: time.Duration(ceilRat(missing))}
}

func (r *refBucket) remaining(t time.Time) int {
	r.refill(t)
	return int(new(big.Int).Quo(r.tokens.Num(), r.tokens.Denom()).Int64())
}
func (r *refBucket) release(time.Time) {}

// refNginx is ngx_http_limit_req_module's lookup, in rational requests
// instead of milli-requests:
//
//	excess = previous excess − rate·elapsed + 1, at least 0 (0 for a new node)
//	refused when excess > burst (nothing changes); else delay = excess/rate
//	without nodelay.
type refNginx struct {
	q      Quota
	seen   bool
	excess *big.Rat
	last   time.Time
}

func (r *refNginx) next(t time.Time) *big.Rat {
	if !r.seen {
		return new(big.Rat)
	}
	e := new(big.Rat).Sub(r.excess, big.NewRat(int64(t.Sub(r.last))*int64(r.q.Rate), int64(time.Second)))
	e.Add(e, big.NewRat(1, 1))
	if e.Sign() < 0 {
		e.SetInt64(0)
	}
	return e
}

func (r *refNginx) take(t time.Time) Decision {
	e := r.next(t)
	if e.Cmp(big.NewRat(int64(r.q.Burst), 1)) > 0 {
		// Accepted once excess − rate·(t' − last) + 1 ≤ burst.
		need := new(big.Rat).Add(r.excess, big.NewRat(1-int64(r.q.Burst), 1))
		need.Mul(need, big.NewRat(int64(time.Second), int64(r.q.Rate)))
		return Decision{Wait: r.last.Add(time.Duration(ceilRat(need))).Sub(t)}
	}
	r.seen, r.excess, r.last = true, e, t
	d := Decision{OK: true}
	if r.q.Shape == GCRADelay {
		delay := new(big.Rat).Mul(e, big.NewRat(int64(time.Second), int64(r.q.Rate)))
		d.Delay = time.Duration(ceilRat(delay))
	}
	return d
}

// remaining counts the requests accepted one after another at t.
func (r *refNginx) remaining(t time.Time) int {
	saved := *r
	if r.excess != nil {
		saved.excess = new(big.Rat).Set(r.excess)
	}
	n := 0
	for saved.take(t).OK {
		n++
	}
	return n
}
func (r *refNginx) release(time.Time) {}

// refSlidingLog logs every accepted request and counts those in (t−W, t].
type refSlidingLog struct {
	q        Quota
	accepted []time.Time
}

func (r *refSlidingLog) inWindow(t time.Time) []time.Time {
	var in []time.Time
	for _, a := range r.accepted {
		if a.After(t.Add(-r.q.Window)) && !a.After(t) {
			in = append(in, a)
		}
	}
	return in
}

func (r *refSlidingLog) take(t time.Time) Decision {
	in := r.inWindow(t)
	if len(in) < r.q.Rate {
		r.accepted = append(r.accepted, t)
		return Decision{OK: true}
	}
	return Decision{Wait: in[0].Add(r.q.Window).Sub(t)}
}
func (r *refSlidingLog) remaining(t time.Time) int { return r.q.Rate - len(r.inWindow(t)) }
func (r *refSlidingLog) release(time.Time)         {}

// refSlidingCounter logs every accepted request, estimates the window at t
// in rationals, and finds a refusal's wait by binary search over the
// instants (the estimate only falls while nothing arrives).
type refSlidingCounter struct {
	q        Quota
	origin   time.Time
	accepted []time.Time
}

func (r *refSlidingCounter) fits(t time.Time, extra int) bool {
	w := r.q.Window
	k := max(t.Sub(r.origin), 0) / w
	start := r.origin.Add(k * w)
	prev, cur := 0, extra
	for _, a := range r.accepted {
		switch {
		case !a.Before(start):
			cur++
		case !a.Before(start.Add(-w)):
			prev++
		}
	}
	// prev·(W − e)/W + cur + 1 ≤ n
	est := big.NewRat(int64(prev)*int64(w-t.Sub(start)), int64(w))
	est.Add(est, big.NewRat(int64(cur+1), 1))
	return est.Cmp(big.NewRat(int64(r.q.Rate), 1)) <= 0
}

func (r *refSlidingCounter) take(t time.Time) Decision {
	if r.fits(t, 0) {
		r.accepted = append(r.accepted, t)
		return Decision{OK: true}
	}
	lo, hi := time.Duration(0), 3*r.q.Window // refused at lo, accepted at hi
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if r.fits(t.Add(mid), 0) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return Decision{Wait: hi}
}

func (r *refSlidingCounter) remaining(t time.Time) int {
	n := 0
	for r.fits(t, n) {
		n++
	}
	return n
}
func (r *refSlidingCounter) release(time.Time) {}

// refConcurrency counts acceptances and releases.
type refConcurrency struct {
	q                  Quota
	accepted, released int
}

func (r *refConcurrency) take(time.Time) Decision {
	if r.accepted-r.released < r.q.Rate {
		r.accepted++
		return Decision{OK: true}
	}
	return Decision{}
}
func (r *refConcurrency) remaining(time.Time) int { return r.q.Rate - (r.accepted - r.released) }
func (r *refConcurrency) release(time.Time) {
	if r.accepted > r.released {
		r.released++
	}
}

// ceilRat is ⌈x⌉ for x ≥ 0.
func ceilRat(x *big.Rat) int64 {
	q, m := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// TestModelsMatchReferences runs random request sequences through every
// shape's model and its reference and requires the same decisions (accepted,
// exact wait, delay) and the same remaining count at every step. The gaps
// mix bursts, sub-millisecond and odd-nanosecond steps and idle spells.
func TestModelsMatchReferences(t *testing.T) {
	quotas := []Quota{
		{Shape: FixedClock, Rate: 3, Window: time.Second},
		{Shape: FixedClock, Rate: 1, Window: 700 * ms},
		{Shape: FixedFirst, Rate: 3, Window: time.Second},
		{Shape: FixedFirst, Rate: 1, Window: 300 * ms},
		{Shape: TokenBucket, Rate: 4, Burst: 3},
		{Shape: TokenBucket, Rate: 3, Burst: 1},
		{Shape: GCRA, Rate: 4, Burst: 2},
		{Shape: GCRA, Rate: 5, Burst: 0},
		{Shape: GCRADelay, Rate: 4, Burst: 3},
		{Shape: SlidingLog, Rate: 3, Window: time.Second},
		{Shape: SlidingCounter, Rate: 4, Window: time.Second},
		{Shape: SlidingCounter, Rate: 1, Window: 500 * ms},
		{Shape: SlidingCounter, Rate: 7, Window: 3 * time.Second},
		{Shape: Concurrency, Rate: 2},
	}
	gaps := []time.Duration{0, 0, 0, 1, 37 * time.Microsecond, 13 * ms, 100 * ms, 250 * ms, 333333333, 999 * ms, 2 * time.Second}
	for _, q := range quotas {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 15))
			origin := t0
			m, ref := q.New(origin), newReference(q, origin)
			now := origin.Add(time.Duration(rng.Int64N(int64(time.Second))))
			for i := range 300 {
				now = now.Add(gaps[rng.IntN(len(gaps))])
				if q.Shape == Concurrency && rng.IntN(3) == 0 {
					m.Release(now)
					ref.release(now)
					continue
				}
				got, want := m.Take(now), ref.take(now)
				if got != want {
					t.Fatalf("%v, seed %d, step %d at +%v: model %+v, reference %+v", q, seed, i, now.Sub(origin), got, want)
				}
				if g, w := m.State(now).Remaining, ref.remaining(now); g != w {
					t.Fatalf("%v, seed %d, step %d at +%v: remaining %d, reference %d", q, seed, i, now.Sub(origin), g, w)
				}
			}
		}
	}
}

// TestWaitIsExact checks every refusal's Wait on the models themselves: a
// fresh model fed the same history refuses 1 ns before now+Wait and
// accepts at now+Wait.
func TestWaitIsExact(t *testing.T) {
	for _, q := range []Quota{
		{Shape: FixedClock, Rate: 2, Window: time.Second},
		{Shape: FixedFirst, Rate: 2, Window: time.Second},
		{Shape: TokenBucket, Rate: 3, Burst: 2},
		{Shape: GCRA, Rate: 3, Burst: 1},
		{Shape: SlidingLog, Rate: 2, Window: time.Second},
		{Shape: SlidingCounter, Rate: 3, Window: time.Second},
	} {
		rng := rand.New(rand.NewPCG(7, 7))
		var history []time.Time // every request so far
		replay := func() Model {
			m := q.New(t0)
			for _, h := range history {
				m.Take(h)
			}
			return m
		}
		now := t0
		for i := range 60 {
			now = now.Add(time.Duration(rng.Int64N(int64(400 * ms))))
			d := replay().Take(now)
			history = append(history, now)
			if d.OK || d.Wait <= 0 {
				continue
			}
			// History without this refusal (it changes nothing but
			// fixed-first's window start, which it cannot move).
			h := history[:len(history)-1]
			probe := func(at time.Time) bool {
				m := q.New(t0)
				for _, x := range h {
					m.Take(x)
				}
				return m.Take(at).OK
			}
			if probe(now.Add(d.Wait - 1)) {
				t.Fatalf("%v, step %d: accepted at Wait−1ns (%v)", q, i, d.Wait)
			}
			if !probe(now.Add(d.Wait)) {
				t.Fatalf("%v, step %d: refused at Wait (%v)", q, i, d.Wait)
			}
		}
	}
}
