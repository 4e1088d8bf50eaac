package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/hint"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// step is one request at t0+at and what the model must answer.
type step struct {
	at   time.Duration
	ok   bool
	wait time.Duration // exact, when refused
	hint int           // the seconds the carrier writes
}

func runSteps(t *testing.T, q quotaModel, steps []step) {
	t.Helper()
	for i, s := range steps {
		ok, wait := q.take(t0.Add(s.at))
		if ok != s.ok || (!ok && wait != s.wait) {
			t.Fatalf("step %d at +%v: take = %v, %v; want %v, %v", i, s.at, ok, wait, s.ok, s.wait)
		}
		if !ok {
			if h := hintSeconds(wait); h != s.hint {
				t.Fatalf("step %d at +%v: hint %d s, want %d s", i, s.at, h, s.hint)
			}
		}
	}
}

func TestFixedWindow(t *testing.T) {
	q := quotaSpec{Model: "fixed", Rate: 3, Window: time.Second}.newModel(t0)
	runSteps(t, q, []step{
		{at: 0, ok: true},
		{at: 100 * time.Millisecond, ok: true},
		{at: 200 * time.Millisecond, ok: true},
		{at: 300 * time.Millisecond, wait: 700 * time.Millisecond, hint: 1},
		{at: 999 * time.Millisecond, wait: time.Millisecond, hint: 1},
		{at: time.Second, ok: true}, // the boundary belongs to the next window
		{at: time.Second, ok: true},
		{at: 1999 * time.Millisecond, ok: true},
		{at: 1999*time.Millisecond + 999*time.Microsecond, wait: time.Microsecond, hint: 1},
		{at: 5500 * time.Millisecond, ok: true}, // idle windows do not accumulate
		{at: 5500 * time.Millisecond, ok: true},
		{at: 5500 * time.Millisecond, ok: true},
		{at: 5500 * time.Millisecond, wait: 500 * time.Millisecond, hint: 1},
	})

	long := quotaSpec{Model: "fixed", Rate: 2, Window: 10 * time.Second}.newModel(t0)
	runSteps(t, long, []step{
		{at: 0, ok: true},
		{at: 2 * time.Second, ok: true},
		{at: 2500 * time.Millisecond, wait: 7500 * time.Millisecond, hint: 8},
		{at: 9 * time.Second, wait: time.Second, hint: 1},
		{at: 10 * time.Second, ok: true},
	})
}

func TestFixedWindowStartsWithFirstRequest(t *testing.T) {
	q := quotaSpec{Model: "fixed", Rate: 1, Window: time.Second}.newModel(time.Time{})
	runSteps(t, q, []step{
		{at: 300 * time.Millisecond, ok: true}, // the first window is [0.3 s, 1.3 s)
		{at: 1200 * time.Millisecond, wait: 100 * time.Millisecond, hint: 1},
		{at: 1300 * time.Millisecond, ok: true},
	})
}

func TestTokenBucket(t *testing.T) {
	q := quotaSpec{Model: "bucket", Rate: 2, Burst: 3}.newModel(t0) // one token per 500 ms
	runSteps(t, q, []step{
		{at: 0, ok: true}, // starts full: burst at once
		{at: 0, ok: true},
		{at: 0, ok: true},
		{at: 0, wait: 500 * time.Millisecond, hint: 1},
		{at: 499 * time.Millisecond, wait: time.Millisecond, hint: 1},
		{at: 500 * time.Millisecond, ok: true}, // one token refilled
		{at: 500 * time.Millisecond, wait: 500 * time.Millisecond, hint: 1},
		{at: 1750 * time.Millisecond, ok: true}, // 1.5 tokens refilled: one spent, half left
		{at: 1750 * time.Millisecond, ok: true},
		{at: 1750 * time.Millisecond, wait: 250 * time.Millisecond, hint: 1},
		{at: 10 * time.Second, ok: true}, // refill stops at the burst
		{at: 10 * time.Second, ok: true},
		{at: 10 * time.Second, ok: true},
		{at: 10 * time.Second, wait: 500 * time.Millisecond, hint: 1},
	})

	slow := quotaSpec{Model: "bucket", Rate: 1, Burst: 1}.newModel(t0)
	runSteps(t, slow, []step{
		{at: 0, ok: true},
		{at: 200 * time.Millisecond, wait: 800 * time.Millisecond, hint: 1},
		{at: time.Second, ok: true},
	})
}

