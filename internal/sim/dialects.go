package sim

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Dialects lists every dialect. The names are those of the matrix.
var Dialects = []Dialect{
	{Name: "none", Doc: "429 and nothing else: no header, a body that says no when (a reverse proxy's limit_req)"},
	{Name: "retry-after", States: true, Doc: "Retry-After in delta seconds, rounded up", refuse: retryAfterSeconds},
	{Name: "retry-after-date", States: true, Doc: "Retry-After as an HTTP-date (the next whole second at or after the reopening)", refuse: retryAfterDate},
	{Name: "prose", States: true, Doc: `the wait in prose inside a JSON body: "Please try again in 2 seconds." (the article's provider)`, refuse: prose},
	{Name: "window", States: true, Doc: "Retry-After and the prose always the whole window, whatever the wait", Whole: true, refuse: windowHint},
	{Name: "httprate", States: true, Doc: "go-chi/httprate: X-RateLimit-Limit/-Remaining/-Reset (epoch seconds of the window's end) on every response, Retry-After the whole window", Whole: true, headers: httprateHeaders, refuse: retryAfterSeconds},
	{Name: "delta", States: true, Doc: "X-RateLimit-Limit/-Remaining/-Reset (delta seconds, rounded up) on every response; Retry-After and prose on 429 (the example's -headers)", headers: deltaHeaders, refuse: deltaRefusal},
	{Name: "github", Doc: "GitHub's primary limit: x-ratelimit-limit/-remaining/-used/-reset (epoch seconds) on every response, refused with 403", headers: githubHeaders, refuse: githubPrimary(http.StatusForbidden)},
	{Name: "github-429", Doc: "the same, refused with 429", headers: githubHeaders, refuse: githubPrimary(http.StatusTooManyRequests)},
	{Name: "github-secondary", States: true, Doc: "GitHub's secondary limit: a primary budget far from spent on every response, refused with 403 and retry-after", headers: githubSecondaryHeaders, refuse: githubSecondary},
	{Name: "x", Doc: "X (Twitter): x-rate-limit-limit/-remaining/-reset (epoch seconds) on every response", headers: xHeaders, refuse: xRefusal},
	{Name: "discord", States: true, Doc: "Discord: X-RateLimit-Remaining after this request, -Reset (epoch, fractional), -Reset-After (fractional seconds until the next token; 0.000 while tokens remain); JSON retry_after", headers: discordHeaders, refuse: discordRefusal},
	{Name: "until-full", States: true, Doc: "throttled's GCRA: X-RateLimit-Limit/-Remaining/-Reset (delta seconds until the bucket is full) on every response, Retry-After on 429", headers: untilFullHeaders, refuse: retryAfterSeconds},
	{Name: "epoch-floor", Doc: "X-RateLimit-Limit/-Remaining/-Reset: the window's end in epoch seconds ROUNDED DOWN; no Retry-After", headers: epochFloorHeaders},
	{Name: "ietf", Doc: `IETF draft RateLimit-Policy "default";q=N;w=W and RateLimit "default";r=R;t=T on every response`, headers: ietfHeaders},
	{Name: "reset-ms", Doc: "X-RateLimit-Limit/-Remaining/-Reset with the reset as delta MILLISECONDS under the name that usually carries seconds", headers: resetMsHeaders},
}

// DialectNamed returns the dialect of that name.
func DialectNamed(name string) (Dialect, bool) {
	for _, d := range Dialects {
		if d.Name == name {
			return d, true
		}
	}
	return Dialect{}, false
}

func retryAfterSeconds(d Dialect, h http.Header, r Reply) (int, []byte) {
	h.Set("Retry-After", strconv.Itoa(d.HintSeconds(r)))
	return http.StatusTooManyRequests, plainBody()
}

// retryAfterDate writes the reopening as an HTTP-date: seconds only, so
// the next whole second at or after it.
func retryAfterDate(d Dialect, h http.Header, r Reply) (int, []byte) {
	at := time.Unix(epochCeil(r.Now.Add(d.Hint(r))), 0)
	h.Set("Retry-After", at.UTC().Format(http.TimeFormat))
	return http.StatusTooManyRequests, plainBody()
}

func prose(d Dialect, _ http.Header, r Reply) (int, []byte) {
	return http.StatusTooManyRequests, ErrorJSON("rate_limited", RefusalMessage(d.HintSeconds(r)))
}

func windowHint(d Dialect, h http.Header, r Reply) (int, []byte) {
	h.Set("Retry-After", strconv.Itoa(d.HintSeconds(r)))
	return prose(d, h, r)
}

func deltaRefusal(d Dialect, h http.Header, r Reply) (int, []byte) {
	h.Set("Retry-After", strconv.Itoa(d.HintSeconds(r)))
	return prose(d, h, r)
}

// limitHeaders writes Limit and Remaining under the names of prefix.
func limitHeaders(h http.Header, prefix string, s State) {
	h.Set(prefix+"-Limit", strconv.Itoa(s.Limit))
	h.Set(prefix+"-Remaining", strconv.Itoa(s.Remaining))
}

