package hint_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/hint"
)

// tenYears is the longest hint the parsers accept.
const tenYears = 10 * 365 * 24 * time.Hour

// t0 is the reference instant of the header tests: the response's Date
// when a row sets one, else the now passed to FromAt.
var t0 = time.Date(2025, time.March, 4, 5, 6, 7, 0, time.UTC)

func httpDate(t time.Time) string { return t.UTC().Format(http.TimeFormat) }

// textRows are the accepted prose shapes (ok) and the decoys (!ok). The
// rows are the contract of FromText: add one for every shape you widen
// the grammar for.
var textRows = []struct {
	text string
	want time.Duration // 0: no hint
}{
	// Accepted shapes.
	{"Rate limit exceeded. Please try again in 15 seconds.", 15 * time.Second},
	{"try again in 1 second", time.Second},
	{"retry in 10.5s", 11 * time.Second},
	{"Retry after 30 seconds", 30 * time.Second},
	{"please wait 20 seconds", 20 * time.Second},
	{"available again after 2 minutes", 2 * time.Minute},
	{"try again in 1 minute", time.Minute},
	{"try again in 1m30s", 90 * time.Second},
	{"try again in 500ms", 500 * time.Millisecond},
	{"Too many requests, retry after 3 sec", 3 * time.Second},
	{"Try again in 2 hours", 2 * time.Hour},
	{"TRY AGAIN IN 5 SECONDS", 5 * time.Second},
	{"try again in 0.2 seconds", time.Second},
	{"try again in 1.5 minutes", 90 * time.Second},
	{"try again in 1.5ms", 2 * time.Millisecond},
	{"Please try again in 20ms.", 20 * time.Millisecond},
	{"Please try again in 1s500ms.", 1500 * time.Millisecond},
	{"Rate limit reached for gpt-4 on tokens per min (TPM): Limit 10000, Used 9000, Requested 2000. Please try again in 6.5s. Visit https://platform.openai.com/account/rate-limits to learn more.", 7 * time.Second},
	{"Quota exceeded for metric generate_content_free_tier_requests. Please retry in 29.516595124s.", 30 * time.Second},
	{"try again in 1 minute and 30 seconds", 90 * time.Second},
	{"try again in 1 minute, 30 seconds", 90 * time.Second},
	{"try again in 1h 2m 3s", time.Hour + 2*time.Minute + 3*time.Second},
	{"wait for at least 5 seconds", 5 * time.Second},
	{"Retry-After: 12 seconds", 12 * time.Second},
	{"Retry after: 4s", 4 * time.Second},
	{"Your quota resets in 45 seconds", 45 * time.Second},
	{"please try again 30 seconds later", 30 * time.Second},
	{"try again in about 10 seconds", 10 * time.Second},
	{"try again in 5 s", 5 * time.Second},
	{"try again in 2 mins.", 2 * time.Minute},
	{"try again in 3 hrs", 3 * time.Hour},
	{"try again in 1 day", 24 * time.Hour},
	{"try again in 1 second(s)", time.Second},
	{"retrying in 8s", 8 * time.Second},
	{"2 calls per second allowed; try again in 3 seconds", 3 * time.Second},
	{"try again in 0 seconds, or retry in 4 seconds", 4 * time.Second},
	{"try again in 999999999999 hours, or retry in 2s", 2 * time.Second},
	{"try again in 87600 hours", tenYears},
	{"try again in 0.000000000001 seconds", time.Second},

	// Decoys: rates, windows, counts, no number, no unit, bad numbers.
	{"2 calls per second", 0},
	{"100 requests per 60 seconds", 0},
	{"limit of 100 requests in 60 seconds", 0},
	{"Retry limit: 100 requests in 60 seconds", 0},
	{"after 100 requests in 60 seconds you are throttled", 0},
	{"quota resets every 60 seconds", 0},
	{"The window is 60 seconds", 0},
	{"You have 3 retries left", 0},
	{"try again later", 0},
	{"Please wait.", 0},
	{"retry", 0},
	{"wait", 0},
	{"", 0},
	{"try again in -5 seconds", 0},
	{"try again in NaN seconds", 0},
	{"try again in Inf seconds", 0},
	{"try again in 0 seconds", 0},
	{"try again in 0.000 seconds", 0},
	{"try again in 30", 0},
	{"retry after 30", 0},
	{"try again in 1e3 seconds", 0},
	{"try again in 1,5 seconds", 0},
	{"try again in .5 seconds", 0},
	{"try again in 10:30", 0},
	{"Retry after 2024-01-01", 0},
	{"try again in 5 sessions", 0},
	{"try again in 2 months", 0},
	{"try again in 2 weeks", 0},
	{"try again in a minute", 0},
	{"try again in 87601 hours", 0},
	{"try again in 87600 hours 1 second", 0},
	{"try again in 1000000000000 seconds", 0},
	{"try again in " + strings.Repeat("9", 100_000) + " seconds", 0},
	{"try again in 1." + strings.Repeat("0", 100_000) + "1 seconds", 0},
	{"autoretry in 5 seconds", 0},
}

