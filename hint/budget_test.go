package hint_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/hint"
)

// budgetRow is one response and the budget it advertises (ok false: none).
type budgetRow struct {
	name   string
	header []string // name, value, name, value, ...
	now    time.Time
	want   hint.Budget
	ok     bool
}

func runBudget(t *testing.T, rows []budgetRow) {
	t.Helper()
	for _, r := range rows {
		h := http.Header{}
		for i := 0; i+1 < len(r.header); i += 2 {
			h.Add(r.header[i], r.header[i+1])
		}
		now := r.now
		if now.IsZero() {
			now = t0
		}
		got, ok := hint.BudgetFrom(&http.Response{StatusCode: http.StatusOK, Header: h}, now)
		if got != r.want || ok != r.ok {
			t.Errorf("%s: BudgetFrom = %+v, %v; want %+v, %v", r.name, got, ok, r.want, r.ok)
		}
	}
}

func TestBudgetProviders(t *testing.T) {
	s := time.Second
	runBudget(t, []budgetRow{
		// GitHub REST: epoch-seconds reset, used and resource beside.
		{name: "GitHub", header: []string{"x-ratelimit-limit", "5000", "x-ratelimit-remaining", "4999", "x-ratelimit-reset", epoch(3000 * s), "x-ratelimit-used", "1", "x-ratelimit-resource", "core"},
			want: hint.Budget{Limit: 5000, Remaining: 4999, Reset: 3000 * s}, ok: true},
		{name: "GitHub used without remaining", header: []string{"x-ratelimit-limit", "60", "x-ratelimit-used", "58", "x-ratelimit-reset", epoch(30 * s)},
			want: hint.Budget{Limit: 60, Remaining: 2, Reset: 30 * s}, ok: true},
		// X (Twitter) and Okta: hyphenated, epoch seconds, against Date.
		{name: "X", header: []string{"Date", httpDate(t0), "x-rate-limit-limit", "900", "x-rate-limit-remaining", "899", "x-rate-limit-reset", epoch(900 * s)}, now: t0.Add(time.Hour),
			want: hint.Budget{Limit: 900, Remaining: 899, Reset: 900 * s}, ok: true},
		{name: "Okta", header: []string{"X-Rate-Limit-Limit", "600", "X-Rate-Limit-Remaining", "0", "X-Rate-Limit-Reset", epoch(45 * s)},
			want: hint.Budget{Limit: 600, Remaining: 0, Reset: 45 * s}, ok: true},
		// Discord: Reset-After (fractional seconds, kept to the millisecond:
		// a budget's reset is as precise as written) preferred to the epoch
		// with fractions; bucket and scope are not counts.
		{name: "Discord", header: []string{"X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "1", "X-RateLimit-Reset", epoch(time.Hour) + ".123", "X-RateLimit-Reset-After", "1.2", "X-RateLimit-Bucket", "abcd1234", "X-RateLimit-Scope", "user"},
			want: hint.Budget{Limit: 5, Remaining: 1, Reset: 1200 * time.Millisecond}, ok: true},
		{name: "Discord epoch with fraction", header: []string{"X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(60*s) + ".25"},
			want: hint.Budget{Limit: 5, Remaining: 0, Reset: 61 * s}, ok: true},
		{name: "epoch milliseconds", header: []string{"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", epochMs(1500 * time.Millisecond)},
			want: hint.Budget{Remaining: 3, Reset: 1500 * time.Millisecond}, ok: true},
		{name: "delta seconds", header: []string{"X-RateLimit-Limit", "40", "X-RateLimit-Remaining", "12", "X-RateLimit-Reset", "4"},
			want: hint.Budget{Limit: 40, Remaining: 12, Reset: 4 * s, ResetUnit: hint.ResetSeconds}, ok: true},
		// IETF, drafts 08 and later: structured items, paired by name.
		{name: "IETF structured", header: []string{"RateLimit", `"default";r=50;t=30`, "RateLimit-Policy", `"default";q=100;w=60`},
			want: hint.Budget{Limit: 100, Remaining: 50, Reset: 30 * s, Window: 60 * s}, ok: true},
		{name: "IETF several policies: the most constraining", header: []string{"RateLimit", `"day";r=900;t=3600, "burst";r=3;t=2`, "RateLimit-Policy", `"day";q=1000;w=86400, "burst";q=10;w=1`},
			want: hint.Budget{Limit: 10, Remaining: 3, Reset: 2 * s, Window: s}, ok: true},
		{name: "IETF equal remaining: the longest reset", header: []string{"RateLimit", `"a";r=0;t=5, "b";r=0;t=50`},
			want: hint.Budget{Remaining: 0, Reset: 50 * s}, ok: true},
		// IETF, draft 07 and older.
		{name: "IETF dictionary with policy", header: []string{"RateLimit", "limit=100, remaining=50, reset=30", "RateLimit-Policy", "100;w=60"},
			want: hint.Budget{Limit: 100, Remaining: 50, Reset: 30 * s, Window: 60 * s}, ok: true},
		{name: "IETF separate fields", header: []string{"RateLimit-Limit", "10, 10;w=1, 1000;w=3600", "RateLimit-Remaining", "4", "RateLimit-Reset", "1"},
			want: hint.Budget{Limit: 10, Remaining: 4, Reset: s, Window: s, ResetUnit: hint.ResetSeconds}, ok: true},
		// Shopify REST: used/limit, no reset.
		{name: "Shopify", header: []string{"X-Shopify-Shop-Api-Call-Limit", "32/40"},
			want: hint.Budget{Limit: 40, Remaining: 8}, ok: true},
		// OpenAI: requests and tokens; the smaller remaining wins.
		{name: "OpenAI", header: []string{"x-ratelimit-limit-requests", "5000", "x-ratelimit-remaining-requests", "4999", "x-ratelimit-reset-requests", "12ms",
			"x-ratelimit-limit-tokens", "160000", "x-ratelimit-remaining-tokens", "159976", "x-ratelimit-reset-tokens", "6m0s"},
			want: hint.Budget{Limit: 5000, Remaining: 4999, Reset: 12 * time.Millisecond}, ok: true},
		// Contentful: the one reset applies to the per-second quota.
		{name: "Contentful", header: []string{"X-Contentful-RateLimit-Second-Limit", "55", "X-Contentful-RateLimit-Second-Remaining", "0", "X-Contentful-RateLimit-Hour-Limit", "36000", "X-Contentful-RateLimit-Hour-Remaining", "35000", "X-Contentful-RateLimit-Reset", "1"},
			want: hint.Budget{Limit: 55, Remaining: 0, Reset: s, ResetUnit: hint.ResetSeconds}, ok: true},
		// HubSpot: a window in milliseconds.
		{name: "HubSpot", header: []string{"X-HubSpot-RateLimit-Max", "100", "X-HubSpot-RateLimit-Remaining", "97", "X-HubSpot-RateLimit-Interval-Milliseconds", "10000", "X-HubSpot-RateLimit-Daily", "250000", "X-HubSpot-RateLimit-Daily-Remaining", "240000"},
			want: hint.Budget{Limit: 100, Remaining: 97, Window: 10 * s}, ok: true},
		// Zendesk: the account limit and an endpoint dictionary.
		{name: "Zendesk", header: []string{"X-Rate-Limit", "700", "X-Rate-Limit-Remaining", "699", "Zendesk-RateLimit-Tickets-Index", "total=100; remaining=99; resets=41"},
			want: hint.Budget{Limit: 100, Remaining: 99, Reset: 41 * s}, ok: true},
		// Anthropic: RFC 3339 resets.
		{name: "Anthropic", header: []string{"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49", "anthropic-ratelimit-requests-reset", t0.Add(20 * s).Format(time.RFC3339)},
			want: hint.Budget{Limit: 50, Remaining: 49, Reset: 20 * s}, ok: true},
		// Azure Resource Manager: a remaining count only.
		{name: "Azure ARM", header: []string{"x-ms-ratelimit-remaining-subscription-reads", "11999"},
			want: hint.Budget{Remaining: 11999}, ok: true},
	})
}

// TestBudgetResetUnit: a whole number under a name of seconds may be
// milliseconds (ResetSeconds up to an hour, ResetMillis above it); every
// other reading states its unit.
func TestBudgetResetUnit(t *testing.T) {
	ms := time.Millisecond
	rows := []budgetRow{
		{name: "seconds, at most an hour", header: []string{"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "1947"},
			want: hint.Budget{Remaining: 3, Reset: 1947 * time.Second, ResetUnit: hint.ResetSeconds}, ok: true},
		{name: "an hour exactly", header: []string{"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "3600"},
			want: hint.Budget{Remaining: 3, Reset: time.Hour, ResetUnit: hint.ResetSeconds}, ok: true},
		{name: "above an hour: milliseconds", header: []string{"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "19987"},
			want: hint.Budget{Remaining: 3, Reset: 19987 * ms, ResetUnit: hint.ResetMillis}, ok: true},
		{name: "a name of milliseconds", header: []string{"X-RateLimit-Remaining", "3", "X-RateLimit-Reset-Ms", "1947"},
			want: hint.Budget{Remaining: 3, Reset: 1947 * ms}, ok: true},
		{name: "a fraction", header: []string{"X-RateLimit-Remaining", "3", "X-RateLimit-Reset-After", "1.5"},
			want: hint.Budget{Remaining: 3, Reset: 1500 * ms}, ok: true},
		{name: "epoch seconds", header: []string{"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", fmt.Sprint(t0.Unix() + 30)},
			want: hint.Budget{Remaining: 3, Reset: 30 * time.Second}, ok: true},
		{name: "a structured field", header: []string{"RateLimit", `"default";r=3;t=30`},
			want: hint.Budget{Remaining: 3, Reset: 30 * time.Second}, ok: true},
	}
	runBudget(t, rows)
}

func TestBudgetDecoysAndAbsurdValues(t *testing.T) {
	s := time.Second
	runBudget(t, []budgetRow{
		{name: "nothing", header: nil},
		{name: "a limit alone", header: []string{"X-RateLimit-Limit", "60"}},
		{name: "a policy alone", header: []string{"RateLimit-Policy", "100;w=60"}},
		{name: "a structured policy alone", header: []string{"RateLimit-Policy", `"default";q=100;w=60`}},
		{name: "a reset alone", header: []string{"X-RateLimit-Reset", "30"}},
		{name: "Retry-After is not a budget", header: []string{"Retry-After", "30"}},
		{name: "Binance weight", header: []string{"X-MBX-USED-WEIGHT-1M", "1200"}},
		{name: "Meta percentages", header: []string{"X-App-Usage", `{"call_count":28,"total_time":25,"total_cputime":25}`}},
		{name: "negative remaining (Azure OpenAI -1)", header: []string{"x-ratelimit-limit-tokens", "-1", "x-ratelimit-remaining-tokens", "-1", "x-ratelimit-reset-tokens", "0"}},
		{name: "fractional remaining", header: []string{"X-RateLimit-Remaining", "4.5"}},
		{name: "19-digit remaining", header: []string{"X-RateLimit-Remaining", "1000000000000000000"}},
		{name: "word remaining", header: []string{"X-RateLimit-Remaining", "plenty"}},
		{name: "Shopify garbage", header: []string{"X-Shopify-Shop-Api-Call-Limit", "41/40"}},

		// Absurd resets are unknown, the count stays.
		{name: "reset over ten years", header: []string{"X-RateLimit-Remaining", "5", "X-RateLimit-Reset-After", "315360001"}, want: hint.Budget{Remaining: 5}, ok: true},
		{name: "reset above an hour: milliseconds", header: []string{"X-RateLimit-Remaining", "5", "X-RateLimit-Reset", "4200"}, want: hint.Budget{Remaining: 5, Reset: 4200 * time.Millisecond, ResetUnit: hint.ResetMillis}, ok: true},
		{name: "reset equal to Date", header: []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(0)}, want: hint.Budget{Remaining: 0, Reset: time.Second}, ok: true},
		{name: "reset in the past", header: []string{"X-RateLimit-Remaining", "5", "X-RateLimit-Reset", epoch(-s)}, want: hint.Budget{Remaining: 5}, ok: true},
		{name: "negative reset", header: []string{"X-RateLimit-Remaining", "5", "X-RateLimit-Reset", "-30"}, want: hint.Budget{Remaining: 5}, ok: true},
		{name: "reset 1e12 with exponent", header: []string{"X-RateLimit-Remaining", "5", "X-RateLimit-Reset", "1e12"}, want: hint.Budget{Remaining: 5}, ok: true},
		{name: "epoch past year 2262", header: []string{"X-RateLimit-Remaining", "5", "X-RateLimit-Reset", strings.Repeat("9", 20)}, want: hint.Budget{Remaining: 5}, ok: true},
		{name: "window over ten years", header: []string{"RateLimit", `"d";r=5;t=1`, "RateLimit-Policy", `"d";q=10;w=315360001`}, want: hint.Budget{Limit: 10, Remaining: 5, Reset: s}, ok: true},
		{name: "remaining above limit drops the limit", header: []string{"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "50"}, want: hint.Budget{Remaining: 50}, ok: true},
		{name: "zero limit is unknown", header: []string{"X-RateLimit-Limit", "0", "X-RateLimit-Remaining", "0"}, want: hint.Budget{Remaining: 0}, ok: true},
		{name: "first value wins", header: []string{"X-RateLimit-Remaining", "garbage", "X-RateLimit-Remaining", "7", "X-RateLimit-Remaining", "9"}, want: hint.Budget{Remaining: 7}, ok: true},
	})
	if b, ok := hint.BudgetFrom(nil, t0); ok || b != (hint.Budget{}) {
		t.Errorf("BudgetFrom(nil) = %+v, %v; want none", b, ok)
	}
	if b, ok := hint.BudgetFrom(&http.Response{}, t0); ok || b != (hint.Budget{}) {
		t.Errorf("BudgetFrom(nil Header) = %+v, %v; want none", b, ok)
	}
}

// checkBudget is the invariant of BudgetFrom: counts are never negative,
// a limit is never below the remaining count, durations are in
// [0, 10 years], and no budget is the zero Budget.
func checkBudget(t *testing.T, b hint.Budget, ok bool) {
	t.Helper()
	if !ok {
		if b != (hint.Budget{}) {
			t.Fatalf("no budget, but %+v", b)
		}
		return
	}
	if b.Remaining < 0 || b.Limit < 0 || b.Limit != 0 && b.Limit < b.Remaining {
		t.Fatalf("counts out of range: %+v", b)
	}
	if b.Reset < 0 || b.Reset > tenYears || b.Window < 0 || b.Window > tenYears {
		t.Fatalf("durations out of range: %+v", b)
	}
}

func FuzzBudgetFrom(f *testing.F) {
	f.Add("X-RateLimit-Remaining", "4999", "X-RateLimit-Reset", epoch(time.Hour), "RateLimit", `"default";r=50;t=30`, httpDate(t0))
	f.Add("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6m0s", "RateLimit-Policy", `"default";q=100;w=60`, "")
	f.Add("X-Shopify-Shop-Api-Call-Limit", "32/40", "X-Contentful-RateLimit-Reset", "1", "RateLimit", "limit=100, remaining=50, reset=30", "garbage")
	f.Add("Zendesk-RateLimit-Tickets-Index", "total=100; remaining=99; resets=41", "x-ms-user-quota-resets-after", "00:00:03", "RateLimit-Limit", "10, 10;w=1", "")
	f.Add("X-Rate-Limit-Remaining", "-1", "X-RateLimit-Reset", "2025-03-04T05:08Z", "RateLimit", `"a";r=0;t=5, "b";r=0;t=50`, "")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2, n3, v3, date string) {
		h := http.Header{}
		for _, kv := range [][2]string{{n1, v1}, {n2, v2}, {n3, v3}, {"Date", date}} {
			h[kv[0]] = append(h[kv[0]], kv[1])
		}
		b, ok := hint.BudgetFrom(&http.Response{Header: h}, t0)
		checkBudget(t, b, ok)
		d, ok := hint.FromAt(&http.Response{Header: h}, nil, t0)
		check(t, d, ok)
	})
}

func ExampleBudgetFrom() {
	// A 200 from GitHub: the budget is advertised before it is spent.
	now := time.Date(2025, time.March, 4, 5, 6, 7, 0, time.UTC)
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{
		"Date":                  {now.Format(http.TimeFormat)},
		"X-Ratelimit-Limit":     {"5000"},
		"X-Ratelimit-Remaining": {"12"},
		"X-Ratelimit-Reset":     {fmt.Sprint(now.Add(90 * time.Second).Unix())},
		"X-Ratelimit-Used":      {"4988"},
	}}
	b, ok := hint.BudgetFrom(resp, now)
	fmt.Printf("%+v %v\n", b, ok)

	// The IETF fields: the most constraining of two policies.
	resp.Header = http.Header{
		"Ratelimit":        {`"hour";r=900;t=1800, "second";r=2;t=1`},
		"Ratelimit-Policy": {`"hour";q=1000;w=3600, "second";q=10;w=1`},
	}
	b, ok = hint.BudgetFrom(resp, now)
	fmt.Printf("%+v %v\n", b, ok)
	// Output:
	// {Limit:5000 Remaining:12 Reset:1m30s ResetUnit:stated Window:0s} true
	// {Limit:10 Remaining:2 Reset:1s ResetUnit:stated Window:1s} true
}