func httprateHeaders(h http.Header, r Reply) {
	limitHeaders(h, "X-RateLimit", r.State)
	h.Set("X-RateLimit-Reset", strconv.FormatInt(epochCeil(r.Now.Add(r.State.Full)), 10))
}

func deltaHeaders(h http.Header, r Reply) {
	limitHeaders(h, "X-RateLimit", r.State)
	h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(r.State.Reset), 10))
}

func githubHeaders(h http.Header, r Reply) {
	s := r.State
	h.Set("X-Ratelimit-Limit", strconv.Itoa(s.Limit))
	h.Set("X-Ratelimit-Remaining", strconv.Itoa(s.Remaining))
	h.Set("X-Ratelimit-Used", strconv.Itoa(s.Limit-s.Remaining))
	h.Set("X-Ratelimit-Reset", strconv.FormatInt(epochCeil(r.Now.Add(s.Full)), 10))
	h.Set("X-Ratelimit-Resource", "core")
}

// githubBody is GitHub's error body, as go-github reads it.
func githubBody(msg, doc string) []byte {
	return mustJSON(struct {
		Message string `json:"message"`
		Doc     string `json:"documentation_url"`
	}{msg, doc})
}

func githubPrimary(status int) func(Dialect, http.Header, Reply) (int, []byte) {
	return func(_ Dialect, _ http.Header, r Reply) (int, []byte) {
		return status, githubBody("API rate limit exceeded for user ID 1.",
			"https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting")
	}
}

// githubPrimaryBudget is the primary budget the secondary dialect
// advertises: an hour of 5000, far from spent.
const githubPrimaryBudget = 5000

func githubSecondaryHeaders(h http.Header, r Reply) {
	used := r.State.Limit - r.State.Remaining
	h.Set("X-Ratelimit-Limit", strconv.Itoa(githubPrimaryBudget))
	h.Set("X-Ratelimit-Remaining", strconv.Itoa(githubPrimaryBudget-1-used))
	h.Set("X-Ratelimit-Used", strconv.Itoa(1+used))
	h.Set("X-Ratelimit-Reset", strconv.FormatInt(r.Now.Add(time.Hour).Unix(), 10))
	h.Set("X-Ratelimit-Resource", "core")
}

func githubSecondary(d Dialect, h http.Header, r Reply) (int, []byte) {
	h.Set("Retry-After", strconv.Itoa(d.HintSeconds(r)))
	return http.StatusForbidden, githubBody("You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
		"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits")
}

func xHeaders(h http.Header, r Reply) {
	limitHeaders(h, "X-Rate-Limit", r.State)
	h.Set("X-Rate-Limit-Reset", strconv.FormatInt(epochCeil(r.Now.Add(r.State.Full)), 10))
}

func xRefusal(Dialect, http.Header, Reply) (int, []byte) {
	return http.StatusTooManyRequests, mustJSON(struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
		Type   string `json:"type"`
		Status int    `json:"status"`
	}{"Too Many Requests", "Too Many Requests", "about:blank", http.StatusTooManyRequests})
}

// discordResetAfter is Reset-After: until the next token, 0 while tokens
// remain.
func discordResetAfter(s State) time.Duration {
	if s.Remaining > 0 {
		return 0
	}
	return s.Reset
}

func discordHeaders(h http.Header, r Reply) {
	limitHeaders(h, "X-RateLimit", r.State)
	after := discordResetAfter(r.State)
	at := r.Now.Add(time.Duration(ceilMillis(after)) * time.Millisecond)
	h.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	h.Set("X-RateLimit-Reset-After", fraction(after))
	h.Set("X-RateLimit-Bucket", "0ba1f4e2sim")
}

func discordRefusal(d Dialect, h http.Header, r Reply) (int, []byte) {
	h.Set("Retry-After", strconv.Itoa(d.HintSeconds(r)))
	h.Set("X-RateLimit-Scope", "user")
	return http.StatusTooManyRequests, mustJSON(struct {
		Message    string  `json:"message"`
		RetryAfter float64 `json:"retry_after"`
		Global     bool    `json:"global"`
	}{"You are being rate limited.", roundMillis(d.Hint(r)), false})
}

func untilFullHeaders(h http.Header, r Reply) {
	limitHeaders(h, "X-RateLimit", r.State)
	h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(r.State.Full), 10))
}

func epochFloorHeaders(h http.Header, r Reply) {
	limitHeaders(h, "X-RateLimit", r.State)
	h.Set("X-RateLimit-Reset", strconv.FormatInt(r.Now.Add(r.State.Full).Unix(), 10))
}

func ietfHeaders(h http.Header, r Reply) {
	s := r.State
	policy := fmt.Sprintf(`"default";q=%d`, s.Limit)
	if s.Window > 0 {
		policy += fmt.Sprintf(";w=%d", ceilSeconds(s.Window))
	}
	h.Set("RateLimit-Policy", policy)
	h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, s.Remaining, ceilSeconds(s.Reset)))
}

func resetMsHeaders(h http.Header, r Reply) {
	limitHeaders(h, "X-RateLimit", r.State)
	h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilMillis(r.State.Reset), 10))
}
