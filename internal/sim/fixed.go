package sim

import "time"

// fixedClock accepts n requests in each window [origin + k·w, origin +
// (k+1)·w), as providers with per-minute counters on the clock do; the
// counter resets at each boundary. A refusal waits until its window ends.
type fixedClock struct {
	n      int
	w      time.Duration
	origin time.Time
	cur    int64 // index of the window used counts in
	used   int
}

// window moves the counter to the window of now and returns its end.
// Instants before origin count in window 0.
func (f *fixedClock) window(now time.Time) time.Time {
	k := int64(max(now.Sub(f.origin), 0) / f.w)
	if k != f.cur {
		f.cur, f.used = k, 0
	}
	return f.origin.Add(time.Duration(k+1) * f.w)
}

func (f *fixedClock) Take(now time.Time) Decision {
	end := f.window(now)
	if f.used < f.n {
		f.used++
		return Decision{OK: true}
	}
	return Decision{Wait: end.Sub(now)}
}

func (f *fixedClock) State(now time.Time) State {
	end := f.window(now)
	return State{Limit: f.n, Remaining: f.n - f.used, Reset: end.Sub(now), Full: end.Sub(now), Window: f.w}
}

func (f *fixedClock) Release(time.Time) {}

// fixedFirst is the classic INCR + EXPIRE limiter: the first request after
// the previous window ended starts a window of w (the key's expiry), in
// which n requests are accepted. A refusal waits until its window ends
// (the key's TTL).
type fixedFirst struct {
	n    int
	w    time.Duration
	end  time.Time // end of the current window; zero: none yet
	used int
}

func (f *fixedFirst) Take(now time.Time) Decision {
	if f.end.IsZero() || !now.Before(f.end) {
		f.end, f.used = now.Add(f.w), 0
	}
	if f.used < f.n {
		f.used++
		return Decision{OK: true}
	}
	return Decision{Wait: f.end.Sub(now)}
}

// State: with no window in force the quota is whole and nothing resets.
func (f *fixedFirst) State(now time.Time) State {
	if f.end.IsZero() || !now.Before(f.end) {
		return State{Limit: f.n, Remaining: f.n, Window: f.w}
	}
	left := f.end.Sub(now)
	return State{Limit: f.n, Remaining: f.n - f.used, Reset: left, Full: left, Window: f.w}
}

func (f *fixedFirst) Release(time.Time) {}
