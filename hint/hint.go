package hint

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// This file reads a provider's retry hint: how long a refused caller should
// wait before spending the scope's quota again. The accepted shapes below are
// part of the integration protocol with the providers: they are hand-written,
// kept in this one file and tested shape by shape (hint_test.go), decoys
// included. Widening them is a protocol change; add a test for every new shape.

// MaxBody is how many bytes of a body the parsers read at most (64 KiB).
// From, FromAt and FromText look at this prefix only and ignore
// the rest; a JSON document cut by the limit is read as text.
const MaxBody = 64 << 10

// maxHint is the longest hint accepted: longer values (and values that
// overflow time.Duration) are "no hint". The caller clamps real hints to its
// own maximum; this bound only rejects nonsense.
const maxHint = 10 * 365 * 24 * time.Hour

// jsonDepth is how deep into a JSON body fields are looked for: the
// top-level value is depth 0, {"error":{"retry_after":5}} has its field in an
// object at depth 1.
const jsonDepth = 8

// maxNumber bounds the length of a numeric token in a header or a JSON
// field. No real hint needs more; longer numbers are rejected unparsed.
const maxNumber = 64

// From returns the retry hint of a refused response, measured against
// the response's Date header or, without one, the current time. It is
// FromAt(resp, body, time.Now()); see FromAt for the sources it reads.
func From(resp *http.Response, body []byte) (time.Duration, bool) {
	return FromAt(resp, body, time.Now())
}

// FromAt returns the retry hint of a refused response (typically HTTP 429
// or 503): how long the provider asked callers to wait. body is the response
// body the caller has already read (FromAt never reads resp.Body); only
// its first MaxBody bytes are examined. resp may be nil (body only), its
// Header may be nil, body may be nil (headers only).
//
// The sources are tried in this order; the first that yields a hint wins, and
// a source that is absent, malformed, zero, negative, already past or out of
// range is skipped (so "Retry-After: 0" lets retry-after-ms speak):
//
//	Retry-After              delay-seconds "120" (a fraction "1.5" is accepted
//	                         leniently), or an HTTP-date in any RFC 9110 form
//	                         (IMF-fixdate, RFC 850, asctime)
//	retry-after-ms           milliseconds, fraction allowed (OpenAI, Azure)
//	x-ms-retry-after-ms      the same (Azure)
//	RateLimit                draft-ietf-httpapi-ratelimit-headers, list form
//	                         `"default";r=0;t=10`: the largest t of the items
//	                         with r=0 when any item has r=0, otherwise the
//	                         smallest t; dictionary form `reset=10` (draft 07)
//	RateLimit-Reset          older drafts: delta seconds (epoch values are
//	                         recognised as for X-RateLimit-Reset)
//	X-RateLimit-Reset-After  delta seconds, fraction allowed (Discord)
//	X-RateLimit-Reset        >= 1e12: Unix epoch milliseconds; >= 1e9: Unix
//	                         epoch seconds (GitHub); smaller: delta seconds
//	body, JSON fields        anywhere up to depth 8: retry_after, retryAfter,
//	                         retry_after_seconds (seconds; a number, a numeric
//	                         string or "10s"), retry_after_ms, retryAfterMs
//	                         (milliseconds), retryDelay (protobuf duration
//	                         "10s", "0.250s", as in Google's RetryInfo). Key
//	                         case, '_' and '-' do not matter. If several
//	                         fields carry a hint, the longest wins.
//	body, prose              every JSON string value through FromText
//	                         (the longest hint wins), or, when the body prefix
//	                         is not valid JSON, FromText on the prefix
//
// HTTP-dates and epoch values are measured against the response's Date
// header when it is present and valid, else against now; now is used for
// nothing else. A date or epoch in the past is no hint.
//
// Numbers in headers and JSON are plain decimals ("10", "10.5"; JSON also
// allows an exponent): signs, "-0", NaN, Inf and hexadecimal are rejected.
//
// Rounding: a hint is never shortened. Values in seconds, minutes or hours
// with a fraction round up to the next whole second ("10.5" -> 11s, "0.2" ->
// 1s); values in milliseconds (retry-after-ms, epoch milliseconds, "500ms")
// round up to the next whole millisecond; HTTP-dates and epoch seconds give
// whole seconds (rounded up when measured against a sub-second now).
//
// A hint is always positive and at most 10 years (3650 days); anything
// longer, or overflowing time.Duration, is no hint (ok is false). The caller
// clamps accepted hints to its own maximum.
func FromAt(resp *http.Response, body []byte, now time.Time) (time.Duration, bool) {
	if resp != nil {
		h := resp.Header
		ref := now
		if t, ok := date(h); ok {
			ref = t
		}
		if d, ok := retryAfter(header(h, "Retry-After"), ref); ok {
			return d, true
		}
		for _, name := range []string{"Retry-After-Ms", "X-Ms-Retry-After-Ms"} {
			if d, ok := first(header(h, name), func(v string) (time.Duration, bool) {
				return delta(v, time.Millisecond, false)
			}); ok {
				return d, true
			}
		}
		if d, ok := rateLimit(header(h, "RateLimit")); ok {
			return d, true
		}
		if d, ok := first(header(h, "RateLimit-Reset"), func(v string) (time.Duration, bool) {
			return reset(v, ref)
		}); ok {
			return d, true
		}
		if d, ok := first(header(h, "X-RateLimit-Reset-After"), func(v string) (time.Duration, bool) {
			return delta(v, time.Second, false)
		}); ok {
			return d, true
		}
		if d, ok := first(header(h, "X-RateLimit-Reset"), func(v string) (time.Duration, bool) {
			return reset(v, ref)
		}); ok {
			return d, true
		}
	}
	return fromBody(body)
}