func TestHintSeconds(t *testing.T) {
	for _, c := range []struct {
		wait time.Duration
		want int
	}{
		{0, 1}, {time.Nanosecond, 1}, {time.Second, 1}, {time.Second + time.Nanosecond, 2},
		{7500 * time.Millisecond, 8}, {15 * time.Second, 15},
	} {
		if got := hintSeconds(c.wait); got != c.want {
			t.Errorf("hintSeconds(%v) = %d, want %d", c.wait, got, c.want)
		}
	}
	// The prose reads back as exactly the hint through the library's parser.
	for _, s := range []int{1, 8, 15} {
		if d, ok := hint.FromText(refusalMessage(s)); !ok || d != time.Duration(s)*time.Second {
			t.Errorf("hint.FromText(%q) = %v, %v", refusalMessage(s), d, ok)
		}
	}
}

func TestIdeal(t *testing.T) {
	fixed := quotaSpec{Model: "fixed", Rate: 10, Window: time.Second}
	bucket := quotaSpec{Model: "bucket", Rate: 10, Burst: 10}
	for _, c := range []struct {
		q    quotaSpec
		p    int
		want time.Duration
	}{
		{fixed, 0, 0}, {fixed, 10, 0}, {fixed, 11, time.Second}, {fixed, 170, 16 * time.Second},
		{quotaSpec{Model: "fixed", Rate: 5, Window: 10 * time.Second}, 12, 20 * time.Second},
		{bucket, 5, 0}, {bucket, 10, 0}, {bucket, 170, 16 * time.Second},
		{quotaSpec{Model: "bucket", Rate: 8, Burst: 10}, 200, 23750 * time.Millisecond},
		{quotaSpec{Model: "bucket", Rate: 3, Burst: 1}, 4, 3 * (time.Second / 3)}, // the model's interval, 1/3 s, is whole ns: 333333333
		{quotaSpec{Model: "sliding", Rate: 40, Window: 5 * time.Second}, 200, 20 * time.Second},
		{quotaSpec{Model: "sliding", Rate: 40, Window: 5 * time.Second}, 201, 25 * time.Second},
		{quotaSpec{Model: "sliding", Rate: 3, Window: time.Second}, 7, 2 * time.Second},
		{quotaSpec{Model: "fixed", Rate: 40, Window: 5 * time.Second}, 170, 20 * time.Second},
	} {
		if got := c.q.ideal(c.p); got != c.want {
			t.Errorf("%v: ideal(%d) = %v, want %v", c.q, c.p, got, c.want)
		}
	}
}

// TestCarrier drives the fake carrier on a fake clock: its answers, the hint
// in the prose of the JSON body, and what it counts as a refusal into an
// already-closed window.
func TestCarrier(t *testing.T) {
	now := t0
	c := makeCarrier("acme", carrierOptions{quota: &quotaSpec{Model: "fixed", Rate: 2, Window: time.Second}},
		func() time.Time { return now }, "secret")
	h := c.handler()
	get := func(cred string) *http.Response {
		req := httptest.NewRequest("GET", "/v1/shipments/AC0000000001", nil)
		req.Header.Set("Authorization", "Bearer "+cred)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Result()
	}
	hint := func(resp *http.Response) time.Duration {
		t.Helper()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-RateLimit-Remaining") != "" || !strings.Contains(string(body), `"rate_limited"`) {
			t.Fatalf("refusal %q: want the hint in the JSON prose only", body)
		}
		d, ok := hint.From(resp, body)
		if !ok {
			t.Fatalf("no hint in %q", body)
		}
		return d
	}

	for i, s := range []struct {
		at     time.Duration
		cred   string
		status int
		hint   time.Duration
	}{
		{0, "secret", 200, 0},
		{10 * time.Millisecond, "secret", 200, 0},
		{20 * time.Millisecond, "secret", 429, time.Second},  // first refusal: a closure
		{500 * time.Millisecond, "secret", 429, time.Second}, // announced closed until +1.02 s: into it
		{600 * time.Millisecond, "wrong", 401, 0},            // not counted
		{1010 * time.Millisecond, "secret", 200, 0},          // new window, still "closed" per the 429s, but accepted
		{1020 * time.Millisecond, "secret", 200, 0},
		{1500 * time.Millisecond, "secret", 429, time.Second}, // the announced +1.5 s is reached: a new closure
	} {
		now = t0.Add(s.at)
		resp := get(s.cred)
		if resp.StatusCode != s.status {
			t.Fatalf("request %d: HTTP %d, want %d", i, resp.StatusCode, s.status)
		}
		if s.status == 429 {
			if d := hint(resp); d != s.hint {
				t.Fatalf("request %d: hint %v, want %v", i, d, s.hint)
			}
		}
	}
	want := carrierStats{Requests: 7, Accepted: 4, Refused: 3, IntoClosed: 1, Closures: 2}
	if got := c.snapshot(); got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
}

