package sim

import "time"

// slidingLog accepts a request when fewer than n accepted requests arrived
// in the window (now − w, now]: the exact sliding window of the Redis
// sorted-set limiters. Refused requests are not logged. Capacity comes back
// one slot at a time: each accepted request frees its slot w after it
// arrived.
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

func (s *slidingLog) Take(now time.Time) Decision {
	s.expire(now)
	if len(s.log) < s.n {
		s.log = append(s.log, now)
		return Decision{OK: true}
	}
	return Decision{Wait: s.log[0].Add(s.w).Sub(now)}
}

func (s *slidingLog) State(now time.Time) State {
	s.expire(now)
	st := State{Limit: s.n, Remaining: s.n - len(s.log), Window: s.w}
	if len(s.log) > 0 {
		st.Reset = s.log[0].Add(s.w).Sub(now)
		st.Full = s.log[len(s.log)-1].Add(s.w).Sub(now)
	}
	return st
}

func (s *slidingLog) Release(time.Time) {}

// slidingCounter is the sliding window counter of Cloudflare and
// go-chi/httprate: fixed windows at origin + k·w count accepted requests,
// and a request at e into window k is accepted when the estimate of the
// sliding window with it stays within n:
//
//	prev·(w − e)/w + cur + 1 ≤ n    ⇔    prev·(w − e) ≤ (n − cur − 1)·w
//
// where prev is window k−1's count (0 when it was not the previous window
// used) and cur window k's. The comparison is exact in integers.
type slidingCounter struct {
	n      int
	w      time.Duration
	origin time.Time
	k      int64 // index of the current window
	prev   int   // accepted in window k−1
	cur    int   // accepted in window k
}

// roll moves to the window of now and returns the time e into it.
func (s *slidingCounter) roll(now time.Time) time.Duration {
	since := max(now.Sub(s.origin), 0)
	k := int64(since / s.w)
	switch {
	case k == s.k+1:
		s.prev, s.cur = s.cur, 0
	case k > s.k+1:
		s.prev, s.cur = 0, 0
	}
	s.k = max(s.k, k)
	return since - time.Duration(s.k)*s.w
}

// fits reports whether one more request fits at e into the window with
// counts prev and cur.
func (s *slidingCounter) fits(prev, cur int, e time.Duration) bool {
	return int64(prev)*int64(s.w-e) <= int64(s.n-cur-1)*int64(s.w)
}

// earliest is the least e in [0, w) at which one more request fits, or w
// when none does in this window.
func (s *slidingCounter) earliest(prev, cur int) time.Duration {
	if cur+1 > s.n {
		return s.w
	}
	if prev == 0 {
		return 0
	}
	// prev·(w − e) ≤ (n−cur−1)·w  ⇔  e ≥ w − (n−cur−1)·w/prev.
	e := s.w - time.Duration(int64(s.n-cur-1)*int64(s.w)/int64(prev))
	return max(e, 0)
}

func (s *slidingCounter) Take(now time.Time) Decision {
	e := s.roll(now)
	if s.fits(s.prev, s.cur, e) {
		s.cur++
		return Decision{OK: true}
	}
	if at := s.earliest(s.prev, s.cur); at < s.w {
		return Decision{Wait: at - e}
	}
	// In the next window, this window's count becomes prev; when even
	// that leaves no room (n = 1), the window after starts empty.
	if next := s.earliest(s.cur, 0); next < s.w {
		return Decision{Wait: s.w - e + next}
	}
	return Decision{Wait: 2*s.w - e}
}

// State: Remaining is the requests that fit one after another now; Reset
// and Full the end of the current window, as httprate advertises it.
func (s *slidingCounter) State(now time.Time) State {
	e := s.roll(now)
	left := s.w - e
	rem := 0
	for s.fits(s.prev, s.cur+rem, e) {
		rem++
	}
	st := State{Limit: s.n, Remaining: rem, Window: s.w}
	if s.prev > 0 || s.cur > 0 {
		st.Reset, st.Full = left, left
	}
	return st
}

func (s *slidingCounter) Release(time.Time) {}
