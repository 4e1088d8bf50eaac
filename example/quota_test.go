package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
	c := makeCarrier("acme", &quotaSpec{Model: "fixed", Rate: 2, Window: time.Second}, 0,
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
		if resp.Header.Get("Retry-After") != "" || !strings.Contains(string(body), `"rate_limited"`) {
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