func TestLeaks(t *testing.T) {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	pauses := []pauseRecord{{at: at(100), until: at(1100)}}
	log := []arrival{
		{at: at(150), entered: at(90)},   // entered before the pause was recorded: in flight
		{at: at(500), entered: at(200)},  // entered after, sent during the pause: a leak
		{at: at(1200), entered: at(200)}, // sent after the pause
		{at: at(600)},                    // not from a task
	}
	if got := leaks(log, pauses); got != 1 {
		t.Fatalf("leaks = %d, want 1", got)
	}
}

func TestSlidingLog(t *testing.T) {
	spec := quotaSpec{Model: "sliding", Rate: 3, Window: time.Second}
	q := spec.newModel(t0)
	runSteps(t, q, []step{
		{at: 0, ok: true},
		{at: 200 * time.Millisecond, ok: true},
		{at: 400 * time.Millisecond, ok: true},
		{at: 500 * time.Millisecond, wait: 500 * time.Millisecond, hint: 1},  // the slot of +0 frees at +1 s
		{at: time.Second, ok: true},                                          // ... and is taken
		{at: 1100 * time.Millisecond, wait: 100 * time.Millisecond, hint: 1}, // the slot of +0.2 s: refusals are not logged
		{at: 1200 * time.Millisecond, ok: true},
		{at: 1399 * time.Millisecond, wait: time.Millisecond, hint: 1},
		{at: 1400 * time.Millisecond, ok: true},
		{at: 5 * time.Second, ok: true}, // all expired
		{at: 5 * time.Second, ok: true},
		{at: 5 * time.Second, ok: true},
		{at: 5 * time.Second, wait: time.Second, hint: 1},
	})
	// Whatever the exact wait, the carrier's hint is the whole window.
	long := quotaSpec{Model: "sliding", Rate: 40, Window: 5 * time.Second}
	for _, wait := range []time.Duration{time.Millisecond, 2 * time.Second, 5 * time.Second} {
		if h := hintSeconds(long.hint(wait)); h != 5 {
			t.Errorf("sliding hint for an exact wait of %v: %d s, want 5", wait, h)
		}
		if h := hintSeconds(quotaSpec{Model: "fixed", Rate: 40, Window: 5 * time.Second}.hint(wait)); h != hintSeconds(wait) {
			t.Errorf("fixed hint for %v: %d s, want the exact wait rounded up", wait, h)
		}
	}
}

// TestSlidingLogExact drives the sliding log with a seeded random
// workload (bursts and lulls) and checks it against its definition: no
// window of its length ever holds more than n acceptances, and it refuses
// only when the window ending with the request already holds n.
func TestSlidingLogExact(t *testing.T) {
	const n, w = 40, 5 * time.Second
	q := quotaSpec{Model: "sliding", Rate: n, Window: w}.newModel(t0)
	rng := rand.New(rand.NewPCG(7, 9))
	var accepted []time.Time
	inWindow := func(now time.Time) int { // acceptances in (now-w, now]
		c := 0
		for _, a := range accepted {
			if now.Sub(a) < w {
				c++
			}
		}
		return c
	}
	now, refused := t0, 0
	for range 5000 {
		if rng.IntN(10) == 0 {
			now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Second)))) // a lull
		} else {
			now = now.Add(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
		}
		full := inWindow(now) >= n
		ok, wait := q.take(now)
		switch {
		case ok && full:
			t.Fatalf("at +%v: accepted with %d already in the window", now.Sub(t0), n)
		case !ok && !full:
			t.Fatalf("at +%v: refused with %d in the window", now.Sub(t0), inWindow(now))
		case ok:
			accepted = append(accepted, now)
		default:
			refused++
			if ok2, _ := q.take(now.Add(wait)); !ok2 {
				t.Fatalf("at +%v: refused again after its exact wait %v", now.Sub(t0), wait)
			}
			accepted = append(accepted, now.Add(wait))
			now = now.Add(wait)
		}
	}
	for i, a := range accepted {
		c := 0
		for _, b := range accepted[i:] {
			if b.Sub(a) < w {
				c++
			}
		}
		if c > n {
			t.Fatalf("%d acceptances in the window starting at +%v, want at most %d", c, a.Sub(t0), n)
		}
	}
	if refused == 0 || len(accepted) < 1000 {
		t.Fatalf("%d accepted, %d refused: the workload does not test the limit", len(accepted), refused)
	}
}

