package hint

import (
	"net/http"
	"time"
)

// MaxBody is how many bytes of a body the parsers read at most (64 KiB).
// From, FromAt and FromText look at this prefix only and ignore the rest;
// a JSON document cut by the limit is read as text.
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
// The sources are tried in the order of the package documentation; the
// first that yields a hint wins, and a source that is absent, malformed,
// zero, negative, already past or out of range is skipped (so
// "Retry-After: 0" lets retry-after-ms speak).
//
// HTTP-dates, ISO 8601 instants and epoch values, in headers and in prose,
// are measured against the response's Date header when it is present and
// valid, else against now; now is used for nothing else. An instant in the
// past is no hint.
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
	var h http.Header
	if resp != nil {
		h = resp.Header
	}
	ref := now
	if t, ok := date(h); ok {
		ref = t
	}
	for _, read := range sources {
		if d, ok := read(h, ref); ok {
			return d, true
		}
	}
	if d, ok := fromBody(body, ref); ok {
		return d, true
	}
	d, _, ok := familyWait(familyOf(h, ref)) // an ambiguous reset, when the body says nothing
	return d, ok
}

// source reads one kind of hint from the header fields h; ref is the
// instant dates and epochs are measured against.
type source func(h http.Header, ref time.Time) (time.Duration, bool)

// sources are the header sources in order of preference (the package
// documentation lists them): the explicit retry fields first, then the
// standard reset fields, then the rest of the rate-limit family, then
// Meta's usage fields.
var sources = []source{
	func(h http.Header, ref time.Time) (time.Duration, bool) {
		return retryAfter(header(h, "Retry-After"), ref)
	},
	func(h http.Header, _ time.Time) (time.Duration, bool) {
		return first(header(h, "Retry-After-Ms"), millis)
	},
	func(h http.Header, _ time.Time) (time.Duration, bool) {
		return first(header(h, "X-Ms-Retry-After-Ms"), millis)
	},
	func(h http.Header, _ time.Time) (time.Duration, bool) {
		return rateLimit(header(h, "RateLimit"))
	},
	func(h http.Header, ref time.Time) (time.Duration, bool) {
		return first(header(h, "RateLimit-Reset"), func(v string) (time.Duration, bool) { return reset(v, ref) })
	},
	func(h http.Header, _ time.Time) (time.Duration, bool) {
		return first(header(h, "X-RateLimit-Reset-After"), seconds)
	},
	func(h http.Header, ref time.Time) (time.Duration, bool) {
		return first(header(h, "X-RateLimit-Reset"), func(v string) (time.Duration, bool) { return reset(v, ref) })
	},
	func(h http.Header, ref time.Time) (time.Duration, bool) {
		d, definitive, ok := familyWait(familyOf(h, ref))
		return d, ok && definitive
	},
	usageWait,
}

// millis reads a delta in milliseconds, fraction allowed.
func millis(v string) (time.Duration, bool) { return delta(v, time.Millisecond, false) }

// seconds reads a delta in seconds, fraction allowed.
func seconds(v string) (time.Duration, bool) { return delta(v, time.Second, false) }
