package hint_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/quotagate/quotagate/hint"
)

// The rows below are the shapes of issue 9 part 3: what real providers send
// that an earlier grammar read wrong, each with the provider it mimics, and
// beside each rule the decoys it must leave alone. The reference instant is
// t0 (Tue, 04 Mar 2025 05:06:07 UTC).

func epoch(d time.Duration) string   { return fmt.Sprint(t0.Add(d).Unix()) }
func epochMs(d time.Duration) string { return fmt.Sprint(t0.Add(d).UnixMilli()) }

func TestShapesHyphenatedRateLimit(t *testing.T) {
	run(t, []row{
		// X (Twitter) API v2 429: x-rate-limit-* with an epoch-seconds reset.
		{name: "X", header: []string{"X-Rate-Limit-Limit", "900", "X-Rate-Limit-Remaining", "0", "X-Rate-Limit-Reset", epoch(120 * time.Second)}, want: 120 * time.Second},
		// Okta 429: the same names, epoch seconds, measured against Date.
		{name: "Okta against Date", header: []string{"Date", httpDate(t0), "X-Rate-Limit-Limit", "600", "X-Rate-Limit-Remaining", "0", "X-Rate-Limit-Reset", epoch(45 * time.Second)}, now: t0.Add(time.Hour), want: 45 * time.Second},
		// Lowercase as an HTTP/2 client map may hold it.
		{name: "lowercase delta", header: []string{"x-rate-limit-reset", "30"}, want: 30 * time.Second},
		{name: "X-Rate-Limit-Reset-After", header: []string{"X-Rate-Limit-Reset-After", "2.5"}, want: 3 * time.Second},

		// Decoys: a limit and a remaining count are not waits.
		{name: "decoy: X-Rate-Limit-Limit alone", header: []string{"X-Rate-Limit-Limit", "60"}},
		{name: "decoy: X-Rate-Limit-Remaining alone", header: []string{"X-Rate-Limit-Remaining", "0"}},
		{name: "decoy: Zendesk X-Rate-Limit", header: []string{"X-Rate-Limit", "700", "X-Rate-Limit-Remaining", "0"}},
		{name: "decoy: X-Rate-Limit-Reset past", header: []string{"X-Rate-Limit-Reset", epoch(-time.Second)}},
	})
}