// TestBudget: what each model advertises after each request.
func TestBudget(t *testing.T) {
	type bstep struct {
		at   time.Duration
		ok   bool
		want budget
	}
	for _, c := range []struct {
		q     quotaSpec
		steps []bstep
	}{
		{quotaSpec{Model: "fixed", Rate: 2, Window: time.Second}, []bstep{
			{0, true, budget{2, 1, time.Second}},
			{300 * time.Millisecond, true, budget{2, 0, 700 * time.Millisecond}},
			{400 * time.Millisecond, false, budget{2, 0, 600 * time.Millisecond}},
			{2500 * time.Millisecond, true, budget{2, 1, 500 * time.Millisecond}}, // a later window
		}},
		{quotaSpec{Model: "sliding", Rate: 2, Window: time.Second}, []bstep{
			{0, true, budget{2, 1, time.Second}},
			{300 * time.Millisecond, true, budget{2, 0, 700 * time.Millisecond}}, // one slot frees at +1 s
			{400 * time.Millisecond, false, budget{2, 0, 600 * time.Millisecond}},
			{1100 * time.Millisecond, true, budget{2, 0, 200 * time.Millisecond}}, // the slot of +0.3 s is next
			{1300 * time.Millisecond, true, budget{2, 0, 800 * time.Millisecond}},
		}},
		{quotaSpec{Model: "bucket", Rate: 4, Burst: 3}, []bstep{ // a token per 250 ms
			{0, true, budget{3, 2, 250 * time.Millisecond}},
			{0, true, budget{3, 1, 250 * time.Millisecond}},
			{100 * time.Millisecond, true, budget{3, 0, 150 * time.Millisecond}},
			{200 * time.Millisecond, false, budget{3, 0, 50 * time.Millisecond}},
			{250 * time.Millisecond, true, budget{3, 0, 250 * time.Millisecond}},
			{900 * time.Millisecond, true, budget{3, 1, 100 * time.Millisecond}},
		}},
	} {
		m := c.q.newModel(t0)
		for i, s := range c.steps {
			now := t0.Add(s.at)
			ok, _ := m.take(now)
			if got := m.budget(now); ok != s.ok || got != s.want {
				t.Fatalf("%v, step %d at +%v: %v, %+v; want %v, %+v", c.q, i, s.at, ok, got, s.ok, s.want)
			}
		}
	}
}