// FromText reads a retry hint from prose, such as the message of an error
// body: "Rate limit exceeded. Please try again in 15 seconds." gives 15s.
// Only the first MaxBody bytes of s are examined, case does not matter,
// and the first phrase that yields a positive duration wins.
//
// A phrase is a lead-in (again, retry, retry-after, retrying, wait, waiting,
// after, available, reset, resets), up to three filler words (in, after, for,
// at least, about, approximately, around, roughly, another, again), then a
// duration: one to four "<number> <unit>" parts, optionally separated by
// spaces, commas or "and", as in "15 seconds", "10.5s", "3 sec", "2 minutes",
// "1m30s", "500ms", "2 hours". Units: ms, msec(s), millis, millisecond(s); s,
// sec(s), second(s); m, min(s), minute(s); h, hr(s), hour(s); d, day(s). A
// number has at most 12 integer and 12 fraction digits and no sign; a longer
// number is no match at all (never truncated into a shorter one).
//
// So "try again in 1 minute", "retry in 10.5s" (11s), "Retry after 30
// seconds", "please wait 20 seconds", "available again after 2 minutes" and
// "try again in 500ms" are hints, while rates and windows ("2 calls per
// second", "limit of 100 requests in 60 seconds"), counts ("3 retries left"),
// numbers without a unit ("retry after 30"), "try again later", zero and
// negative durations are not. Rounding follows FromAt: a duration with
// any millisecond part rounds up to the whole millisecond, any other to the
// whole second.
func FromText(s string) (time.Duration, bool) {
	if len(s) > MaxBody {
		s = s[:MaxBody]
	}
	for _, m := range prose.FindAllStringSubmatchIndex(s, -1) {
		if d, ok := proseDuration(s[m[2]:m[3]]); ok {
			return d, true
		}
	}
	return 0, false
}

// The prose grammar below is part of the integration protocol: providers
// that only say "try again in N seconds" in a message are read through it.
// Every accepted shape and every decoy is a row in hint_test.go; change the
// tests with the grammar. RE2 (package regexp) runs in linear time.
const (
	unitRE      = `(?:milliseconds?|millis|msecs?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d)`
	componentRE = `\d{1,12}(?:\.\d{1,12})?\s*` + unitRE
)

