package sim

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const ms = time.Millisecond

// step is one request at t0+at and what the model must answer; release
// ends one request in flight at at instead.
type step struct {
	at      time.Duration
	ok      bool
	wait    time.Duration // exact, when refused
	delay   time.Duration // gcra-delay
	release bool
}

func runSteps(t *testing.T, name string, m Model, steps []step) {
	t.Helper()
	for i, s := range steps {
		if s.release {
			m.Release(t0.Add(s.at))
			continue
		}
		d := m.Take(t0.Add(s.at))
		want := Decision{OK: s.ok, Wait: s.wait, Delay: s.delay}
		if d != want {
			t.Fatalf("%s: step %d at +%v: Take = %+v, want %+v", name, i, s.at, d, want)
		}
	}
}

func TestFixedClock(t *testing.T) {
	runSteps(t, "3/1s", Quota{Shape: FixedClock, Rate: 3, Window: time.Second}.New(t0), []step{
		{at: 0, ok: true},
		{at: 100 * ms, ok: true},
		{at: 200 * ms, ok: true},
		{at: 300 * ms, wait: 700 * ms},
		{at: 999 * ms, wait: ms},
		{at: time.Second, ok: true}, // the boundary belongs to the next window
		{at: time.Second, ok: true},
		{at: 1999 * ms, ok: true},
		{at: 1999*ms + 999*time.Microsecond, wait: time.Microsecond},
		{at: 5500 * ms, ok: true}, // idle windows do not accumulate
		{at: 5500 * ms, ok: true},
		{at: 5500 * ms, ok: true},
		{at: 5500 * ms, wait: 500 * ms},
	})
	// Windows on the clock: the origin is a boundary, whenever the first
	// request comes.
	runSteps(t, "2/10s", Quota{Shape: FixedClock, Rate: 2, Window: 10 * time.Second}.New(t0), []step{
		{at: 7 * time.Second, ok: true},
		{at: 8 * time.Second, ok: true},
		{at: 9 * time.Second, wait: time.Second},
		{at: 10 * time.Second, ok: true},
	})
}

func TestFixedFirst(t *testing.T) {
	runSteps(t, "2/1s", Quota{Shape: FixedFirst, Rate: 2, Window: time.Second}.New(t0), []step{
		{at: 300 * ms, ok: true}, // the first window is [0.3 s, 1.3 s)
		{at: 400 * ms, ok: true},
		{at: 1200 * ms, wait: 100 * ms},
		{at: 1300 * ms, ok: true}, // a new window [1.3 s, 2.3 s)
		{at: 2299 * ms, ok: true},
		{at: 2299 * ms, wait: ms},
		{at: 5000 * ms, ok: true}, // after a gap: [5 s, 6 s), not on the clock
		{at: 5999 * ms, ok: true},
		{at: 5999 * ms, wait: ms},
	})
}

func TestTokenBucket(t *testing.T) {
	runSteps(t, "2/s burst 3", Quota{Shape: TokenBucket, Rate: 2, Burst: 3}.New(t0), []step{
		{at: 0, ok: true}, // starts full: burst at once
		{at: 0, ok: true},
		{at: 0, ok: true},
		{at: 0, wait: 500 * ms},
		{at: 499 * ms, wait: ms},
		{at: 500 * ms, ok: true}, // one token refilled
		{at: 500 * ms, wait: 500 * ms},
		{at: 1750 * ms, ok: true}, // 1.5 tokens refilled: one spent, half left
		{at: 1750 * ms, ok: true},
		{at: 1750 * ms, wait: 250 * ms},
		{at: 10 * time.Second, ok: true}, // refill stops at the burst
		{at: 10 * time.Second, ok: true},
		{at: 10 * time.Second, ok: true},
		{at: 10 * time.Second, wait: 500 * ms},
	})
}