func TestShapesVendorResets(t *testing.T) {
	run(t, []row{
		// Contentful CMA/CDA 429: one reset (seconds until the next
		// available request) for the -Second- and -Hour- quotas.
		{name: "Contentful", header: []string{"X-Contentful-RateLimit-Second-Limit", "55", "X-Contentful-RateLimit-Second-Remaining", "0", "X-Contentful-RateLimit-Reset", "1"}, want: time.Second},
		// Brevo (Sendinblue): x-sib-ratelimit-reset in seconds.
		{name: "Brevo", header: []string{"x-sib-ratelimit-limit", "10", "x-sib-ratelimit-remaining", "0", "x-sib-ratelimit-reset", "27"}, want: 27 * time.Second},
		// Zendesk ticket list endpoints: a dictionary value.
		{name: "Zendesk endpoint dictionary", header: []string{"Zendesk-RateLimit-Tickets-Index", "total=100; remaining=0; resets=41"}, want: 41 * time.Second},
		// MailerLite classic: X-RateLimit-Retry-After in seconds.
		{name: "MailerLite", header: []string{"X-RateLimit-Retry-After", "23"}, want: 23 * time.Second},
		// A vendor's Reset-After.
		{name: "vendor reset-after", header: []string{"X-Acme-RateLimit-Reset-After", "0.4"}, want: time.Second},
		// Anthropic: anthropic-ratelimit-<quota>-reset in RFC 3339.
		{name: "Anthropic", header: []string{"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", t0.Add(30 * time.Second).Format(time.RFC3339),
			"anthropic-ratelimit-tokens-remaining", "20000", "anthropic-ratelimit-tokens-reset", t0.Add(2 * time.Second).Format(time.RFC3339)}, want: 30 * time.Second},
		// Azure Resource Graph: x-ms-user-quota-resets-after in hh:mm:ss.
		{name: "Azure Resource Graph", header: []string{"x-ms-user-quota-remaining", "0", "x-ms-user-quota-resets-after", "00:00:03"}, want: 3 * time.Second},
		{name: "Azure Resource Graph minutes", header: []string{"x-ms-user-quota-resets-after", "00:01:30.5"}, want: 91 * time.Second},

		// Decoys: counts, limits, windows under vendor names.
		{name: "decoy: HubSpot window", header: []string{"X-HubSpot-RateLimit-Interval-Milliseconds", "10000", "X-HubSpot-RateLimit-Max", "100", "X-HubSpot-RateLimit-Remaining", "0"}},
		{name: "decoy: HubSpot daily", header: []string{"X-HubSpot-RateLimit-Daily", "250000", "X-HubSpot-RateLimit-Daily-Remaining", "0", "X-HubSpot-RateLimit-Secondly", "10"}},
		{name: "decoy: Azure ARM remaining", header: []string{"x-ms-ratelimit-remaining-subscription-reads", "0"}},
		{name: "decoy: Contentful limits only", header: []string{"X-Contentful-RateLimit-Second-Limit", "55", "X-Contentful-RateLimit-Hour-Limit", "36000"}},
		{name: "decoy: Zendesk dictionary without resets", header: []string{"Zendesk-RateLimit-Tickets-Index", "total=100; remaining=0"}},
		{name: "decoy: Binance used weight", header: []string{"X-MBX-USED-WEIGHT-1M", "1200"}},
		{name: "decoy: GitHub used and resource", header: []string{"x-ratelimit-used", "60", "x-ratelimit-resource", "core"}},
		{name: "decoy: Spring replenish rate", header: []string{"X-RateLimit-Replenish-Rate", "10", "X-RateLimit-Burst-Capacity", "20"}},
		{name: "decoy: quota reset zero", header: []string{"x-ms-user-quota-resets-after", "00:00:00"}},
		{name: "decoy: minutes over 59", header: []string{"x-ms-user-quota-resets-after", "00:75:00"}},
		{name: "decoy: vendor reset negative", header: []string{"X-Acme-RateLimit-Reset", "-5"}},
	})
}