var (
	// prose finds a wait phrase: lead-in, fillers, separator, duration
	// (group 1), then a character that is not a letter or digit (so "5
	// sessions" is not "5 s"), or the end.
	prose = regexp.MustCompile(`(?i)\b(?:again|retry-after|retry|retrying|wait|waiting|after|available|resets?)` +
		`(?:\s+(?:in|after|for|at\s+least|about|approximately|around|roughly|another|again)){0,3}` +
		`(?:\s*:\s*|\s+)` +
		`(` + componentRE + `(?:(?:\s*,\s*|\s+and\s+|\s*)` + componentRE + `){0,3})` +
		`(?:[^\pL\pN]|$)`)

	// component splits a duration found by prose into its parts.
	component = regexp.MustCompile(`(?i)(\d+(?:\.\d+)?)\s*(` + unitRE + `)`)

	// protoRE is a protobuf JSON Duration such as "10s" or "0.250s".
	protoRE = regexp.MustCompile(`^(\d+(?:\.\d+)?)s$`)
)

// proseDuration sums the parts of a duration matched by prose.
func proseDuration(s string) (time.Duration, bool) {
	var total time.Duration
	gran := time.Second
	for _, p := range component.FindAllStringSubmatch(s, -1) {
		unit := unitOf(p[2])
		if unit == 0 {
			return 0, false
		}
		d, ok := parseDecimal(p[1], false)
		if !ok {
			return 0, false
		}
		ns, ok := d.scale(int64(unit), int64(maxHint))
		if !ok {
			return 0, false
		}
		total += time.Duration(ns) // each part <= maxHint, at most 4 parts: no overflow
		if total > maxHint {
			return 0, false
		}
		gran = min(gran, unit)
	}
	return round(total, gran)
}

// unitOf maps a unit word of unitRE to its duration.
func unitOf(u string) time.Duration {
	switch strings.ToLower(u) {
	case "ms", "msec", "msecs", "millis", "millisecond", "milliseconds":
		return time.Millisecond
	case "s", "sec", "secs", "second", "seconds":
		return time.Second
	case "m", "min", "mins", "minute", "minutes":
		return time.Minute
	case "h", "hr", "hrs", "hour", "hours":
		return time.Hour
	case "d", "day", "days":
		return 24 * time.Hour
	}
	return 0
}

