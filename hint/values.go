package hint

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// This file reads one header value: a delta, a reset (delta, epoch or
// instant), an HTTP-date or an ISO 8601 instant, and the rounding every
// hint goes through.

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
		if t, ok := parseHTTPDate(strings.Trim(v, " \t")); ok {
			return t, true
		}
	}
	return time.Time{}, false
}

// parseHTTPDate reads an HTTP-date in any RFC 9110 form, also with "UTC"
// written for "GMT" ("Mon, 22 Jul 2024 06:23:37 UTC", as some servers
// format a time.Time in UTC with time.RFC1123).
func parseHTTPDate(v string) (time.Time, bool) {
	if t, err := http.ParseTime(v); err == nil {
		return t, true
	}
	if s, ok := strings.CutSuffix(v, " UTC"); ok {
		if t, err := http.ParseTime(s + " GMT"); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// isoLayouts are the ISO 8601 date-times accepted, after parseISO has
// written the separator as "T" and a zone name as "Z". Atlassian's
// X-RateLimit-Reset has no seconds ("2024-07-22T06:23Z"); fractional
// seconds are accepted by time.Parse after any layout with seconds.
var isoLayouts = []string{
	"2006-01-02T15:04:05Z07:00", "2006-01-02T15:04:05Z0700", "2006-01-02T15:04:05Z07",
	"2006-01-02T15:04Z07:00", "2006-01-02T15:04Z0700",
}

// jsDateLayout is what JavaScript's Date.prototype.toString writes, once its
// parenthesised zone name is cut: "Tue Feb 16 2021 09:02:42 GMT+0100"
// (lemlist's X-RateLimit-Reset).
const jsDateLayout = "Mon Jan 02 2006 15:04:05 GMT-0700"

// parseISO reads an ISO 8601 date-time with a zone: "2024-07-22T06:23:37Z",
// "2024-07-22T06:23:37.5+02:00", "2024-07-22 06:23:37 UTC",
// "2024-07-22T06:23Z". A date-time without a zone is ambiguous: rejected.
func parseISO(v string) (time.Time, bool) {
	if len(v) < 16 || len(v) > 40 || v[4] != '-' {
		return time.Time{}, false
	}
	s := strings.ToUpper(v)
	if s[10] == ' ' {
		s = s[:10] + "T" + s[11:]
	}
	for _, zone := range []string{" UTC", " GMT", "UTC", "GMT"} {
		if cut, ok := strings.CutSuffix(s, zone); ok {
			s = cut + "Z"
			break
		}
	}
	for _, layout := range isoLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// parseInstant reads an absolute instant: ISO 8601, an HTTP-date or a
// JavaScript date string. gran is the precision to round a wait to: a
// millisecond when the instant has a fraction of a second, else a second.
func parseInstant(v string) (t time.Time, gran time.Duration, ok bool) {
	t, ok = parseISO(v)
	if !ok {
		t, ok = parseHTTPDate(v)
	}
	if !ok {
		js, _, _ := strings.Cut(v, " (")
		t, ok = parseLayout(jsDateLayout, js)
	}
	if !ok {
		return time.Time{}, 0, false
	}
	if t.Nanosecond() != 0 {
		return t, time.Millisecond, true
	}
	return t, time.Second, true
}

func parseLayout(layout, v string) (time.Time, bool) {
	t, err := time.Parse(layout, v)
	return t, err == nil
}

// retryAfter reads Retry-After: delay-seconds or an HTTP-date.
func retryAfter(values []string, ref time.Time) (time.Duration, bool) {
	return first(values, func(v string) (time.Duration, bool) {
		if d, ok := delta(v, time.Second, false); ok {
			return d, true
		}
		t, ok := parseHTTPDate(v)
		if !ok {
			return 0, false
		}
		return until(t, ref, time.Second)
	})
}

// reset reads a reset value counted in seconds: see resetIn.
func reset(v string, ref time.Time) (time.Duration, bool) {
	return resetIn(v, time.Second, ref)
}

// resetIn reads a reset value: a number is epoch milliseconds (>= 1e12),
// epoch seconds (>= 1e9, when unit is a second) or a delta in unit; a value
// with units ("6m0s", "20ms") is a delta; an ISO 8601 or HTTP date is an
// instant, measured against ref.
func resetIn(v string, unit time.Duration, ref time.Time) (time.Duration, bool) {
	if d, ok := parseDecimal(v, false); ok {
		return resetNumber(d, v, unit, ref)
	}
	if d, ok := unitDuration(v); ok {
		return d, true
	}
	t, gran, ok := parseInstant(v)
	if !ok {
		return 0, false
	}
	return untilReset(t, ref, gran)
}

// maxSaneResetSeconds is the longest delta a reset counted in seconds is
// taken to be. A number of "seconds" above an hour under a name that carries
// seconds is read as milliseconds: a limiter that writes its reset as a
// delta counts windows of seconds to minutes (Reddit's 600 s, throttled's
// and Envoy's "until the bucket is full"), while windows of hours and days
// are stated as instants (GitHub, X, Twitch: epoch seconds); a limiter
// that writes milliseconds under such a name (a 60 s window's "59987")
// would otherwise pause its scope for 16 hours. Smaller values stay
// seconds: 1500 under X-RateLimit-Reset is 25 minutes, not 1.5 s; a
// Budget says that such a reading may be milliseconds (ResetSeconds), and
// the reader that knows the provider's window decides (the gate reads
// them as milliseconds once its scope's resets were). Epoch milliseconds
// (13 digits) are read as such whatever the name.
const maxSaneResetSeconds = 3600

// justPassed bounds how far before the response's Date (or now) a reset
// may lie, exclusive, and still be a wait, of a second: a reset written in whole seconds
// and rounded down (the end of a window at 12:00:07.5 written as
// 12:00:07) equals Date while the window is still closed for up to a
// second. An older reset has passed: no hint.
const justPassed = time.Second

// untilReset is the time from ref to the reset instant t, rounded up to
// gran; a reset equal to ref or less than justPassed before it is a wait
// of a second (at most a second, never "no hint").
func untilReset(t, ref time.Time, gran time.Duration) (time.Duration, bool) {
	if d := t.Sub(ref); d <= 0 && d > -justPassed {
		return time.Second, true
	}
	return until(t, ref, gran)
}

// resetUnit tells how resetIn reads v under a name whose values are of
// unit (see ResetUnit): a whole delta under a name of seconds is read as
// seconds up to maxSaneResetSeconds (ResetSeconds: it may be milliseconds)
// and as milliseconds above it (ResetMillis); every other reading states
// its unit.
func resetUnit(v string, unit time.Duration) ResetUnit {
	d, ok := parseDecimal(v, false)
	if !ok || unit != time.Second || d.digits == "" || d.exp < 0 || len(d.digits)+d.exp >= 10 {
		return ResetStated // not a number, another unit, a fraction, an epoch
	}
	if d.greaterThan(maxSaneResetSeconds) {
		return ResetMillis
	}
	return ResetSeconds
}

// resetNumber reads the number d (written v) as resetIn does.
func resetNumber(d decimal, v string, unit time.Duration, ref time.Time) (time.Duration, bool) {
	if d.digits == "" {
		return 0, false
	}
	switch intDigits := len(d.digits) + d.exp; {
	case intDigits >= 13: // >= 1e12: epoch milliseconds
		ns, ok := d.scale(int64(time.Millisecond), 1<<63-1)
		if !ok {
			return 0, false
		}
		return untilReset(time.Unix(0, ns), ref, time.Millisecond)
	case intDigits >= 10 && unit == time.Second: // >= 1e9: epoch seconds
		ns, ok := d.scale(int64(time.Second), 1<<63-1)
		if !ok {
			return 0, false
		}
		return untilReset(time.Unix(0, ns), ref, time.Second)
	case unit == time.Second && d.exp >= 0 && !d.greaterThan(maxSaneResetSeconds):
		return delta(v, unit, false)
	case unit == time.Second && d.exp >= 0: // a whole number above an hour: milliseconds
		return delta(v, time.Millisecond, false)
	}
	return delta(v, unit, false)
}

// deltaIn reads a delta: a number of units, a value with its own units
// ("6m0s"), or a clock duration ("00:00:03", Azure Resource Graph).
func deltaIn(v string, unit time.Duration) (time.Duration, bool) {
	if d, ok := delta(v, unit, false); ok {
		return d, true
	}
	if d, ok := unitDuration(v); ok {
		return d, true
	}
	return clockDuration(v)
}

// fraction reads a delta with a fraction as precisely as written, to the
// millisecond ("0.125": Discord's next token); false for anything else. A
// retry hint is rounded up to the second (delta), a budget's reset is not:
// a reset a second late idles a scope whose quota refills every eighth of
// a second.
func fraction(v string, unit time.Duration) (time.Duration, bool) {
	if !strings.Contains(v, ".") {
		return 0, false
	}
	d, ok := parseDecimal(v, false)
	if !ok {
		return 0, false
	}
	ns, ok := d.scale(int64(unit), int64(maxHint))
	if !ok {
		return 0, false
	}
	return round(time.Duration(ns), time.Millisecond)
}

// clockDurationRE is hh:mm:ss with an optional fraction of a second.
var clockDurationRE = regexp.MustCompile(`^(\d{1,6}):([0-5]\d):([0-5]\d(?:\.\d{1,9})?)$`)

// clockDuration reads hh:mm:ss[.fff], rounded up as a delta in seconds.
func clockDuration(v string) (time.Duration, bool) {
	m := clockDurationRE.FindStringSubmatch(v)
	if m == nil {
		return 0, false
	}
	h, _ := parseCount(m[1])
	mins, _ := parseCount(m[2])
	s, ok := delta(m[3], time.Second, false)
	if !ok && strings.Trim(m[3], "0.") != "" {
		return 0, false
	}
	return round(time.Duration(h)*time.Hour+time.Duration(mins)*time.Minute+s, time.Second)
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
