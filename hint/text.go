package hint

import (
	"regexp"
	"strings"
	"time"
)

// FromText reads a retry hint from prose, such as the message of an error
// body: "Rate limit exceeded. Please try again in 15 seconds." gives 15s.
// Only the first MaxBody bytes of s are examined, case does not matter,
// and the first phrase that yields a positive duration wins.
//
// A phrase is a lead-in (again, retry, retry-after, retrying, retried, wait,
// waiting, after, available, reset, resets), up to three filler words (in,
// after, for, at least, about, approximately, around, roughly, another,
// again), then a duration: one to four "<number> <unit>" parts, optionally
// separated by spaces, commas or "and", as in "15 seconds", "10.5s", "3 sec",
// "2 minutes", "1m30s", "500ms", "2 hours". Units: ms, msec(s), millis,
// millisecond(s); s, sec(s), second(s); m, min(s), minute(s); h, hr(s),
// hour(s); d, day(s). A number has at most 12 integer and 12 fraction digits
// and no sign; a longer number is no match at all (never truncated into a
// shorter one). A number may stand in quotes ("after '372' seconds",
// `after "372" seconds`).
//
// So "try again in 1 minute", "retry in 10.5s" (11s), "Retry after 30
// seconds", "please wait 20 seconds", "available again after 2 minutes",
// "can be retried in 14 seconds" and "try again in 500ms" are hints, while
// rates and windows ("2 calls per second", "limit of 100 requests in 60
// seconds"), counts ("3 retries left"), numbers without a unit ("retry after
// 30"), "try again later", zero and negative durations are not. Rounding
// follows FromAt: a duration with any millisecond part rounds up to the
// whole millisecond, any other to the whole second.
//
// FromText has no clock, so it reads durations only. Absolute instants in
// prose ("try after 2024-07-22T06:23:37Z", "banned until 1532118492680")
// need a reference time: FromAt reads them in bodies, against the
// response's Date or now; FromAt(nil, []byte(s), now) reads them in s.
func FromText(s string) (time.Duration, bool) {
	return textAt(s, time.Time{}, false)
}

// textAt reads prose: durations, and with instants also absolute instants
// measured against ref. The phrase that starts first wins.
func textAt(s string, ref time.Time, instants bool) (time.Duration, bool) {
	if len(s) > MaxBody {
		s = s[:MaxBody]
	}
	best, at := time.Duration(0), -1
	take := func(d time.Duration, pos int, ok bool) {
		if ok && (at < 0 || pos < at) {
			best, at = d, pos
		}
	}
	take(firstPhrase(s, prose, proseDuration))
	if instants && isoDate.MatchString(s) { // a cheap scan first: most texts have no date
		take(firstPhrase(s, isoProse, func(v string) (time.Duration, bool) {
			t, gran, ok := parseInstant(v)
			if !ok {
				return 0, false
			}
			return until(t, ref, gran)
		}))
	}
	if instants && tenDigits.MatchString(s) {
		take(firstPhrase(s, epochProse, func(v string) (time.Duration, bool) {
			return reset(v, ref)
		}))
	}
	return best, at >= 0
}

// firstPhrase returns the first match of re whose group 1 parses, and where
// the match starts.
func firstPhrase(s string, re *regexp.Regexp, parse func(string) (time.Duration, bool)) (time.Duration, int, bool) {
	for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
		if d, ok := parse(s[m[2]:m[3]]); ok {
			return d, m[0], true
		}
	}
	return 0, 0, false
}

// The prose grammar below is part of the integration protocol: providers
// that only say "try again in N seconds" in a message are read through it.
// Every accepted shape and every decoy is a row in hint_test.go or
// shapes_test.go; change the tests with the grammar. RE2 (package regexp)
// runs in linear time.
const (
	unitRE      = `(?:milliseconds?|millis|msecs?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d)`
	quoteRE     = `['"‘’“”]?`
	componentRE = quoteRE + `\d{1,12}(?:\.\d{1,12})?` + quoteRE + `\s*` + unitRE

	// endRE ends a phrase: a character that is not a letter or digit (so
	// "5 sessions" is not "5 s"), or the end.
	endRE = `(?:[^\pL\pN]|$)`

	// instantLeadRE introduces an absolute instant: a word of waiting, up
	// to two auxiliaries, then a preposition of time. "valid until",
	// "created at" or "received on" are not lead-ins: an expiry or a log
	// time is not a wait.
	instantLeadRE = `(?i)\b(?:again|retry|retried|retrying|try|available|banned|blocked|locked|suspended|throttled|limited|resets?|wait|waiting)` +
		`(?:\s+(?:again|is|are|be|will|back)){0,2}\s+(?:after|until|till|at|on|from)(?:\s*:)?\s*`
)

var (
	// prose finds a wait phrase: lead-in, fillers, separator, duration
	// (group 1), end.
	prose = regexp.MustCompile(`(?i)\b(?:again|retry-after|retry|retrying|retried|wait|waiting|after|available|resets?)` +
		`(?:\s+(?:in|after|for|at\s+least|about|approximately|around|roughly|another|again)){0,3}` +
		`(?:\s*:\s*|\s+)` +
		`(` + componentRE + `(?:(?:\s*,\s*|\s+and\s+|\s*)` + componentRE + `){0,3})` + endRE)

	// isoProse finds an ISO 8601 instant with its zone after a lead-in:
	// "try after 2024-07-22T06:23:37Z", "available at 2024-07-22 06:23 UTC".
	// An instant without a zone is ambiguous and no match.
	isoProse = regexp.MustCompile(instantLeadRE +
		`(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:\s?(?:Z|UTC|GMT)|[+-]\d{2}(?::?\d{2})?))` + endRE)

	// epochProse finds a Unix epoch after "until": "IP banned until
	// 1532118492680" (Binance, milliseconds). Ten digits are seconds,
	// thirteen milliseconds (see reset). A bare number after any other
	// lead-in stays a count ("retry after 30" is no hint).
	epochProse = regexp.MustCompile(`(?i)\b(?:banned|blocked|locked|suspended|throttled|limited|available|again|retry)` +
		`\s+(?:until|till)(?:\s*:)?\s*(\d{10,13}(?:\.\d{1,9})?)` + endRE)

	// isoDate and tenDigits are the cheap scans that decide whether the
	// instant grammars are worth running on a text.
	isoDate   = regexp.MustCompile(`\d{4}-\d{2}-\d{2}`)
	tenDigits = regexp.MustCompile(`\d{10}`)

	// component splits a duration found by prose into its parts.
	component = regexp.MustCompile(`(?i)(\d+(?:\.\d+)?)` + quoteRE + `\s*(` + unitRE + `)`)

	// unitDurationRE is a whole value made of duration parts: "6m0s",
	// "1s", "20ms", "2m59.56s" (OpenAI's and Groq's reset headers).
	unitDurationRE = regexp.MustCompile(`(?i)^(?:\d{1,12}(?:\.\d{1,12})?` + unitRE + `){1,4}$`)

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

// unitDuration reads a value that is a duration with units and nothing
// else ("6m0s", "20ms"), rounded as prose is.
func unitDuration(v string) (time.Duration, bool) {
	if !unitDurationRE.MatchString(v) {
		return 0, false
	}
	return proseDuration(v)
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