// header returns the values of the named field. Canonical keys are what
// net/http produces; keys set by hand in another case are found too.
func header(h http.Header, name string) []string {
	if vs := h.Values(name); len(vs) > 0 {
		return vs
	}
	var keys []string
	for k := range h {
		if strings.EqualFold(k, name) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // deterministic when several spellings are present
	var vs []string
	for _, k := range keys {
		vs = append(vs, h[k]...)
	}
	return vs
}

// first returns the hint of the first value that yields one.
func first(values []string, parse func(string) (time.Duration, bool)) (time.Duration, bool) {
	for _, v := range values {
		if d, ok := parse(strings.Trim(v, " \t")); ok {
			return d, true
		}
	}
	return 0, false
}

// date returns the response's Date header when it is a valid HTTP-date.
func date(h http.Header) (time.Time, bool) {
	for _, v := range header(h, "Date") {
		if t, err := http.ParseTime(strings.Trim(v, " \t")); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// retryAfter reads Retry-After: delay-seconds or an HTTP-date.
func retryAfter(values []string, ref time.Time) (time.Duration, bool) {
	return first(values, func(v string) (time.Duration, bool) {
		if d, ok := delta(v, time.Second, false); ok {
			return d, true
		}
		t, err := http.ParseTime(v)
		if err != nil {
			return 0, false
		}
		return until(t, ref, time.Second)
	})
}

// reset reads a reset value that is epoch milliseconds (>= 1e12), epoch
// seconds (>= 1e9) or delta seconds.
func reset(v string, ref time.Time) (time.Duration, bool) {
	d, ok := parseDecimal(v, false)
	if !ok || d.digits == "" {
		return 0, false
	}
	switch intDigits := len(d.digits) + d.exp; {
	case intDigits >= 13: // >= 1e12: epoch milliseconds
		ns, ok := d.scale(int64(time.Millisecond), 1<<63-1)
		if !ok {
			return 0, false
		}
		return until(time.Unix(0, ns), ref, time.Millisecond)
	case intDigits >= 10: // >= 1e9: epoch seconds
		ns, ok := d.scale(int64(time.Second), 1<<63-1)
		if !ok {
			return 0, false
		}
		return until(time.Unix(0, ns), ref, time.Second)
	}
	return delta(v, time.Second, false)
}

// until is the time from ref to t, rounded up to gran.
func until(t, ref time.Time, gran time.Duration) (time.Duration, bool) {
	return round(t.Sub(ref), gran) // Sub saturates; round rejects that
}

// delta reads a decimal number of units, rounded up to the whole unit
// for milliseconds and to the whole second for longer units.
func delta(v string, unit time.Duration, allowExp bool) (time.Duration, bool) {
	d, ok := parseDecimal(v, allowExp)
	if !ok {
		return 0, false
	}
	ns, ok := d.scale(int64(unit), int64(maxHint))
	if !ok {
		return 0, false
	}
	return round(time.Duration(ns), min(unit, time.Second))
}

// round rounds d up to a multiple of gran and accepts it as a hint when
// it is positive and at most maxHint.
func round(d, gran time.Duration) (time.Duration, bool) {
	if d <= 0 || d > maxHint {
		return 0, false
	}
	if r := d % gran; r != 0 {
		d += gran - r
	}
	if d > maxHint {
		return 0, false
	}
	return d, true
}

// rateLimit reads the RateLimit field of the IETF draft. List form
// (draft 08 and later): items such as `"default";r=0;t=10`, where r is the
// remaining quota and t the seconds until it resets. When some item is
// exhausted (r=0) the wait is the largest t among the exhausted items (every
// exhausted quota has to reset); otherwise it is the smallest t. Dictionary
// form (draft 07): `limit=100, remaining=0, reset=10`, where reset counts as
// an item's t.
func rateLimit(values []string) (time.Duration, bool) {
	if len(values) == 0 {
		return 0, false
	}
	var (
		exhausted      bool
		longest        time.Duration // largest t among exhausted items
		shortest       time.Duration // smallest t among all items
		shortestExists bool
	)
	for _, member := range splitList(strings.Join(values, ",")) {
		name, value, dict, params := parseMember(member)
		var t string
		var hasT, isExhausted bool
		if dict {
			if name != "reset" {
				continue // other dictionary members: limit, remaining
			}
			t, hasT = value, true
		} else {
			t, hasT = params["t"]
			if r, ok := parseDecimal(params["r"], false); ok && r.digits == "" {
				isExhausted = true
				exhausted = true
			}
		}
		if !hasT {
			continue
		}
		d, ok := delta(t, time.Second, false)
		if !ok {
			continue
		}
		if isExhausted {
			longest = max(longest, d)
		}
		if !shortestExists || d < shortest {
			shortest, shortestExists = d, true
		}
	}
	if exhausted {
		return longest, longest > 0
	}
	return shortest, shortestExists
}

// splitList splits a structured-field list or dictionary on the commas
// that are outside quoted strings.
func splitList(s string) []string {
	var out []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			out = append(out, strings.Trim(s[start:i], " \t"))
			start = i + 1
		}
	}
	return append(out, strings.Trim(s[start:], " \t"))
}

// parseMember parses one list member `"name";k=v;k2=v2` or `name;k=v`, or
// one dictionary member `name=value;k=v` (dict is true, value is set). Parameters without a value are recorded as "?1" (true). It is
// lenient: RFC 8941 details that do not matter here are not checked.
func parseMember(m string) (name, value string, dict bool, params map[string]string) {
	rest := m
	if strings.HasPrefix(rest, `"`) {
		end := 1
		for end < len(rest) && rest[end] != '"' {
			if rest[end] == '\\' {
				end++
			}
			end++
		}
		name = rest[1:min(end, len(rest))]
		rest = rest[min(end+1, len(rest)):]
	} else {
		i := strings.IndexAny(rest, ";=")
		if i < 0 {
			i = len(rest)
		}
		name = strings.TrimSpace(rest[:i])
		rest = rest[i:]
		if strings.HasPrefix(rest, "=") {
			dict, rest = true, rest[1:]
			j := strings.IndexByte(rest, ';')
			if j < 0 {
				j = len(rest)
			}
			value = strings.TrimSpace(rest[:j])
			rest = rest[j:]
		}
	}
	for _, p := range strings.Split(rest, ";")[1:] {
		k, v, found := strings.Cut(p, "=")
		k = strings.TrimSpace(k)
		if !found {
			v = "?1"
		}
		if params == nil {
			params = make(map[string]string)
		}
		if _, dup := params[k]; !dup {
			params[k] = strings.TrimSpace(v)
		}
	}
	return name, value, dict, params
}

// fromBody reads the body: JSON fields, then JSON string values as prose,
// or the whole prefix as prose when it is not JSON.
func fromBody(body []byte) (time.Duration, bool) {
	if len(body) > MaxBody {
		body = body[:MaxBody]
	}
	doc := bytes.TrimSpace(body)
	if len(doc) == 0 {
		return 0, false
	}
	if json.Valid(doc) {
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err == nil {
			var w walker
			w.walk(v, 0)
			if w.field > 0 {
				return w.field, true
			}
			return w.prose, w.prose > 0
		}
	}
	return FromText(string(body))
}

// walker collects the longest field hint and the longest prose hint of a
// decoded JSON document.
type walker struct {
	field, prose time.Duration
}

func (w *walker) walk(v any, depth int) {
	if depth > jsonDepth {
		return
	}
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if d, ok := field(k, x); ok {
				w.field = max(w.field, d)
			}
			w.walk(x, depth+1)
		}
	case []any:
		for _, x := range v {
			w.walk(x, depth+1)
		}
	case string:
		if d, ok := FromText(v); ok {
			w.prose = max(w.prose, d)
		}
	}
}