func TestShapesQualifiedAndMillisecondResets(t *testing.T) {
	run(t, []row{
		// A non-standard name counted in milliseconds.
		{name: "X-RateLimit-Reset-Ms", header: []string{"X-RateLimit-Reset-Ms", "1500"}, want: 1500 * time.Millisecond},
		{name: "X-RateLimit-Reset-Ms epoch", header: []string{"X-RateLimit-Reset-Ms", epochMs(2500 * time.Millisecond)}, want: 2500 * time.Millisecond},
		{name: "vendor -Millis", header: []string{"X-Acme-RateLimit-Reset-Millis", "250"}, want: 250 * time.Millisecond},
		// OpenAI: the quota with nothing remaining gives the wait.
		{name: "OpenAI requests spent", header: []string{"x-ratelimit-limit-requests", "500", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-limit-tokens", "30000", "x-ratelimit-remaining-tokens", "5000", "x-ratelimit-reset-tokens", "6m0s"}, want: time.Second},
		{name: "OpenAI tokens spent", header: []string{"x-ratelimit-remaining-requests", "499", "x-ratelimit-reset-requests", "120ms",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s"}, want: 6 * time.Minute},
		{name: "OpenAI 20ms", header: []string{"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20ms"}, want: 20 * time.Millisecond},
		// Groq: the same names, fractional durations round up.
		{name: "Groq", header: []string{"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "7.66s", "x-ratelimit-reset-requests", "2m59.56s"}, want: 8 * time.Second},
		{name: "Groq minutes and fraction", header: []string{"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "2m59.56s"}, want: 3 * time.Minute},
		// Nothing known spent and the quotas disagree: the body speaks first.
		{name: "OpenAI ambiguous, body speaks", header: []string{"x-ratelimit-remaining-requests", "4999", "x-ratelimit-reset-requests", "12ms",
			"x-ratelimit-remaining-tokens", "1000", "x-ratelimit-reset-tokens", "6m0s"},
			body: `{"error":{"message":"Rate limit reached for gpt-4 on tokens per min (TPM): Limit 10000, Used 9000, Requested 2000. Please try again in 6.5s.","code":"rate_limit_exceeded"}}`, want: 7 * time.Second},
		{name: "OpenAI ambiguous, no body: the shortest", header: []string{"x-ratelimit-remaining-requests", "4999", "x-ratelimit-reset-requests", "12ms",
			"x-ratelimit-remaining-tokens", "1000", "x-ratelimit-reset-tokens", "6m0s"}, want: 12 * time.Millisecond},
		{name: "one quota, body ignored", header: []string{"x-ratelimit-remaining-requests", "4", "x-ratelimit-reset-requests", "2s"}, body: `{"message":"try again in 9 seconds"}`, want: 2 * time.Second},

		// Decoys.
		{name: "decoy: OpenAI limits and remaining only", header: []string{"x-ratelimit-limit-requests", "500", "x-ratelimit-remaining-requests", "0"}},
		{name: "decoy: Azure OpenAI -1 and 0", header: []string{"x-ratelimit-limit-tokens", "-1", "x-ratelimit-remaining-tokens", "-1", "x-ratelimit-reset-tokens", "0"}},
		{name: "decoy: duration with a sign", header: []string{"x-ratelimit-reset-requests", "-1s"}},
		{name: "decoy: duration with words", header: []string{"x-ratelimit-reset-requests", "1 minute or so"}},
		{name: "decoy: 5 durations", header: []string{"x-ratelimit-reset-requests", "1h1m1s1ms1h"}},
		{name: "decoy: ms reset over ten years", header: []string{"X-RateLimit-Reset-Ms", "315360000001"}},
	})
}

func TestShapesInstantResets(t *testing.T) {
	run(t, []row{
		// Atlassian Jira/Confluence Cloud: ISO 8601 to the minute.
		{name: "Atlassian", header: []string{"Date", httpDate(t0), "X-RateLimit-Reset", "2025-03-04T05:08Z"}, want: time.Minute + 53*time.Second},
		// Vimeo: ISO 8601 with an offset.
		{name: "Vimeo", header: []string{"X-RateLimit-Reset", "2025-03-04T07:07:07+02:00"}, want: time.Minute},
		{name: "ISO with fraction", header: []string{"X-RateLimit-Reset", "2025-03-04T05:06:08.250Z"}, want: 1250 * time.Millisecond},
		{name: "ISO with space and UTC", header: []string{"RateLimit-Reset", "2025-03-04 05:06:37 UTC"}, want: 30 * time.Second},
		// lemlist: JavaScript's Date.toString.
		{name: "lemlist", header: []string{"X-RateLimit-Reset", "Tue Mar 04 2025 06:07:07 GMT+0100 (Central European Standard Time)"}, want: time.Minute},
		{name: "HTTP-date reset", header: []string{"X-RateLimit-Reset", httpDate(t0.Add(40 * time.Second))}, want: 40 * time.Second},
		// A Date header written with UTC for GMT.
		{name: "Date with UTC", header: []string{"Date", "Tue, 04 Mar 2025 05:06:07 UTC", "Retry-After", httpDate(t0.Add(30 * time.Second))}, now: t0.Add(time.Hour), want: 30 * time.Second},
		{name: "Retry-After with UTC", header: []string{"Retry-After", "Tue, 04 Mar 2025 05:06:37 UTC"}, want: 30 * time.Second},
		{name: "RFC 850 with UTC", header: []string{"Retry-After", "Tuesday, 04-Mar-25 05:06:37 UTC"}, want: 30 * time.Second},

		// Decoys.
		{name: "decoy: ISO without zone", header: []string{"X-RateLimit-Reset", "2025-03-04T05:08:00"}},
		{name: "decoy: ISO date only", header: []string{"X-RateLimit-Reset", "2025-03-04"}},
		{name: "decoy: ISO past", header: []string{"X-RateLimit-Reset", "2025-03-04T05:06:00Z"}},
		{name: "decoy: ISO in 11 years", header: []string{"X-RateLimit-Reset", "2036-03-04T05:06:07Z"}},
		{name: "decoy: Date with EST", header: []string{"Date", "Tue, 04 Mar 2025 05:06:07 EST", "Retry-After", httpDate(t0.Add(30 * time.Second))}, now: t0.Add(10 * time.Second), want: 20 * time.Second},
	})
}

func TestShapesMetaUsage(t *testing.T) {
	run(t, []row{
		// Meta Graph API (Facebook, Instagram, WhatsApp): minutes.
		{name: "X-Business-Use-Case-Usage", header: []string{"X-Business-Use-Case-Usage", `{"123":[{"type":"pages","call_count":100,"total_cputime":25,"total_time":25,"estimated_time_to_regain_access":5}]}`}, want: 5 * time.Minute},
		{name: "several use cases: the longest", header: []string{"X-Business-Use-Case-Usage", `{"1":[{"type":"pages","call_count":100,"estimated_time_to_regain_access":2}],"2":[{"type":"ads_management","call_count":40,"estimated_time_to_regain_access":0},{"type":"instagram","estimated_time_to_regain_access":7}]}`}, want: 7 * time.Minute},
		{name: "X-Ad-Account-Usage at 100%", header: []string{"X-Ad-Account-Usage", `{"acc_id_util_pct":100,"reset_time_duration":120,"ads_api_access_tier":"standard_access"}`}, want: 2 * time.Minute},
		{name: "Retry-After beats the usage header", header: []string{"Retry-After", "9", "X-Business-Use-Case-Usage", `{"1":[{"estimated_time_to_regain_access":5}]}`}, want: 9 * time.Second},
		{name: "the usage header beats the body", header: []string{"X-Business-Use-Case-Usage", `{"1":[{"estimated_time_to_regain_access":5}]}`}, body: `{"error":{"message":"(#80001) There have been too many calls to this Page account. Wait a bit and try again.","code":80001}}`, want: 5 * time.Minute},

		// Decoys: percentages are not waits.
		{name: "decoy: not throttled", header: []string{"X-Business-Use-Case-Usage", `{"123":[{"type":"pages","call_count":28,"total_cputime":25,"total_time":25,"estimated_time_to_regain_access":0}]}`}},
		{name: "decoy: X-App-Usage", header: []string{"X-App-Usage", `{"call_count":100,"total_time":25,"total_cputime":25}`}},
		{name: "decoy: ad account below 100%", header: []string{"X-Ad-Account-Usage", `{"acc_id_util_pct":9.67,"reset_time_duration":120}`}},
		{name: "decoy: ads insights throttle", header: []string{"X-FB-Ads-Insights-Throttle", `{"app_id_util_pct":100,"acc_id_util_pct":10}`}},
		{name: "decoy: usage not JSON", header: []string{"X-Business-Use-Case-Usage", `estimated_time_to_regain_access=5`}},
		{name: "decoy: negative wait", header: []string{"X-Business-Use-Case-Usage", `{"1":[{"estimated_time_to_regain_access":-5}]}`}},
		{name: "decoy: string wait", header: []string{"X-Business-Use-Case-Usage", `{"1":[{"estimated_time_to_regain_access":"5"}]}`}},
	})
}

// prose rows: the shapes FromText and the bodies read.
var shapeTextRows = []struct {
	text string
	want time.Duration
}{
	// Quoted numbers.
	{"Request was throttled. Please retry after '372' seconds.", 372 * time.Second},
	{`Request was throttled. Expected available in "372" seconds.`, 372 * time.Second},
	{"Rate limit exceeded. Try again in ‘15’ seconds", 15 * time.Second},
	{`retry after "5s"`, 5 * time.Second},
	// Django REST framework's throttle message.
	{"Request was throttled. Expected available in 372 seconds.", 372 * time.Second},
	// "retried" as a lead-in.
	{"The request can be retried in 14 seconds.", 14 * time.Second},
	{"This operation may be retried after 3 minutes", 3 * time.Minute},

	// Decoys.
	{"you made '372' requests", 0},
	{"limit 100 requests per 60 seconds", 0},
	{"The request was retried 3 times", 0},
	{"retried '5' times", 0},
	{"retry after '30'", 0},
	// FromText has no clock: instants are not read by it.
	{"try after 2024-07-22T06:23:37Z", 0},
	{"banned until 1532118492680", 0},
}

func TestShapesText(t *testing.T) {
	for _, tt := range shapeTextRows {
		got, ok := hint.FromText(tt.text)
		if got != tt.want || ok != (tt.want > 0) {
			t.Errorf("FromText(%q) = %v, %v; want %v, %v", tt.text, got, ok, tt.want, tt.want > 0)
		}
	}
}

func TestShapesProseInstants(t *testing.T) {
	in := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339) }
	run(t, []row{
		{name: "try after ISO", body: "Too many requests, try after " + in(90*time.Second), want: 90 * time.Second},
		{name: "try again at ISO in JSON", body: `{"error":"rate limited, try again at ` + in(30*time.Second) + `"}`, want: 30 * time.Second},
		{name: "available after ISO with space and UTC", body: "Quota exhausted; available after 2025-03-04 05:07:07 UTC.", want: time.Minute},
		{name: "ISO against Date, not now", header: []string{"Date", httpDate(t0)}, body: "try after " + in(90*time.Second), now: t0.Add(time.Hour), want: 90 * time.Second},
		{name: "ISO against now without Date", body: "try after " + in(90*time.Second), now: t0.Add(30 * time.Second), want: time.Minute},
		// Binance 418/429: "IP banned until <epoch ms>".
		{name: "Binance", body: `{"code":-1003,"msg":"Way too much request weight used; IP banned until ` + epochMs(45*time.Second) + `. Please use the websocket for live updates to avoid bans."}`, want: 45 * time.Second},
		{name: "banned until epoch seconds", body: "You are banned until " + epoch(10*time.Minute), want: 10 * time.Minute},
		{name: "the first phrase wins: duration first", body: "try again in 5 seconds (not after " + in(time.Hour) + ")", want: 5 * time.Second},
		{name: "the first phrase wins: instant first", body: "try after " + in(time.Hour) + ", or wait 5 seconds", want: time.Hour},

		// Decoys.
		{name: "decoy: valid until", body: "Your token is valid until " + in(time.Hour)},
		{name: "decoy: created at", body: "Request created at " + in(time.Hour)},
		{name: "decoy: past instant", body: "try after " + in(-time.Minute)},
		{name: "decoy: instant without zone", body: "try after 2025-03-04T05:08:00"},
		{name: "decoy: banned until a date only", body: "banned until 2025-03-05"},
		{name: "decoy: epoch after 'after'", body: "retry after " + epoch(time.Minute)},
		{name: "decoy: count after until", body: "throttled until 1000 requests"},
		{name: "decoy: epoch with 14 digits", body: "banned until 15321184926801"},
		{name: "decoy: epoch past", body: "banned until " + epochMs(-time.Second)},
	})
}