// TestCarrierHeaders: with headers, every answer of the constrained
// carrier, 200 and 429, advertises the budget; a 429 also carries its hint
// as Retry-After, equal to the prose, and the library reads it.
func TestCarrierHeaders(t *testing.T) {
	type answer struct {
		at                      time.Duration
		status                  int
		limit, remaining, reset string
		retryAfter              string // 429 only
	}
	for _, c := range []struct {
		q       quotaSpec
		answers []answer
	}{
		{quotaSpec{Model: "fixed", Rate: 2, Window: 5 * time.Second}, []answer{
			{0, 200, "2", "1", "5", ""},
			{1200 * time.Millisecond, 200, "2", "0", "4", ""}, // 3.8 s left: rounded up
			{1300 * time.Millisecond, 429, "2", "0", "4", "4"},
			{5 * time.Second, 200, "2", "1", "5", ""},
		}},
		{quotaSpec{Model: "sliding", Rate: 2, Window: 5 * time.Second}, []answer{
			{0, 200, "2", "1", "5", ""},
			{3 * time.Second, 200, "2", "0", "2", ""},
			{3500 * time.Millisecond, 429, "2", "0", "2", "5"}, // the slot of +0 frees in 1.5 s; the hint says the window
			{5 * time.Second, 200, "2", "0", "3", ""},
		}},
		{quotaSpec{Model: "bucket", Rate: 8, Burst: 2}, []answer{
			{0, 200, "2", "1", "1", ""}, // a token in 125 ms: rounded up
			{0, 200, "2", "0", "1", ""},
			{0, 429, "2", "0", "1", "1"},
		}},
	} {
		now := t0
		car := makeCarrier("acme", carrierOptions{quota: &c.q, headers: true, origin: t0}, func() time.Time { return now }, "secret")
		h := car.handler()
		for i, a := range c.answers {
			now = t0.Add(a.at)
			req := httptest.NewRequest("GET", "/v1/shipments/AC0000000001", nil)
			req.Header.Set("Authorization", "Bearer secret")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			resp := rec.Result()
			hd := resp.Header
			got := answer{a.at, resp.StatusCode, hd.Get("X-RateLimit-Limit"), hd.Get("X-RateLimit-Remaining"), hd.Get("X-RateLimit-Reset"), hd.Get("Retry-After")}
			if got != a {
				t.Fatalf("%v, request %d: %+v, want %+v", c.q, i, got, a)
			}
			if a.status != 429 {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(body), refusalMessage(mustAtoi(t, a.retryAfter))) {
				t.Fatalf("%v, request %d: body %q does not say Retry-After %s s in prose", c.q, i, body, a.retryAfter)
			}
			if d, ok := hint.From(resp, body); !ok || d != time.Duration(mustAtoi(t, a.retryAfter))*time.Second {
				t.Fatalf("%v, request %d: the library reads %v, %v", c.q, i, d, ok)
			}
		}
	}

	// The carrier without quota advertises nothing, headers or not.
	free := makeCarrier("swift", carrierOptions{headers: true}, time.Now, "secret")
	req := httptest.NewRequest("GET", "/v1/shipments/SW0000000001", nil)
	req.Header.Set("Authorization", "Bearer secret")
	rec := httptest.NewRecorder()
	free.handler().ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Header().Get("X-RateLimit-Remaining") != "" {
		t.Fatalf("free carrier: HTTP %d, headers %v", rec.Code, rec.Header())
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCarrierOrigin: the fixed windows start at the carrier's origin (the
// run's start on a whole second), not at the first request.
func TestCarrierOrigin(t *testing.T) {
	now := t0
	c := makeCarrier("acme", carrierOptions{quota: &quotaSpec{Model: "fixed", Rate: 1, Window: time.Second}, origin: t0},
		func() time.Time { return now }, "secret")
	h := c.handler()
	for i, s := range []struct {
		at     time.Duration
		status int
	}{
		{900 * time.Millisecond, 200},
		{1000 * time.Millisecond, 200}, // a new window at +1 s, not at +1.9 s
		{1500 * time.Millisecond, 429},
	} {
		now = t0.Add(s.at)
		req := httptest.NewRequest("GET", "/v1/shipments/AC0000000001", nil)
		req.Header.Set("Authorization", "Bearer secret")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != s.status {
			t.Fatalf("request %d at +%v: HTTP %d, want %d", i, s.at, rec.Code, s.status)
		}
	}
}

func TestConfiguredLimit(t *testing.T) {
	for _, c := range []struct {
		q    quotaSpec
		want quotagate.Limit
	}{
		{quotaSpec{Model: "fixed", Rate: 40, Window: 5 * time.Second}, quotagate.FixedWindow(40, 5*time.Second)},
		{quotaSpec{Model: "sliding", Rate: 40, Window: 5 * time.Second}, quotagate.Limit{Rate: 40, Period: 5 * time.Second, Burst: 1}},
		{quotaSpec{Model: "bucket", Rate: 8, Burst: 10}, quotagate.Limit{Rate: 8, Period: time.Second, Burst: 10}},
	} {
		if got := configuredLimit(c.q); got != c.want {
			t.Errorf("configuredLimit(%v) = %+v, want %+v", c.q, got, c.want)
		}
	}
}

// TestControlled: the standalone carrier's restart starts fresh windows on
// the next whole second and zeroes the counters; stats reads them.
func TestControlled(t *testing.T) {
	now := t0.Add(300 * time.Millisecond)
	c := makeCarrier("acme", carrierOptions{quota: &quotaSpec{Model: "fixed", Rate: 1, Window: time.Second}},
		func() time.Time { return now }, "secret")
	h := controlled(c)
	do := func(method, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("Authorization", "Bearer secret")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	do("GET", "/v1/shipments/AC1")
	if rec := do("GET", "/v1/shipments/AC2"); rec.Code != 429 {
		t.Fatalf("second request: HTTP %d, want 429", rec.Code)
	}
	rec := do("POST", "/control/restart")
	if want := fmt.Sprintf(`{"start_unix_ms":%d}`, t0.Add(time.Second).UnixMilli()); strings.TrimSpace(rec.Body.String()) != want {
		t.Fatalf("restart: %s, want %s", rec.Body, want)
	}
	now = t0.Add(1900 * time.Millisecond) // the first new window is [+1 s, +2 s)
	if rec := do("GET", "/v1/shipments/AC3"); rec.Code != 200 {
		t.Fatalf("after restart: HTTP %d", rec.Code)
	}
	now = t0.Add(2 * time.Second)
	if rec := do("GET", "/v1/shipments/AC4"); rec.Code != 200 {
		t.Fatalf("next window: HTTP %d", rec.Code)
	}
	var st carrierStats
	if err := json.Unmarshal(do("GET", "/control/stats").Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if want := (carrierStats{Requests: 2, Accepted: 2}); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
}
