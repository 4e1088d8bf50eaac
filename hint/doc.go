// Package hint reads what a provider says about its quota: how long a
// refused caller should wait (From, FromAt, FromText), and the budget it
// advertises on any response (BudgetFrom).
//
// The accepted shapes are part of the integration protocol with the
// providers: they are hand-written and tested shape by shape, with the
// provider each mimics and the decoys that must stay decoys (rates, counts,
// windows and quota totals are not waits). Widening them is a protocol
// change; add a test for every new shape.
//
// # Retry hints
//
// FromAt tries these sources in order; the first that yields a positive
// hint wins:
//
//	Retry-After              delay-seconds "120" (a fraction "1.5" is
//	                         accepted leniently), or an HTTP-date in any RFC
//	                         9110 form, also with "UTC" for "GMT"
//	retry-after-ms           milliseconds, fraction allowed (OpenAI, Azure)
//	x-ms-retry-after-ms      the same (Azure)
//	RateLimit                draft-ietf-httpapi-ratelimit-headers, list form
//	                         `"default";r=0;t=10`: the largest t of the items
//	                         with r=0 when any item has r=0, otherwise the
//	                         smallest t; dictionary form `reset=10` (draft 07)
//	RateLimit-Reset          older drafts: delta seconds, or a reset value as
//	                         for X-RateLimit-Reset
//	X-RateLimit-Reset-After  delta seconds, fraction allowed (Discord)
//	X-RateLimit-Reset        >= 1e12: Unix epoch milliseconds; >= 1e9: Unix
//	                         epoch seconds (GitHub); smaller: delta seconds,
//	                         or, for a whole number above 3600 (no sane
//	                         delta in seconds), delta milliseconds; an
//	                         epoch or instant equal to Date or less than a
//	                         second before it (a reset rounded down) is a
//	                         wait of a second;
//	                         "6m0s", "20ms": a duration; an ISO 8601 instant
//	                         (Atlassian "2024-07-22T06:23Z", Vimeo) or an
//	                         HTTP-date
//	the rate-limit family    every other field named with "ratelimit",
//	                         "rate-limit" or "quota" and a reset word:
//	                         X-Rate-Limit-Reset
//	                         (X, Okta), X-<Vendor>-RateLimit-Reset
//	                         (Contentful, Brevo's x-sib-), -Reset-After and
//	                         X-RateLimit-Retry-After (deltas), a qualified
//	                         x-ratelimit-reset-requests / -tokens (OpenAI,
//	                         Groq: "6m0s") or anthropic-ratelimit-*-reset
//	                         (RFC 3339), -Ms / -Millis names (milliseconds),
//	                         Zendesk-RateLimit-<endpoint> `resets=41`,
//	                         x-ms-user-quota-resets-after "00:00:03" (Azure
//	                         Resource Graph). A reset
//	                         pairs with the remaining count of the same quota
//	                         (x-ratelimit-remaining-requests): the wait is the
//	                         longest reset among the quotas with nothing
//	                         remaining, else the shortest reset. When several
//	                         quotas disagree and none is known spent, the
//	                         refusal does not say which quota refused: the
//	                         body speaks first, and this shortest reset is
//	                         used only when the body gives no hint.
//	Meta usage fields        X-Business-Use-Case-Usage
//	                         estimated_time_to_regain_access (minutes; the
//	                         longest entry), X-Ad-Account-Usage
//	                         reset_time_duration (seconds) when
//	                         acc_id_util_pct has reached 100
//	body, JSON fields        anywhere up to depth 8: retry_after, retryAfter,
//	                         retry_after_seconds (seconds; a number, a numeric
//	                         string or "10s"), retry_after_ms, retryAfterMs
//	                         (milliseconds), retryDelay (protobuf duration
//	                         "10s", "0.250s", as in Google's RetryInfo). Key
//	                         case, '_' and '-' do not matter. If several
//	                         fields carry a hint, the longest wins.
//	body, prose              every JSON string value (the longest hint wins),
//	                         or, when the body prefix is not valid JSON, the
//	                         prefix: the durations FromText reads, and
//	                         absolute instants after a word of waiting ("try
//	                         after 2024-07-22T06:23:37Z", "IP banned until
//	                         1532118492680" in epoch milliseconds, Binance);
//	                         the phrase that starts first wins
//
// Instants and epochs are measured against the response's Date header when
// it is valid, else against the now given to FromAt. A hint is positive,
// never shortened by rounding, and at most 10 years.
//
// # Budgets
//
// BudgetFrom reads the same family on any response, refused or not, for
// what remains of the quota and when it refills: see Budget.
package hint