func TestGCRA(t *testing.T) {
	// nginx limit_req rate=4r/s burst=2 nodelay: 3 at once, then one per 250 ms.
	runSteps(t, "nodelay", Quota{Shape: GCRA, Rate: 4, Burst: 2}.New(t0), []step{
		{at: 0, ok: true},
		{at: 0, ok: true},
		{at: 0, ok: true},
		{at: 0, wait: 250 * ms},
		{at: 250 * ms, ok: true},
		{at: 300 * ms, wait: 200 * ms},
		{at: 2 * time.Second, ok: true},
	})
	// Without nodelay: the same acceptances, each held until its turn.
	runSteps(t, "delay", Quota{Shape: GCRADelay, Rate: 4, Burst: 2}.New(t0), []step{
		{at: 0, ok: true},
		{at: 0, ok: true, delay: 250 * ms},
		{at: 0, ok: true, delay: 500 * ms},
		{at: 0, wait: 250 * ms},
		{at: 100 * ms, wait: 150 * ms},
		{at: 250 * ms, ok: true, delay: 500 * ms},
		{at: 2 * time.Second, ok: true},
	})
	// Burst 0: exactly the rate.
	runSteps(t, "burst 0", Quota{Shape: GCRA, Rate: 2, Burst: 0}.New(t0), []step{
		{at: 0, ok: true},
		{at: 100 * ms, wait: 400 * ms},
		{at: 500 * ms, ok: true},
	})
}

func TestSlidingLog(t *testing.T) {
	runSteps(t, "3/1s", Quota{Shape: SlidingLog, Rate: 3, Window: time.Second}.New(t0), []step{
		{at: 0, ok: true},
		{at: 200 * ms, ok: true},
		{at: 400 * ms, ok: true},
		{at: 500 * ms, wait: 500 * ms}, // the slot of +0 frees at +1 s
		{at: time.Second, ok: true},
		{at: time.Second, wait: 200 * ms},
		{at: 1200 * ms, ok: true},
		{at: 1300 * ms, wait: 100 * ms},
		{at: 5 * time.Second, ok: true},
	})
}

func TestSlidingCounter(t *testing.T) {
	// 4 per second: the previous window weighs (1 − e) at e into the current.
	runSteps(t, "4/1s", Quota{Shape: SlidingCounter, Rate: 4, Window: time.Second}.New(t0), []step{
		{at: 0, ok: true},
		{at: 100 * ms, ok: true},
		{at: 200 * ms, ok: true},
		{at: 300 * ms, ok: true},
		{at: 400 * ms, wait: 600*ms + 250*ms}, // next window: 4·(1 − e) ≤ 3 at e = 250 ms
		{at: 1100 * ms, wait: 150 * ms},
		{at: 1250 * ms, ok: true},       // 4·0.75 + 0 + 1 = 4
		{at: 1250 * ms, wait: 250 * ms}, // 4·(1 − e) ≤ 2 at e = 500 ms
		{at: 1500 * ms, ok: true},       // 2 + 1 + 1 = 4
		{at: 1750 * ms, ok: true},       // 1 + 2 + 1 = 4
		{at: 1999 * ms, wait: ms},       // next window: 3·(1 − e) + 1 ≤ 4 at e = 0
		{at: 3500 * ms, ok: true},       // the previous window (2 s) was empty
	})
	// One per window: the window after a used one gives nothing.
	runSteps(t, "1/1s", Quota{Shape: SlidingCounter, Rate: 1, Window: time.Second}.New(t0), []step{
		{at: 500 * ms, ok: true},
		{at: 600 * ms, wait: 1400 * ms},
		{at: 1500 * ms, wait: 500 * ms},
		{at: 2 * time.Second, ok: true},
	})
}

func TestConcurrency(t *testing.T) {
	runSteps(t, "2 in flight", Quota{Shape: Concurrency, Rate: 2}.New(t0), []step{
		{at: 0, ok: true},
		{at: 0, ok: true},
		{at: 0},
		{at: 10 * ms, release: true},
		{at: 10 * ms, ok: true},
		{at: 10 * ms},
		{at: 20 * ms, release: true},
		{at: 20 * ms, release: true},
		{at: 20 * ms, release: true}, // more releases than flights: no credit
		{at: 30 * ms, ok: true},
		{at: 30 * ms, ok: true},
		{at: 30 * ms},
	})
}

