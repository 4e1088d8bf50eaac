package hint

import (
	"net/http"
	"strings"
	"time"
)

// This file reads the fields of the IETF draft
// draft-ietf-httpapi-ratelimit-headers: RateLimit and RateLimit-Policy, in
// the structured-field form of drafts 08 and later and the older forms.

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

// members splits the values of a structured field into its members.
func members(values []string) []string {
	if len(values) == 0 {
		return nil
	}
	return splitList(strings.Join(values, ","))
}

// readIETF records the IETF fields of h in ps:
//
//	RateLimit: "default";r=50;t=30      under "ietf:default": remaining r,
//	                                    reset t seconds (drafts 08 and later)
//	RateLimit: limit=100, remaining=50, reset=30
//	                                    under "ratelimit" (draft 07), the key
//	                                    of RateLimit-Limit/-Remaining/-Reset
//	RateLimit-Policy: "default";q=100;w=60
//	                                    under "ietf:default": limit q, window
//	                                    w seconds
//	RateLimit-Policy: 100;w=60          under "ratelimit" (older drafts, also
//	RateLimit-Limit: 10, 10;w=1, 1000;w=3600 in RateLimit-Limit)
func readIETF(h http.Header, ps policies) {
	for _, member := range members(header(h, "RateLimit")) {
		name, value, dict, params := parseMember(member)
		if dict {
			ps.get("ratelimit").readDict(name + "=" + value)
			continue
		}
		p := ps.get("ietf:" + name)
		setCount(&p.remaining, params["r"])
		p.setReset(rankDelta)(delta(params["t"], time.Second, false))
	}
	for _, member := range members(header(h, "RateLimit-Policy")) {
		name, _, dict, params := parseMember(member)
		if _, number := parseCount(name); dict || number {
			continue // an older quota policy, read below
		}
		p := ps.get("ietf:" + name)
		setCount(&p.limit, params["q"])
		if w, ok := delta(params["w"], time.Second, false); ok && p.window == 0 {
			p.window = w
		}
	}
	old := ps.get("ratelimit")
	readQuotaPolicies(header(h, "RateLimit-Policy"), old)
	readQuotaPolicies(header(h, "RateLimit-Limit"), old)
}

// readQuotaPolicies reads a quota-policy list of the drafts before 08:
// items are quotas with a window parameter (`100;w=60`), and a first item
// without one is the quota in effect (`10, 10;w=1, 1000;w=3600`). The
// limit is the first item's quota, the window that of the first item with
// the same quota and a w.
func readQuotaPolicies(values []string, p *policy) {
	limit := int64(-1)
	for _, member := range members(values) {
		name, _, dict, params := parseMember(member)
		q, ok := parseCount(name)
		if dict || !ok {
			continue
		}
		if limit < 0 {
			limit = q
		}
		if w, ok := delta(params["w"], time.Second, false); ok && q == limit && p.window == 0 {
			p.window = w
		}
	}
	if p.limit < 0 {
		p.limit = limit
	}
}