// keyFold drops the separators of a JSON key: retry_after, retry-after
// and retryAfter all name the same field.
var keyFold = strings.NewReplacer("_", "", "-", "")

// field reads a JSON member that names a retry hint.
func field(key string, v any) (time.Duration, bool) {
	switch strings.ToLower(keyFold.Replace(key)) {
	case "retryafter", "retryafterseconds", "retryaftersecs", "retryaftersec":
		switch v := v.(type) {
		case json.Number:
			return delta(v.String(), time.Second, true)
		case string:
			s := strings.TrimSpace(v)
			if d, ok := delta(s, time.Second, false); ok {
				return d, true
			}
			return protoDuration(s)
		}
	case "retryafterms", "retryaftermillis", "retryaftermilliseconds":
		switch v := v.(type) {
		case json.Number:
			return delta(v.String(), time.Millisecond, true)
		case string:
			return delta(strings.TrimSpace(v), time.Millisecond, false)
		}
	case "retrydelay":
		if s, ok := v.(string); ok {
			return protoDuration(strings.TrimSpace(s))
		}
	}
	return 0, false
}

// protoDuration reads a protobuf JSON Duration ("10s", "1.5s", "0.250s").
func protoDuration(s string) (time.Duration, bool) {
	m := protoRE.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	return delta(m[1], time.Second, false)
}
