package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/hint"
	"github.com/quotagate/quotagate/internal/sim"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// TestCarrier drives the fake carrier on a fake clock: its answers, the hint
// in the prose of the JSON body, and what it counts as a refusal into an
// already-closed window.
func TestCarrier(t *testing.T) {
	now := t0
	c := makeCarrier("acme", carrierOptions{quota: &sim.Quota{Shape: sim.FixedClock, Rate: 2, Window: time.Second}, dialect: mustDialect("prose"), origin: t0},
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
	log := []sim.Arrival{
		{At: at(150), Entered: at(90)},   // entered before the pause was recorded: in flight
		{At: at(500), Entered: at(200)},  // entered after, sent during the pause: a leak
		{At: at(1200), Entered: at(200)}, // sent after the pause
		{At: at(600)},                    // not from a task
	}
	if got := leaks(log, pauses); got != 1 {
		t.Fatalf("leaks = %d, want 1", got)
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
		q       sim.Quota
		answers []answer
	}{
		{sim.Quota{Shape: sim.FixedClock, Rate: 2, Window: 5 * time.Second}, []answer{
			{0, 200, "2", "1", "5", ""},
			{1200 * time.Millisecond, 200, "2", "0", "4", ""}, // 3.8 s left: rounded up
			{1300 * time.Millisecond, 429, "2", "0", "4", "4"},
			{5 * time.Second, 200, "2", "1", "5", ""},
		}},
		{sim.Quota{Shape: sim.TokenBucket, Rate: 8, Burst: 2}, []answer{
			{0, 200, "2", "1", "1", ""}, // a token in 125 ms: rounded up
			{0, 200, "2", "0", "1", ""},
			{0, 429, "2", "0", "1", "1"},
		}},
	} {
		now := t0
		car := makeCarrier("acme", carrierOptions{quota: &c.q, dialect: mustDialect(defaultDialect(c.q.Shape, true)), origin: t0}, func() time.Time { return now }, "secret")
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
			if !strings.Contains(string(body), sim.RefusalMessage(mustAtoi(t, a.retryAfter))) {
				t.Fatalf("%v, request %d: body %q does not say Retry-After %s s in prose", c.q, i, body, a.retryAfter)
			}
			if d, ok := hint.From(resp, body); !ok || d != time.Duration(mustAtoi(t, a.retryAfter))*time.Second {
				t.Fatalf("%v, request %d: the library reads %v, %v", c.q, i, d, ok)
			}
		}
	}

	// The carrier without quota advertises nothing, headers or not.
	free := makeCarrier("swift", carrierOptions{dialect: mustDialect("delta")}, time.Now, "secret")
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
	c := makeCarrier("acme", carrierOptions{quota: &sim.Quota{Shape: sim.FixedClock, Rate: 1, Window: time.Second}, dialect: mustDialect("prose"), origin: t0},
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
		q    sim.Quota
		want quotagate.Limit
		ok   bool
	}{
		{fixed40, quotagate.FixedWindow(40, 5*time.Second), true},
		{withShape(fixed40, sim.FixedFirst), quotagate.FixedWindow(40, 5*time.Second), true},
		{withShape(fixed40, sim.SlidingLog), quotagate.SlidingWindow(40, 5*time.Second), true},
		{withShape(fixed40, sim.SlidingCounter), quotagate.Limit{Rate: 39, Period: 5 * time.Second, Burst: 1}, true},
		{bucket8, quotagate.Limit{Rate: 8, Period: time.Second, Burst: 10}, true},
		{gcra8, quotagate.Limit{Rate: 8, Period: time.Second, Burst: 10}, true},
		{concurrency5, quotagate.Limit{Rate: 5, Period: quotagate.DefaultLease, Concurrent: true}, true},
	} {
		if got, ok := configuredLimit(c.q); got != c.want || ok != c.ok {
			t.Errorf("configuredLimit(%v) = %+v, %v; want %+v, %v", c.q, got, ok, c.want, c.ok)
		}
	}
	// A rate that caps its requests in flight too is configured as both.
	want := []quotagate.Limit{quotagate.FixedWindow(40, 5*time.Second), quotagate.Concurrent(5)}
	if got := configuredLimits(fixed40concurrency5); !slices.Equal(got, want) {
		t.Errorf("configuredLimits(%v) = %+v, want %+v", fixed40concurrency5, got, want)
	}
}

// TestSlidingCounterWindowNeverRefused: requests paced by
// SlidingCounterWindow(n, w) (each at least its GCRA interval after the
// one before, with any gaps) are never refused by internal/sim's sliding
// window counter of n per w, wherever its windows start.
func TestSlidingCounterWindowNeverRefused(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for _, c := range []struct {
		n int
		w time.Duration
	}{{1, time.Second}, {2, time.Second}, {3, 700 * time.Millisecond}, {40, 5 * time.Second}, {7, 3 * time.Second}} {
		l := quotagate.SlidingCounterWindow(c.n, c.w)
		interval := time.Duration((l.Period.Microseconds()+int64(l.Rate)-1)/int64(l.Rate)) * time.Microsecond // as the GCRA rounds it
		for run := range 50 {
			origin := t0.Add(-time.Duration(r.Int64N(int64(c.w))))
			m := sim.Quota{Shape: sim.SlidingCounter, Rate: c.n, Window: c.w}.New(origin)
			at := t0
			for i := range 400 {
				if d := m.Take(at); !d.OK {
					t.Fatalf("%d per %v, run %d: request %d at %v refused (wait %v)", c.n, c.w, run, i, at.Sub(origin), d.Wait)
				}
				at = at.Add(interval)
				if r.IntN(4) == 0 {
					at = at.Add(time.Duration(r.Int64N(int64(c.w) / 2)))
				}
			}
		}
	}
}

// TestControlled: the standalone carrier's restart starts fresh windows on
// the next whole second and zeroes the counters; stats reads them.
func TestControlled(t *testing.T) {
	now := t0.Add(300 * time.Millisecond)
	c := makeCarrier("acme", carrierOptions{quota: &sim.Quota{Shape: sim.FixedClock, Rate: 1, Window: time.Second}, dialect: mustDialect("prose")},
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