func TestFromText(t *testing.T) {
	for _, tt := range textRows {
		got, ok := hint.FromText(tt.text)
		if got != tt.want || ok != (tt.want > 0) {
			t.Errorf("FromText(%.80q) = %v, %v; want %v, %v", tt.text, got, ok, tt.want, tt.want > 0)
		}
	}
}

func TestFromTextReadsOnlyMaxBody(t *testing.T) {
	pad := strings.Repeat(" ", hint.MaxBody)
	if d, ok := hint.FromText(pad + "try again in 5 seconds"); ok {
		t.Errorf("hint past MaxBody: got %v, want none", d)
	}
	if d, ok := hint.FromText(pad[:hint.MaxBody-30] + "try again in 5 seconds"); d != 5*time.Second || !ok {
		t.Errorf("hint inside MaxBody: got %v, %v; want 5s, true", d, ok)
	}
}

// row is one response: header fields in order (name, value, name, value,
// ...; a name may repeat), a body and the now passed to FromAt.
type row struct {
	name   string
	header []string
	body   string
	now    time.Time // zero: t0
	want   time.Duration
}

func (r row) response() *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(r.header); i += 2 {
		h.Add(r.header[i], r.header[i+1])
	}
	return &http.Response{StatusCode: http.StatusTooManyRequests, Header: h}
}