// TestCappedRate: a fixed window of 3 per second with at most 2 in
// flight. A request the cap refuses spends nothing of the window; one the
// window refuses takes no place in the flight.
func TestCappedRate(t *testing.T) {
	q := Quota{Shape: FixedClock, Rate: 3, Window: time.Second, InFlight: 2}
	runSteps(t, "3 per second, 2 in flight", q.New(t0.Truncate(time.Second)), []step{
		{at: 0, ok: true},
		{at: 0, ok: true},
		{at: 0}, // the cap: no wait is known, and the window keeps its third
		{at: 10 * ms, release: true},
		{at: 10 * ms, ok: true}, // the window's third
		{at: 20 * ms, release: true},
		{at: 20 * ms, wait: 980 * ms}, // the window: the flight has room
		{at: 20 * ms, release: true},
		{at: time.Second, ok: true},
		{at: time.Second, ok: true},
		{at: time.Second},
	})
	if got, want := q.Name(), "fixed+concurrency"; got != want {
		t.Errorf("Name = %q, want %q", got, want)
	}
	if got := q.New(t0.Truncate(time.Second)).State(t0.Truncate(time.Second)); got.Limit != 3 || got.Remaining != 3 {
		t.Errorf("State = %+v, want the window's: limit 3, remaining 3", got)
	}
}

func TestState(t *testing.T) {
	type sstep struct {
		at   time.Duration
		take bool // take one first
		want State
	}
	for _, c := range []struct {
		q     Quota
		steps []sstep
	}{
		{Quota{Shape: FixedClock, Rate: 2, Window: time.Second}, []sstep{
			{0, true, State{2, 1, time.Second, time.Second, time.Second}},
			{300 * ms, true, State{2, 0, 700 * ms, 700 * ms, time.Second}},
			{400 * ms, true, State{2, 0, 600 * ms, 600 * ms, time.Second}},
			{2500 * ms, true, State{2, 1, 500 * ms, 500 * ms, time.Second}},
		}},
		{Quota{Shape: FixedFirst, Rate: 2, Window: time.Second}, []sstep{
			{0, false, State{Limit: 2, Remaining: 2, Window: time.Second}},
			{100 * ms, true, State{2, 1, time.Second, time.Second, time.Second}},
			{1100 * ms, false, State{Limit: 2, Remaining: 2, Window: time.Second}},
		}},
		{Quota{Shape: SlidingLog, Rate: 2, Window: time.Second}, []sstep{
			{0, true, State{2, 1, time.Second, time.Second, time.Second}},
			{300 * ms, true, State{2, 0, 700 * ms, time.Second, time.Second}},
			{1100 * ms, true, State{2, 0, 200 * ms, time.Second, time.Second}},
		}},
		{Quota{Shape: TokenBucket, Rate: 4, Burst: 3}, []sstep{ // a token per 250 ms
			{0, false, State{Limit: 3, Remaining: 3, Window: 750 * ms}},
			{0, true, State{3, 2, 250 * ms, 250 * ms, 750 * ms}},
			{0, true, State{3, 1, 250 * ms, 500 * ms, 750 * ms}},
			{100 * ms, true, State{3, 0, 150 * ms, 650 * ms, 750 * ms}},
			{200 * ms, true, State{3, 0, 50 * ms, 550 * ms, 750 * ms}}, // refused
			{250 * ms, true, State{3, 0, 250 * ms, 750 * ms, 750 * ms}},
		}},
		{Quota{Shape: GCRA, Rate: 4, Burst: 1}, []sstep{ // 2 at once
			{0, true, State{2, 1, 250 * ms, 250 * ms, 500 * ms}},
		}},
		{Quota{Shape: SlidingCounter, Rate: 4, Window: time.Second}, []sstep{
			{0, false, State{Limit: 4, Remaining: 4, Window: time.Second}},
			{500 * ms, true, State{4, 3, 500 * ms, 500 * ms, time.Second}},
			{1500 * ms, false, State{4, 3, 500 * ms, 500 * ms, time.Second}}, // 1·0.5 + 0 + 3 ≤ 4
			{1750 * ms, false, State{4, 3, 250 * ms, 250 * ms, time.Second}},
		}},
		{Quota{Shape: Concurrency, Rate: 3}, []sstep{
			{0, true, State{Limit: 3, Remaining: 2}},
		}},
	} {
		m := c.q.New(t0)
		for i, s := range c.steps {
			if s.take {
				m.Take(t0.Add(s.at))
			}
			if got := m.State(t0.Add(s.at)); got != s.want {
				t.Errorf("%v: step %d at +%v: State = %+v, want %+v", c.q, i, s.at, got, s.want)
			}
		}
	}
}

