package hint

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// This file reads the rate-limit header family by the words of its field
// names, so that one rule covers the spellings providers use:
//
//	X-RateLimit-Remaining, X-Rate-Limit-Remaining   GitHub, X, Okta, Discord
//	RateLimit-Remaining                             older IETF drafts
//	X-Contentful-RateLimit-Second-Remaining         vendor prefix
//	x-ratelimit-remaining-requests                  OpenAI, Groq: a qualifier
//	anthropic-ratelimit-requests-remaining          Anthropic
//	x-ms-ratelimit-remaining-subscription-reads     Azure Resource Manager
//	X-HubSpot-RateLimit-Interval-Milliseconds       a window, in milliseconds
//	zendesk-ratelimit-tickets-index                 total=100; remaining=99; resets=41
//	x-ms-user-quota-resets-after                    Azure Resource Graph: "00:00:03"
//
// A name belongs to the family when its dash-separated words contain
// "ratelimit" (or "rate" "limit") or "quota". One word gives its role (remaining,
// limit or max, used, reset, reset-after or retry-after, interval or
// window), a unit word (ms, millis, milliseconds, seconds) the unit of its
// value, and the other words, in order, name the quota: the key that pairs
// x-ratelimit-remaining-requests with x-ratelimit-reset-requests.

// policy is what one response says about one quota. Counts are -1 when
// unknown, durations 0.
type policy struct {
	limit, remaining, used int64
	reset                  time.Duration // until the quota refills, from the response
	exact                  time.Duration // reset as precisely as written, when it had a fraction (a budget's, see fraction)
	resetRank              int           // how directly reset was read: lower wins
	unit                   ResetUnit     // how reset's number was read (a roleReset's)
	window                 time.Duration // the quota's window
}

// Reset readings by preference: a delta (X-RateLimit-Reset-After) does not
// depend on clocks, an instant or epoch does.
const (
	rankDelta = iota
	rankReset
	rankNone
)

// policies are the quotas of one response, by key.
type policies map[string]*policy

func (ps policies) get(key string) *policy {
	p := ps[key]
	if p == nil {
		p = &policy{limit: -1, remaining: -1, used: -1, resetRank: rankNone}
		ps[key] = p
	}
	return p
}

// role is what a field of the family says.
type role int

const (
	// roleNone: a name without a role word. Its value is a dictionary
	// (Zendesk-RateLimit-<endpoint>: total=100; remaining=99; resets=41) or
	// a limit (Zendesk's X-Rate-Limit: 700, HubSpot's
	// X-HubSpot-RateLimit-Daily: 250000).
	roleNone role = iota
	roleLimit
	roleRemaining
	roleUsed
	roleWindow
	roleResetAfter // a delta: X-RateLimit-Reset-After, X-RateLimit-Retry-After, x-ms-user-quota-resets-after
	roleReset      // a delta, an epoch or an instant (see resetIn)
)

var roleWords = map[string]role{
	"limit": roleLimit, "max": roleLimit, "remaining": roleRemaining, "used": roleUsed,
	"interval": roleWindow, "window": roleWindow, "reset": roleReset, "resets": roleReset,
}

var unitWords = map[string]time.Duration{
	"ms": time.Millisecond, "msec": time.Millisecond, "millis": time.Millisecond,
	"millisecond": time.Millisecond, "milliseconds": time.Millisecond,
	"sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
}

// fieldName is a classified field name.
type fieldName struct {
	key  string
	role role
	unit time.Duration
}

// classify reads a field name of the family. RateLimit and
// RateLimit-Policy are structured fields, read in ietf.go.
func classify(name string) (fieldName, bool) {
	lower := strings.ToLower(name)
	if lower == "ratelimit" || lower == "ratelimit-policy" {
		return fieldName{}, false
	}
	words := joinRateLimit(strings.Split(lower, "-"))
	if !slices.Contains(words, "ratelimit") && !slices.Contains(words, "quota") {
		return fieldName{}, false
	}
	f := fieldName{unit: time.Second}
	var key []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		r, isRole := roleWords[w]
		switch {
		case (w == "reset" || w == "resets" || w == "retry") && i+1 < len(words) && words[i+1] == "after":
			f.role = roleResetAfter
			i++
		case isRole:
			f.role = r
		case unitWords[w] != 0:
			f.unit = unitWords[w]
		default:
			key = append(key, w)
		}
	}
	f.key = strings.Join(key, "-")
	return f, true
}

// joinRateLimit writes the first "rate" "limit" pair of words as one.
func joinRateLimit(words []string) []string {
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "rate" && words[i+1] == "limit" {
			return slices.Concat(words[:i], []string{"ratelimit"}, words[i+2:])
		}
	}
	return words
}

// familyOf reads every field of the family in h, in a deterministic order
// (sorted names; the first readable value of a role wins), then settles
// what the readings imply.
func familyOf(h http.Header, ref time.Time) policies {
	ps := policies{}
	ps.readFamily(h, ref)
	ps.settle()
	return ps
}

