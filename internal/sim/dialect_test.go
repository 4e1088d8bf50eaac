package sim

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestDialects writes one refusal and one acceptance of every dialect from
// fixed states and checks the status, the headers and a part of the body.
func TestDialects(t *testing.T) {
	now := t0.Add(250 * ms) // 03:04:05.250
	// A fixed window of 40 per 5 s, spent, ending at 03:04:07.500.
	refused := Reply{Now: now, Decision: Decision{Wait: 2250 * ms},
		State: State{Limit: 40, Remaining: 0, Reset: 2250 * ms, Full: 2250 * ms, Window: 5 * time.Second}}
	// A bucket of 10 at 8/s with 3 left: the next token in 100 ms, full in 850 ms.
	accepted := Reply{Now: now, Decision: Decision{OK: true},
		State: State{Limit: 10, Remaining: 3, Reset: 100 * ms, Full: 850 * ms, Window: 1250 * ms}}
	// epoch is the Unix second of now+d, rounded down.
	epoch := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }

	for _, c := range []struct {
		dialect string
		r       Reply
		status  int
		headers map[string]string // "" : absent
		body    string            // a part of it
	}{
		{"none", refused, 429, map[string]string{"Retry-After": "", "X-RateLimit-Remaining": ""}, `"Rate limit exceeded."`},
		{"retry-after", refused, 429, map[string]string{"Retry-After": "3"}, "rate_limited"},
		{"retry-after-date", refused, 429, map[string]string{"Retry-After": "Fri, 02 Jan 2026 03:04:08 GMT"}, ""},
		{"prose", refused, 429, map[string]string{"Retry-After": ""}, "Please try again in 3 seconds."},
		{"window", refused, 429, map[string]string{"Retry-After": "5"}, "try again in 5 seconds"},
		{"httprate", refused, 429, map[string]string{"Retry-After": "5", "X-RateLimit-Limit": "40", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": epoch(2250*ms + 750*ms)}, ""},
		{"delta", refused, 429, map[string]string{"Retry-After": "3", "X-RateLimit-Reset": "3"}, "try again in 3 seconds"},
		{"delta", accepted, 200, map[string]string{"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "1", "Retry-After": ""}, ""},
		{"github", refused, 403, map[string]string{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Used": "40", "X-Ratelimit-Reset": epoch(3 * time.Second), "Retry-After": ""}, "API rate limit exceeded"},
		{"github-429", refused, 429, map[string]string{"X-Ratelimit-Remaining": "0"}, "documentation_url"},
		{"github", accepted, 200, map[string]string{"X-Ratelimit-Limit": "10", "X-Ratelimit-Remaining": "3", "X-Ratelimit-Used": "7", "X-Ratelimit-Reset": epoch(2 * time.Second)}, ""},
		{"github-secondary", refused, 403, map[string]string{"Retry-After": "3", "X-Ratelimit-Limit": "5000", "X-Ratelimit-Remaining": "4959"}, "secondary rate limit"},
		{"x", refused, 429, map[string]string{"X-Rate-Limit-Limit": "40", "X-Rate-Limit-Remaining": "0", "X-Rate-Limit-Reset": epoch(3 * time.Second)}, "Too Many Requests"},
		{"discord", accepted, 200, map[string]string{"X-RateLimit-Remaining": "3", "X-RateLimit-Reset-After": "0.000", "X-RateLimit-Reset": "1767323045.250"}, ""},
		{"discord", refused, 429, map[string]string{"X-RateLimit-Reset-After": "2.250", "X-RateLimit-Reset": "1767323047.500", "Retry-After": "3"}, `"retry_after":2.25`},
		{"until-full", accepted, 200, map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Reset": "1"}, ""},
		{"until-full", refused, 429, map[string]string{"Retry-After": "3", "X-RateLimit-Reset": "3"}, ""},
		// The window ends at 03:04:07.500: the reset says 03:04:07.
		{"epoch-floor", refused, 429, map[string]string{"X-RateLimit-Reset": epoch(2 * time.Second), "Retry-After": ""}, ""},
		{"ietf", refused, 429, map[string]string{"RateLimit-Policy": `"default";q=40;w=5`, "RateLimit": `"default";r=0;t=3`}, ""},
		{"reset-ms", refused, 429, map[string]string{"X-RateLimit-Reset": "2250"}, ""},
		{"reset-ms", accepted, 200, map[string]string{"X-RateLimit-Reset": "100"}, ""},
	} {
		d, ok := DialectNamed(c.dialect)
		if !ok {
			t.Fatalf("no dialect %q", c.dialect)
		}
		h := http.Header{}
		status, body := d.Write(h, c.r)
		if status != c.status {
			t.Errorf("%s (ok %v): status %d, want %d", c.dialect, c.r.Decision.OK, status, c.status)
		}
		for k, want := range c.headers {
			if got := h.Get(k); got != want {
				t.Errorf("%s (ok %v): %s = %q, want %q", c.dialect, c.r.Decision.OK, k, got, want)
			}
		}
		if c.r.Decision.OK && body != nil {
			t.Errorf("%s: accepted with a body %q", c.dialect, body)
		}
		if !strings.Contains(string(body), c.body) {
			t.Errorf("%s: body %q, want it to contain %q", c.dialect, body, c.body)
		}
	}
}

func TestEveryDialectNamedOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range Dialects {
		if seen[d.Name] || d.Doc == "" {
			t.Errorf("dialect %q: duplicate or undocumented", d.Name)
		}
		seen[d.Name] = true
	}
	if _, ok := DialectNamed("klingon"); ok {
		t.Error("DialectNamed(klingon) found one")
	}
}

// TestServer drives a Server on a fake clock: the answers of a fixed
// window of 2 per second in the retry-after dialect, the log, and which
// refusals went into a closure already announced.
func TestServer(t *testing.T) {
	now := t0
	d, _ := DialectNamed("retry-after")
	s := NewServer(Config{
		Quota: Quota{Shape: FixedClock, Rate: 2, Window: time.Second}, Dialect: d,
		Credentials: []string{"k"}, Origin: t0, Now: func() time.Time { return now },
		Sleep: func(context.Context, time.Duration) {},
	})
	get := func(cred string, entered time.Time) *http.Response {
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("Authorization", "Bearer "+cred)
		if !entered.IsZero() {
			r.Header.Set(EnteredHeader, strconv.FormatInt(entered.UnixNano(), 10))
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Result()
	}
	for i, c := range []struct {
		at     time.Duration
		cred   string
		status int
		retry  string
	}{
		{0, "k", 200, ""},
		{100 * ms, "k", 200, ""},
		{200 * ms, "k", 429, "1"}, // the closure: nobody knew
		{300 * ms, "k", 429, "1"}, // into the closure announced until +1.2 s
		{400 * ms, "other", 401, ""},
		{1100 * ms, "k", 200, ""}, // accepted, though announced closed: the hint rounds up
	} {
		now = t0.Add(c.at)
		resp := get(c.cred, now)
		if resp.StatusCode != c.status || resp.Header.Get("Retry-After") != c.retry {
			t.Fatalf("request %d: %d Retry-After %q, want %d %q", i, resp.StatusCode, resp.Header.Get("Retry-After"), c.status, c.retry)
		}
		if c.status != 401 && resp.Header.Get("Date") != now.Format(http.TimeFormat) {
			t.Fatalf("request %d: Date %q, want the server's clock", i, resp.Header.Get("Date"))
		}
		b, _ := io.ReadAll(resp.Body)
		if c.status == 200 && string(b) != "{\"ok\":true}\n" {
			t.Fatalf("request %d: body %q", i, b)
		}
	}
	want := Counts{Requests: 5, Accepted: 3, Refused: 2, IntoClosed: 1, Closures: 1}
	if got := s.Counts(); got != want {
		t.Errorf("Counts = %+v, want %+v", got, want)
	}
	log := s.Arrivals()
	if len(log) != 5 || log[3].OK || !log[3].Announced || log[2].Announced || !log[4].OK || !log[4].Announced || !log[0].Entered.Equal(t0) {
		t.Errorf("Arrivals = %+v", log)
	}
	s.Restart(t0.Add(2 * time.Second))
	if got := s.Counts(); got != (Counts{}) || len(s.Arrivals()) != 0 {
		t.Errorf("after Restart: %+v, %d arrivals", got, len(s.Arrivals()))
	}
}

// TestServerDelayAndConcurrency: a gcra-delay request is held for its
// Delay, and a concurrency limit counts a request in flight until its
// answer.
func TestServerDelayAndConcurrency(t *testing.T) {
	var slept []time.Duration
	d, _ := DialectNamed("none")
	s := NewServer(Config{
		Quota: Quota{Shape: GCRADelay, Rate: 4, Burst: 1}, Dialect: d, Credentials: []string{"k"},
		Now: func() time.Time { return t0 }, Latency: 10 * ms,
		Sleep: func(_ context.Context, d time.Duration) { slept = append(slept, d) },
	})
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer k")
		s.ServeHTTP(httptest.NewRecorder(), r)
	}
	if want := []time.Duration{10 * ms, 260 * ms, 10 * ms}; len(slept) != 3 || slept[0] != want[0] || slept[1] != want[1] || slept[2] != want[2] {
		t.Errorf("slept %v, want %v", slept, want)
	}
	if a := s.Arrivals(); a[1].Delay != 250*ms || a[2].OK {
		t.Errorf("arrivals %+v", a)
	}

	// Concurrency 1: a request arriving while another sleeps is refused.
	release := make(chan struct{})
	inside := make(chan struct{})
	var first atomic.Bool
	c := NewServer(Config{
		Quota: Quota{Shape: Concurrency, Rate: 1}, Dialect: d, Credentials: []string{"k"},
		Sleep: func(ctx context.Context, _ time.Duration) {
			if first.CompareAndSwap(false, true) { // the first request stays in flight
				inside <- struct{}{}
				<-release
			}
		},
	})
	do := func() int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer k")
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		return w.Code
	}
	firstCode := make(chan int)
	go func() { firstCode <- do() }()
	<-inside
	if got := do(); got != 429 {
		t.Errorf("second request while the first is in flight: %d, want 429", got)
	}
	close(release)
	if got := <-firstCode; got != 200 {
		t.Errorf("first request: %d, want 200", got)
	}
	if got := do(); got != 200 {
		t.Errorf("after the first ended: %d, want 200", got)
	}
}