func TestIdeal(t *testing.T) {
	for _, c := range []struct {
		q    Quota
		n    int
		want time.Duration
	}{
		{Quota{Shape: FixedClock, Rate: 40, Window: 5 * time.Second}, 200, 20 * time.Second},
		{Quota{Shape: FixedClock, Rate: 40, Window: 5 * time.Second}, 201, 25 * time.Second},
		{Quota{Shape: FixedFirst, Rate: 40, Window: 5 * time.Second}, 200, 20 * time.Second},
		{Quota{Shape: SlidingLog, Rate: 40, Window: 5 * time.Second}, 200, 20 * time.Second},
		{Quota{Shape: SlidingLog, Rate: 3, Window: time.Second}, 7, 2 * time.Second},
		{Quota{Shape: TokenBucket, Rate: 8, Burst: 10}, 200, 23750 * ms},
		{Quota{Shape: TokenBucket, Rate: 3, Burst: 1}, 4, 3 * (time.Second / 3)}, // the interval, 1/3 s, is whole ns
		{Quota{Shape: GCRA, Rate: 8, Burst: 10}, 200, 23625 * ms},
		{Quota{Shape: GCRADelay, Rate: 8, Burst: 10}, 200, 24875 * ms},
		{Quota{Shape: SlidingCounter, Rate: 4, Window: time.Second}, 4, 0},
		// 4, then one at 250 ms into the next window... 4·(1−e) ≤ 3: e = 250 ms.
		{Quota{Shape: SlidingCounter, Rate: 4, Window: time.Second}, 5, 1250 * ms},
		{Quota{Shape: Concurrency, Rate: 5}, 200, 0},
		{Quota{Shape: FixedClock, Rate: 40, Window: 5 * time.Second}, 0, 0},
	} {
		if got := c.q.Ideal(c.n); got != c.want {
			t.Errorf("%v: Ideal(%d) = %v, want %v", c.q, c.n, got, c.want)
		}
	}
	for _, c := range []struct {
		q    Quota
		n    int
		want time.Duration
	}{
		{Quota{Shape: Concurrency, Rate: 5}, 200, 39 * 25 * ms},
		// Each window's 40 go 5 at a time: the last window's last 5 are
		// sent 7 latencies after it opens.
		{Quota{Shape: FixedClock, Rate: 40, Window: 5 * time.Second, InFlight: 5}, 200, 20*time.Second + 7*25*ms},
		// The bucket binds: 8/s is far below the cap's 5 per 25 ms.
		{Quota{Shape: TokenBucket, Rate: 8, Burst: 10, InFlight: 5}, 200, 23750 * ms},
	} {
		if got := c.q.IdealLatency(c.n, 25*ms); got != c.want {
			t.Errorf("%v: IdealLatency(%d, 25ms) = %v, want %v", c.q, c.n, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, q := range []Quota{
		{Shape: "leaky", Rate: 1},
		{Shape: FixedClock, Rate: 0, Window: time.Second},
		{Shape: FixedClock, Rate: 1},
		{Shape: TokenBucket, Rate: 1},
		{Shape: GCRA, Rate: 1, Burst: -1},
		{Shape: SlidingCounter, Rate: 1, Window: time.Microsecond},
		{Shape: FixedClock, Rate: 1, Window: time.Second, InFlight: -1},
		{Shape: Concurrency, Rate: 5, InFlight: 2},
	} {
		if q.Validate() == nil {
			t.Errorf("%+v: Validate = nil, want an error", q)
		}
	}
	for _, q := range []Quota{
		{Shape: FixedFirst, Rate: 1, Window: time.Second},
		{Shape: GCRA, Rate: 1},
		{Shape: Concurrency, Rate: 1},
	} {
		if err := q.Validate(); err != nil {
			t.Errorf("%+v: Validate = %v", q, err)
		}
	}
}
