package hint

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// Budget is what a provider advertised, on one response, about the quota
// closest to running out: how much of it remains and when it refills.
// Providers send it on every response, refused or not (GitHub, X, Okta,
// Discord, Shopify, OpenAI, the IETF RateLimit fields), so a client can stop
// before the refusal instead of after it.
type Budget struct {
	// Limit is the quota's size in its window (requests, or the unit the
	// provider counts: OpenAI also counts tokens); 0 when not advertised,
	// or when it contradicts Remaining.
	Limit int64

	// Remaining is what is left of the quota now; 0 means spent.
	Remaining int64

	// Reset is how long until the quota refills, measured from the
	// response (against its Date header when valid, else the now given to
	// BudgetFrom), rounded up as hints are, except a delta written with a
	// fraction (Discord's X-RateLimit-Reset-After), kept to the millisecond;
	// 0 when not advertised, already past, or longer than 10 years (an
	// absurd value is ignored, not trusted).
	Reset time.Duration

	// ResetUnit is how Reset was read when it was written as a whole
	// number under a name of seconds (X-RateLimit-Reset: 1947), where some
	// limiters write milliseconds; ResetStated for every other reading.
	ResetUnit ResetUnit

	// Window is the quota's window when the provider advertises its policy
	// (RateLimit-Policy w=, HubSpot's X-HubSpot-RateLimit-Interval-
	// Milliseconds); 0 when not advertised.
	Window time.Duration
}

// ResetUnit is how a reset written as a whole number under a name that
// carries seconds (X-RateLimit-Reset, RateLimit-Reset) was read. Most
// limiters write seconds there; some write milliseconds under the same
// name, and one number cannot tell which: 1947 is 32 minutes or 2 s.
// Above an hour (maxSaneResetSeconds) such a number is read as
// milliseconds; at most an hour, as seconds, and Reset/1000 is what a
// provider that writes milliseconds meant. A reader that knows the
// provider's window (its earlier readings) can tell: the gate reads a
// scope's ResetSeconds resets as milliseconds once one of its readings
// was ResetMillis, or its milliseconds reading fell in the window in
// force where its seconds reading did not.
type ResetUnit int

const (
	// ResetStated: the reset's unit is not in question (an instant, an
	// epoch, a fraction, a delta under a name of milliseconds, a
	// structured field), or no reset was read.
	ResetStated ResetUnit = iota
	// ResetSeconds: a whole number of at most an hour, read as seconds;
	// it may be milliseconds.
	ResetSeconds
	// ResetMillis: a whole number above an hour, read as milliseconds.
	ResetMillis
)

// String returns "stated", "seconds" or "millis".
func (u ResetUnit) String() string {
	switch u {
	case ResetSeconds:
		return "seconds"
	case ResetMillis:
		return "millis"
	}
	return "stated"
}

// BudgetFrom reads the budget a response advertises, from any response
// (200 or 429). ok is false when no remaining count is advertised. now is
// the instant to measure epoch and date resets against when the response
// has no valid Date header.
//
// It reads:
//
//	X-RateLimit-Limit/-Remaining/-Reset   GitHub (x-ratelimit-used too; reset
//	                                      in epoch seconds), many others; the
//	                                      reset is a delta, epoch seconds,
//	                                      epoch with fractions (Discord),
//	                                      epoch milliseconds, as for hints
//	X-Rate-Limit-Limit/-Remaining/-Reset  X (Twitter), Okta (epoch seconds)
//	X-RateLimit-Reset-After               Discord (fractional seconds;
//	                                      preferred to X-RateLimit-Reset)
//	RateLimit, RateLimit-Policy           IETF drafts: `"default";r=50;t=30`
//	                                      with `"default";q=100;w=60`, and the
//	                                      older `limit=100, remaining=50,
//	                                      reset=30` with `100;w=60`
//	RateLimit-Limit/-Remaining/-Reset     older IETF drafts, separate fields
//	X-Shopify-Shop-Api-Call-Limit         Shopify REST: "32/40" is Limit 40,
//	                                      Remaining 8, no reset
//	x-ratelimit-remaining-requests ...    OpenAI, Groq: a quota per
//	                                      qualifier, reset "6m0s"
//	vendor fields                         every field of the rate-limit family
//	                                      (see the package documentation):
//	                                      X-Contentful-RateLimit-*,
//	                                      anthropic-ratelimit-*,
//	                                      X-HubSpot-RateLimit-*,
//	                                      Zendesk-RateLimit-<endpoint>, ...
//
// When several quotas are advertised (an IETF list, OpenAI's requests and
// tokens, Contentful's second and hour) the most constraining wins: the
// smallest Remaining, and among equals the longest Reset. Counts are
// non-negative integers of at most 18 digits; anything else (Azure
// OpenAI's "-1") is unknown.
func BudgetFrom(resp *http.Response, now time.Time) (Budget, bool) {
	if resp == nil {
		return Budget{}, false
	}
	h := resp.Header
	ref := now
	if t, ok := date(h); ok {
		ref = t
	}
	ps := policies{}
	readIETF(h, ps)
	readShopify(h, ps)
	ps.readFamily(h, ref)
	ps.settle()
	return ps.tightest()
}

// readShopify reads X-Shopify-Shop-Api-Call-Limit: "used/limit" of the
// REST Admin API's leaky bucket.
func readShopify(h http.Header, ps policies) {
	for _, v := range header(h, "X-Shopify-Shop-Api-Call-Limit") {
		used, limit, _ := strings.Cut(strings.TrimSpace(v), "/")
		u, okU := parseCount(used)
		l, okL := parseCount(limit)
		if okU && okL && u <= l {
			p := ps.get("shopify")
			p.limit, p.used, p.remaining = l, u, l-u
			return
		}
	}
}

// tightest is the budget of the most constraining quota with a known
// remaining count.
func (ps policies) tightest() (Budget, bool) {
	keys := make([]string, 0, len(ps))
	for k := range ps {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic among equals
	var best *policy
	for _, k := range keys {
		p := ps[k]
		if p.remaining < 0 {
			continue
		}
		if best == nil || p.remaining < best.remaining || p.remaining == best.remaining && p.reset > best.reset {
			best = p
		}
	}
	if best == nil {
		return Budget{}, false
	}
	b := Budget{Remaining: best.remaining, Reset: best.reset, Window: best.window, ResetUnit: best.unit}
	if best.exact > 0 && best.exact <= best.reset {
		b.Reset, b.ResetUnit = best.exact, ResetStated
	}
	if best.limit > 0 && best.limit >= best.remaining {
		b.Limit = best.limit
	}
	return b, true
}