func run(t *testing.T, rows []row) {
	t.Helper()
	for _, r := range rows {
		now := r.now
		if now.IsZero() {
			now = t0
		}
		var body []byte
		if r.body != "" {
			body = []byte(r.body)
		}
		got, ok := hint.FromAt(r.response(), body, now)
		if got != r.want || ok != (r.want > 0) {
			t.Errorf("%s: FromAt = %v, %v; want %v, %v", r.name, got, ok, r.want, r.want > 0)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	in30 := httpDate(t0.Add(30 * time.Second))
	run(t, []row{
		{name: "delay-seconds", header: []string{"Retry-After", "120"}, want: 120 * time.Second},
		{name: "delay-seconds with OWS", header: []string{"Retry-After", " 7\t"}, want: 7 * time.Second},
		{name: "fraction rounds up", header: []string{"Retry-After", "1.5"}, want: 2 * time.Second},
		{name: "small fraction rounds up to 1s", header: []string{"Retry-After", "0.2"}, want: time.Second},
		{name: "leading zeros", header: []string{"Retry-After", "007"}, want: 7 * time.Second},
		{name: "ten years", header: []string{"Retry-After", "315360000"}, want: tenYears},
		{name: "zero", header: []string{"Retry-After", "0"}},
		{name: "negative", header: []string{"Retry-After", "-5"}},
		{name: "minus zero", header: []string{"Retry-After", "-0"}},
		{name: "plus sign", header: []string{"Retry-After", "+5"}},
		{name: "exponent", header: []string{"Retry-After", "5e2"}},
		{name: "1e400", header: []string{"Retry-After", "1e400"}},
		{name: "hex", header: []string{"Retry-After", "0x10"}},
		{name: "NaN", header: []string{"Retry-After", "NaN"}},
		{name: "Inf", header: []string{"Retry-After", "Inf"}},
		{name: "empty", header: []string{"Retry-After", ""}},
		{name: "unit", header: []string{"Retry-After", "5 seconds"}},
		{name: "trailing dot", header: []string{"Retry-After", "5."}},
		{name: "leading dot", header: []string{"Retry-After", ".5"}},
		{name: "over ten years", header: []string{"Retry-After", "315360001"}},
		{name: "overflow", header: []string{"Retry-After", "99999999999999999999999"}},
		{name: "100,000 digits", header: []string{"Retry-After", strings.Repeat("9", 100_000)}},
		{name: "IMF-fixdate against now", header: []string{"Retry-After", in30}, want: 30 * time.Second},
		{name: "RFC 850 date", header: []string{"Retry-After", t0.Add(30 * time.Second).Format("Monday, 02-Jan-06 15:04:05 GMT")}, want: 30 * time.Second},
		{name: "asctime date", header: []string{"Retry-After", t0.Add(30 * time.Second).Format(time.ANSIC)}, want: 30 * time.Second},
		{name: "date against Date header, local clock ahead", header: []string{"Date", httpDate(t0), "Retry-After", in30}, now: t0.Add(100 * time.Second), want: 30 * time.Second},
		{name: "date against Date header, local clock behind", header: []string{"Date", httpDate(t0.Add(20 * time.Second)), "Retry-After", in30}, want: 10 * time.Second},
		{name: "invalid Date header falls back to now", header: []string{"Date", "yesterday", "Retry-After", in30}, want: 30 * time.Second},
		{name: "date against sub-second now rounds up", header: []string{"Retry-After", in30}, now: t0.Add(300 * time.Millisecond), want: 30 * time.Second},
		{name: "past date", header: []string{"Retry-After", httpDate(t0.Add(-10 * time.Second))}},
		{name: "date equal to Date header", header: []string{"Date", in30, "Retry-After", in30}},
		{name: "date past relative to Date header", header: []string{"Date", httpDate(t0.Add(60 * time.Second)), "Retry-After", in30}},
		{name: "year 9999", header: []string{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"}},
		{name: "second value when the first is garbage", header: []string{"Retry-After", "soon", "Retry-After", "12"}, want: 12 * time.Second},
	})
}

func TestHeaders(t *testing.T) {
	run(t, []row{
		// retry-after-ms (OpenAI, Azure).
		{name: "retry-after-ms", header: []string{"retry-after-ms", "1500"}, want: 1500 * time.Millisecond},
		{name: "retry-after-ms fraction rounds up to ms", header: []string{"retry-after-ms", "250.2"}, want: 251 * time.Millisecond},
		{name: "retry-after-ms below 1ms", header: []string{"retry-after-ms", "0.5"}, want: time.Millisecond},
		{name: "retry-after-ms zero", header: []string{"retry-after-ms", "0"}},
		{name: "retry-after-ms negative", header: []string{"retry-after-ms", "-1"}},
		{name: "x-ms-retry-after-ms", header: []string{"x-ms-retry-after-ms", "300"}, want: 300 * time.Millisecond},

		// RateLimit, draft 08 and later: the t of the exhausted item.
		{name: "RateLimit string item", header: []string{"RateLimit", `"default";r=0;t=10`}, want: 10 * time.Second},
		{name: "RateLimit token item", header: []string{"RateLimit", `default;r=0;t=10`}, want: 10 * time.Second},
		{name: "RateLimit spaces after ;", header: []string{"RateLimit", `"default"; r=0; t=10`}, want: 10 * time.Second},
		{name: "RateLimit exhausted item wins", header: []string{"RateLimit", `"day";r=100;t=3600, "minute";r=0;t=10`}, want: 10 * time.Second},
		{name: "RateLimit largest t of exhausted items", header: []string{"RateLimit", `"a";r=0;t=10, "b";r=0;t=30`}, want: 30 * time.Second},
		{name: "RateLimit smallest t when none exhausted", header: []string{"RateLimit", `"a";r=5;t=10, "b";r=7;t=30`}, want: 10 * time.Second},
		{name: "RateLimit over two field lines", header: []string{"RateLimit", `"a";r=5;t=60`, "RateLimit", `"b";r=0;t=20`}, want: 20 * time.Second},
		{name: "RateLimit escaped quote in name", header: []string{"RateLimit", `"a\"b,c";r=0;t=5`}, want: 5 * time.Second},
		{name: "RateLimit comma in quoted name", header: []string{"RateLimit", `"weird,name";r=0;t=12`}, want: 12 * time.Second},
		{name: "RateLimit dictionary (draft 07)", header: []string{"RateLimit", `limit=100, remaining=0, reset=10`}, want: 10 * time.Second},
		{name: "RateLimit exhausted without t", header: []string{"RateLimit", `"a";r=0, "b";r=3;t=60`}},
		{name: "RateLimit t=0", header: []string{"RateLimit", `"default";r=0;t=0`}},
		{name: "RateLimit negative t", header: []string{"RateLimit", `"default";r=0;t=-5`}},
		{name: "RateLimit garbage", header: []string{"RateLimit", `;;;==,,"`}},
		{name: "RateLimit unterminated string", header: []string{"RateLimit", `"abc\`}},
		{name: "RateLimit-Reset delta", header: []string{"RateLimit-Reset", "10"}, want: 10 * time.Second},
		{name: "RateLimit-Reset epoch seconds (GitLab)", header: []string{"RateLimit-Reset", fmt.Sprint(t0.Unix() + 45)}, want: 45 * time.Second},

		// X-RateLimit-Reset-After (Discord) and X-RateLimit-Reset.
		{name: "X-RateLimit-Reset-After", header: []string{"X-RateLimit-Reset-After", "1.2"}, want: 2 * time.Second},
		{name: "X-RateLimit-Reset delta", header: []string{"X-RateLimit-Reset", "30"}, want: 30 * time.Second},
		// Above an hour of "seconds", a delta is milliseconds (maxSaneResetSeconds).
		{name: "X-RateLimit-Reset an hour", header: []string{"X-RateLimit-Reset", "3600"}, want: time.Hour},
		{name: "X-RateLimit-Reset ms above an hour", header: []string{"X-RateLimit-Reset", "3601"}, want: 3601 * time.Millisecond},
		{name: "X-RateLimit-Reset ms of a minute's window", header: []string{"X-RateLimit-Reset", "59987"}, want: 59987 * time.Millisecond},
		{name: "X-RateLimit-Reset largest number below 1e9: ms", header: []string{"X-RateLimit-Reset", "999999999"}, want: 999999999 * time.Millisecond},
		{name: "RateLimit-Reset ms", header: []string{"RateLimit-Reset", "4200"}, want: 4200 * time.Millisecond},
		{name: "X-RateLimit-Reset fraction above an hour stays seconds", header: []string{"X-RateLimit-Reset", "3600.5"}, want: time.Hour + time.Second},
		{name: "X-RateLimit-Reset epoch seconds", header: []string{"X-RateLimit-Reset", fmt.Sprint(t0.Unix() + 60)}, want: 60 * time.Second},
		{name: "X-RateLimit-Reset epoch seconds with fraction", header: []string{"X-RateLimit-Reset", fmt.Sprint(t0.Unix()+60) + ".25"}, want: 61 * time.Second},
		{name: "X-RateLimit-Reset epoch ms", header: []string{"X-RateLimit-Reset", fmt.Sprint(t0.UnixMilli() + 1500)}, want: 1500 * time.Millisecond},
		{name: "X-RateLimit-Reset epoch ms against sub-ms now", header: []string{"X-RateLimit-Reset", fmt.Sprint(t0.UnixMilli() + 1500)}, now: t0.Add(100 * time.Microsecond), want: 1500 * time.Millisecond},
		{name: "X-RateLimit-Reset epoch against Date header", header: []string{"Date", httpDate(t0), "X-RateLimit-Reset", fmt.Sprint(t0.Unix() + 60)}, now: t0.Add(time.Hour), want: 60 * time.Second},
		{name: "X-RateLimit-Reset epoch against sub-second now", header: []string{"X-RateLimit-Reset", fmt.Sprint(t0.Unix() + 60)}, now: t0.Add(300 * time.Millisecond), want: 60 * time.Second},
		{name: "X-RateLimit-Reset epoch past", header: []string{"X-RateLimit-Reset", fmt.Sprint(t0.Unix() - 1)}},
		{name: "X-RateLimit-Reset epoch ms 1 s past", header: []string{"X-RateLimit-Reset", fmt.Sprint(t0.UnixMilli() - 1000)}},
		// A reset that has just passed (rounded down to the second, or
		// equal to Date) is a wait of at most a second, not no hint.
		{name: "X-RateLimit-Reset epoch equal to now", header: []string{"X-RateLimit-Reset", fmt.Sprint(t0.Unix())}, want: time.Second},
		{name: "X-RateLimit-Reset epoch ms just past", header: []string{"X-RateLimit-Reset", fmt.Sprint(t0.UnixMilli() - 1)}, want: time.Second},
		{name: "X-RateLimit-Reset epoch equal to Date", header: []string{"Date", t0.Add(time.Hour).Format(http.TimeFormat), "X-RateLimit-Reset", fmt.Sprint(t0.Add(time.Hour).Unix())}, want: time.Second},
		{name: "X-Rate-Limit-Reset epoch equal to now", header: []string{"X-Rate-Limit-Reset", fmt.Sprint(t0.Unix())}, want: time.Second},
		{name: "X-RateLimit-Reset exponent", header: []string{"X-RateLimit-Reset", "1e12"}},
		{name: "X-RateLimit-Reset epoch seconds past year 2262", header: []string{"X-RateLimit-Reset", "999999999999"}},
		{name: "X-RateLimit-Reset overflowing epoch", header: []string{"X-RateLimit-Reset", "99999999999999999999"}},
		{name: "X-RateLimit-Reset 64 digits", header: []string{"X-RateLimit-Reset", strings.Repeat("9", 64)}},

		// Field names in any case, as a hand-built map may hold them.
		{name: "field name case", header: []string{"retry-after", "9"}, want: 9 * time.Second},
	})
}

func TestNonCanonicalKey(t *testing.T) {
	resp := &http.Response{Header: http.Header{"retry-after": {"9"}, "x-ratelimit-reset": {"30"}}}
	if d, ok := hint.FromAt(resp, nil, t0); d != 9*time.Second || !ok {
		t.Errorf("non-canonical Retry-After: got %v, %v; want 9s, true", d, ok)
	}
}

func TestPrecedence(t *testing.T) {
	run(t, []row{
		{name: "Retry-After beats retry-after-ms and body", header: []string{"Retry-After", "5", "retry-after-ms", "9000"}, body: `{"retry_after": 30}`, want: 5 * time.Second},
		{name: "Retry-After beats every header", header: []string{"Retry-After", "5", "RateLimit", `"d";r=0;t=60`, "X-RateLimit-Reset-After", "60", "X-RateLimit-Reset", "60"}, want: 5 * time.Second},
		{name: "Retry-After: 0 lets retry-after-ms speak", header: []string{"Retry-After", "0", "retry-after-ms", "1500"}, want: 1500 * time.Millisecond},
		{name: "garbage Retry-After lets retry-after-ms speak", header: []string{"Retry-After", "soon", "retry-after-ms", "1500"}, want: 1500 * time.Millisecond},
		{name: "past Retry-After lets the body speak", header: []string{"Retry-After", httpDate(t0.Add(-10 * time.Second))}, body: `{"retry_after": 7}`, want: 7 * time.Second},
		{name: "retry-after-ms beats RateLimit", header: []string{"retry-after-ms", "1500", "RateLimit", `"d";r=0;t=10`}, want: 1500 * time.Millisecond},
		{name: "RateLimit beats X-RateLimit-Reset-After", header: []string{"RateLimit", `"d";r=0;t=10`, "X-RateLimit-Reset-After", "3"}, want: 10 * time.Second},
		{name: "RateLimit without t lets the next speak", header: []string{"RateLimit", `"d";r=0`, "X-RateLimit-Reset-After", "4"}, want: 4 * time.Second},
		{name: "RateLimit-Reset beats X-RateLimit-Reset", header: []string{"RateLimit-Reset", "20", "X-RateLimit-Reset", "3"}, want: 20 * time.Second},
		{name: "X-RateLimit-Reset-After beats X-RateLimit-Reset", header: []string{"X-RateLimit-Reset-After", "1.2", "X-RateLimit-Reset", "30"}, want: 2 * time.Second},
		{name: "headers beat the body", header: []string{"X-RateLimit-Reset", "30"}, body: `{"retry_after": 5}`, want: 30 * time.Second},
		{name: "JSON field beats prose", body: `{"retry_after": 5, "message": "try again in 60 seconds"}`, want: 5 * time.Second},
		{name: "Gemini: retryDelay beats the message", body: `{"error":{"code":429,"message":"Quota exceeded. Please retry in 29.516595124s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"29s"}]}}`, want: 29 * time.Second},
	})
}

// nest wraps the JSON value v in depth objects {"a": ...}.
func nest(depth int, v string) string {
	return strings.Repeat(`{"a":`, depth) + v + strings.Repeat("}", depth)
}

func TestBody(t *testing.T) {
	pad := strings.Repeat("x", hint.MaxBody)
	run(t, []row{
		// JSON fields.
		{name: "retry_after", body: `{"retry_after": 5}`, want: 5 * time.Second},
		{name: "retryAfter fraction", body: `{"retryAfter": 2.5}`, want: 3 * time.Second},
		{name: "retry_after_seconds", body: `{"retry_after_seconds": 7}`, want: 7 * time.Second},
		{name: "Retry-After key", body: `{"Retry-After": 4}`, want: 4 * time.Second},
		{name: "retry_after_ms", body: `{"retry_after_ms": 1500}`, want: 1500 * time.Millisecond},
		{name: "retryAfterMs", body: `{"retryAfterMs": 250}`, want: 250 * time.Millisecond},
		{name: "retryAfterMs fraction", body: `{"retryAfterMs": 0.1}`, want: time.Millisecond},
		{name: "retryAfterMs below 1ns", body: `{"retryAfterMs": 1e-7}`, want: time.Millisecond},
		{name: "retry_after_ms numeric string", body: `{"retry_after_ms": "1500"}`, want: 1500 * time.Millisecond},
		{name: "nested error", body: `{"error":{"retry_after":5}}`, want: 5 * time.Second},
		{name: "numeric string", body: `{"retry_after": "5"}`, want: 5 * time.Second},
		{name: "duration string", body: `{"retry_after": "30s"}`, want: 30 * time.Second},
		{name: "exponent", body: `{"retry_after": 6.457e1}`, want: 65 * time.Second},
		{name: "Discord", body: `{"message": "You are being rate limited.", "retry_after": 64.57, "global": false}`, want: 65 * time.Second},
		{name: "Google RetryInfo", body: `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"10s"}]}}`, want: 10 * time.Second},
		{name: "retryDelay 1.5s", body: `{"retryDelay":"1.5s"}`, want: 2 * time.Second},
		{name: "retryDelay 0.250s", body: `{"retryDelay":"0.250s"}`, want: time.Second},
		{name: "longest field wins", body: `{"retry_after": 5, "error": {"retry_after_ms": 8000}}`, want: 8 * time.Second},
		{name: "depth 8", body: nest(8, `{"retry_after": 5}`), want: 5 * time.Second},
		{name: "depth 9", body: nest(9, `{"retry_after": 5}`)},
		{name: "negative", body: `{"retry_after": -5}`},
		{name: "zero", body: `{"retry_after": 0}`},
		{name: "minus zero", body: `{"retry_after": -0}`},
		{name: "minus zero string", body: `{"retry_after": "-0"}`},
		{name: "null", body: `{"retry_after": null}`},
		{name: "bool", body: `{"retry_after": true}`},
		{name: "word", body: `{"retry_after": "soon"}`},
		{name: "NaN string", body: `{"retryAfter": "NaN"}`},
		{name: "1e400", body: `{"retry_after": 1e400}`},
		{name: "1e-400 rounds up to 1s", body: `{"retry_after": 1e-400}`, want: time.Second},
		{name: "1e99999999999", body: `{"retry_after": 1e99999999999}`},
		{name: "ten years and one second", body: `{"retry_after": 315360001}`},
		{name: "array value", body: `{"retry_after": [5]}`},
		{name: "retryDelay number", body: `{"retryDelay": 10}`},
		{name: "retryDelay negative", body: `{"retryDelay": "-1s"}`},
		{name: "window fields", body: `{"limit": 100, "window": 60, "remaining": 0}`},

		// Prose in JSON string values.
		{name: "OpenAI message", body: `{"error":{"message":"Rate limit reached for gpt-4 in organization org-x on tokens per min (TPM): Limit 10000, Used 9000, Requested 2000. Please try again in 6.5s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`, want: 7 * time.Second},
		{name: "longest prose wins", body: `{"message":"try again in 5 seconds","detail":"retry after 8 seconds"}`, want: 8 * time.Second},
		{name: "prose decoy", body: `{"message":"limit of 100 requests in 60 seconds"}`},
		{name: "top-level string", body: `"try again in 5 seconds"`, want: 5 * time.Second},
		{name: "top-level number", body: `5`},
		{name: "prose at depth 9", body: nest(9, `"try again in 5 seconds"`)},

		// Text bodies.
		{name: "text", body: "Too Many Requests. Retry after 3 sec", want: 3 * time.Second},
		{name: "HTML", body: "<html><body><h1>429</h1><p>Try again in 2 minutes.</p></body></html>", want: 2 * time.Minute},
		{name: "invalid JSON read as text", body: `{"message": "try again in 9 seconds"`, want: 9 * time.Second},
		{name: "invalid JSON field is not prose", body: `{"retry_after": 5`},
		{name: "JSON cut at MaxBody read as text", body: `{"message":"try again in 9 seconds","pad":"` + pad + `"}`, want: 9 * time.Second},
		{name: "field after MaxBody", body: `{"pad":"` + pad + `","retry_after":5}`},
		{name: "text after MaxBody", body: pad + " try again in 5 seconds"},
		{name: "whitespace body", body: " \n\t "},
		{name: "deep nesting", body: strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)},
	})
}

func TestNilInputs(t *testing.T) {
	body := []byte(`{"retry_after": 5}`)
	for _, tt := range []struct {
		name string
		resp *http.Response
		body []byte
		want time.Duration
	}{
		{"nil resp, nil body", nil, nil, 0},
		{"nil resp with body", nil, body, 5 * time.Second},
		{"nil Header with body", &http.Response{StatusCode: 429}, body, 5 * time.Second},
		{"nil Header, no body", &http.Response{StatusCode: 429}, nil, 0},
		{"header without body", &http.Response{Header: http.Header{"Retry-After": {"3"}}}, nil, 3 * time.Second},
		{"empty header, empty body", &http.Response{Header: http.Header{}}, []byte{}, 0},
	} {
		got, ok := hint.FromAt(tt.resp, tt.body, t0)
		if got != tt.want || ok != (tt.want > 0) {
			t.Errorf("%s: got %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.want > 0)
		}
	}
}

func TestFromUsesNow(t *testing.T) {
	resp := &http.Response{Header: http.Header{}}
	resp.Header.Set("Retry-After", httpDate(time.Now().Add(time.Hour)))
	d, ok := hint.From(resp, nil)
	if !ok || d <= 58*time.Minute || d > time.Hour {
		t.Errorf("From(date in one hour) = %v, %v; want about 1h", d, ok)
	}
}

// check is the invariant of every parser: a hint is positive and at most
// ten years, and "no hint" is 0.
func check(t *testing.T, d time.Duration, ok bool) {
	t.Helper()
	if ok && (d <= 0 || d > tenYears) {
		t.Fatalf("hint %v out of (0, 10 years]", d)
	}
	if !ok && d != 0 {
		t.Fatalf("no hint, but duration %v", d)
	}
}

func FuzzFromText(f *testing.F) {
	for _, tt := range textRows {
		if len(tt.text) < 1000 {
			f.Add(tt.text)
		}
	}
	for _, tt := range shapeTextRows {
		f.Add(tt.text)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := hint.FromText(s)
		check(t, d, ok)
	})
}

func FuzzFrom(f *testing.F) {
	date := httpDate(t0)
	f.Add("120", "", "", "", "", date, []byte(nil))
	f.Add(httpDate(t0.Add(30*time.Second)), "1500", `"d";r=0;t=10`, "1.2", "30", date, []byte(`{"retry_after": 5}`))
	f.Add("0", "0.5", `limit=100, remaining=0, reset=10`, "", fmt.Sprint(t0.UnixMilli()+1500), "", []byte(`{"error":{"details":[{"retryDelay":"0.250s"}]}}`))
	f.Add("", "", "", "", fmt.Sprint(t0.Unix()+60), "yesterday", []byte("Too many requests, retry after 3 sec"))
	for _, tt := range textRows {
		if len(tt.text) < 1000 {
			f.Add("", "", "", "", "", "", []byte(`{"message":"`+tt.text+`"}`))
		}
	}
	f.Fuzz(func(t *testing.T, retryAfter, retryAfterMs, rateLimit, resetAfter, reset, date string, body []byte) {
		h := http.Header{}
		for _, kv := range [][2]string{
			{"Retry-After", retryAfter}, {"Retry-After-Ms", retryAfterMs}, {"RateLimit", rateLimit},
			{"RateLimit-Reset", resetAfter}, {"X-RateLimit-Reset-After", resetAfter},
			{"X-RateLimit-Reset", reset}, {"Date", date},
		} {
			if kv[1] != "" {
				h.Set(kv[0], kv[1])
			}
		}
		d, ok := hint.FromAt(&http.Response{StatusCode: 429, Header: h}, body, t0)
		check(t, d, ok)
		d, ok = hint.FromAt(nil, body, t0)
		check(t, d, ok)
	})
}