// readFamily records every field of the family in h.
func (ps policies) readFamily(h http.Header, ref time.Time) {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		f, ok := classify(k)
		if !ok {
			continue
		}
		for _, v := range h[k] {
			ps.get(f.key).read(f, strings.Trim(v, " \t"), ref)
		}
	}
}

// read records one value of the field f.
func (p *policy) read(f fieldName, v string, ref time.Time) {
	switch f.role {
	case roleNone:
		if strings.Contains(v, "=") {
			p.readDict(v)
		} else {
			setCount(&p.limit, v)
		}
	case roleLimit:
		setCount(&p.limit, v)
	case roleRemaining:
		setCount(&p.remaining, v)
	case roleUsed:
		setCount(&p.used, v)
	case roleWindow:
		if d, ok := deltaIn(v, f.unit); ok && p.window == 0 {
			p.window = d
		}
	case roleResetAfter:
		p.setReset(rankDelta)(deltaIn(v, f.unit))
		if d, ok := fraction(v, f.unit); ok && p.resetRank == rankDelta && p.exact == 0 {
			p.exact = d
		}
	case roleReset:
		rank := p.resetRank
		p.setReset(rankReset)(resetIn(v, f.unit, ref))
		if p.resetRank != rank {
			p.unit = resetUnit(v, f.unit)
		}
	}
}

// readDict reads a dictionary value: total=100; remaining=99; resets=41
// (Zendesk; resets in seconds).
func (p *policy) readDict(v string) {
	for _, member := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' }) {
		k, val, _ := strings.Cut(member, "=")
		val = strings.TrimSpace(val)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "total", "limit":
			setCount(&p.limit, val)
		case "remaining":
			setCount(&p.remaining, val)
		case "resets", "reset":
			p.setReset(rankDelta)(delta(val, time.Second, false))
		}
	}
}

// setReset returns a setter that records a reset read at rank, unless a
// reading of a better (lower) or equal rank came first.
func (p *policy) setReset(rank int) func(time.Duration, bool) {
	return func(d time.Duration, ok bool) {
		if ok && rank < p.resetRank {
			p.reset, p.resetRank = d, rank
		}
	}
}

// setCount stores the count v in *dst unless one is known already.
func setCount(dst *int64, v string) {
	if *dst >= 0 {
		return
	}
	if n, ok := parseCount(v); ok {
		*dst = n
	}
}

// maxCountDigits bounds a count: 18 digits always fit an int64, and no
// quota is larger; a longer number is absurd and ignored.
const maxCountDigits = 18

// parseCount reads a non-negative integer count. A list after it is cut
// ("100, 100;w=60", the older IETF drafts' X-RateLimit-Limit); signs
// (Azure OpenAI's "-1" for unknown), fractions and words are rejected.
func parseCount(v string) (int64, bool) {
	if i := strings.IndexAny(v, ",;"); i >= 0 {
		v = v[:i]
	}
	v = strings.TrimSpace(v)
	digits, rest := leadingDigits(v)
	if digits == "" || rest != "" || len(digits) > maxCountDigits {
		return 0, false
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		n = n*10 + int64(digits[i]-'0')
	}
	return n, true
}

// settle derives what the readings imply: the remaining count from limit
// and used (GitHub's x-ratelimit-used, when remaining is absent), and the
// reset of a quota that advertises none from the reset-only quota whose
// key its own extends (Contentful sends one X-Contentful-RateLimit-Reset
// for its -Second- and -Hour- quotas).
func (ps policies) settle() {
	for key, p := range ps {
		if p.remaining < 0 && p.used >= 0 && p.limit >= p.used {
			p.remaining = p.limit - p.used
		}
		if p.reset == 0 && p.remaining >= 0 {
			p.reset = ps.inherited(key)
		}
	}
}

// inherited is the reset of the longest reset-only key that key extends.
func (ps policies) inherited(key string) time.Duration {
	var best string
	var d time.Duration
	for k, q := range ps {
		if q.reset > 0 && q.remaining < 0 && strings.HasPrefix(key, k+"-") && len(k) > len(best) {
			best, d = k, q.reset
		}
	}
	return d
}

// familyWait is the wait the family's resets imply on a refusal: when a
// quota is known spent (remaining 0), the longest reset among the spent
// ones (each of them has to refill); otherwise the shortest reset. The
// second answer is definitive unless several quotas disagree with none
// known spent (OpenAI's requests reset in 12ms while its tokens reset in
// 6m0s): then the refusal does not say which quota refused, and the
// caller lets the body speak first.
func familyWait(ps policies) (d time.Duration, definitive, ok bool) {
	var spent, shortest, seen time.Duration
	disagree := false
	for _, p := range ps {
		if p.reset <= 0 {
			continue
		}
		if p.remaining == 0 {
			spent = max(spent, p.reset)
		}
		if seen == 0 {
			seen = p.reset
		}
		disagree = disagree || p.reset != seen
		if shortest == 0 || p.reset < shortest {
			shortest = p.reset
		}
	}
	switch {
	case spent > 0:
		return spent, true, true
	case shortest > 0:
		return shortest, !disagree, true
	}
	return 0, false, false
}
