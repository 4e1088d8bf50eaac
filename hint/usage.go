package hint

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// This file reads Meta's usage headers (Facebook, Instagram and WhatsApp
// Graph API), JSON objects in a header field. Meta throttles with HTTP 400
// or 403 and an error code rather than 429, and puts the wait here:
//
//	X-Business-Use-Case-Usage: {"<business id>": [{"type": "pages",
//	    "call_count": 100, "total_cputime": 25, "total_time": 25,
//	    "estimated_time_to_regain_access": 5}]}      5 minutes
//	X-Ad-Account-Usage: {"acc_id_util_pct": 100,
//	    "reset_time_duration": 120}                  120 seconds
//
// call_count, total_time and total_cputime are percentages of a quota, not
// waits; X-App-Usage carries only those and gives no hint.

// usageWait is the longest wait of the usage headers.
func usageWait(h http.Header, _ time.Time) (time.Duration, bool) {
	var longest time.Duration
	for _, v := range header(h, "X-Business-Use-Case-Usage") {
		longest = max(longest, businessUseCase(v))
	}
	for _, v := range header(h, "X-Ad-Account-Usage") {
		longest = max(longest, adAccount(v))
	}
	return longest, longest > 0
}

// decodeJSON decodes a header value of at most MaxBody bytes.
func decodeJSON(v string, dst any) bool {
	if len(v) > MaxBody {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	dec.UseNumber()
	return dec.Decode(dst) == nil
}

// businessUseCase reads estimated_time_to_regain_access, in minutes, of
// every entry: the longest wins (every throttled use case has to recover).
func businessUseCase(v string) time.Duration {
	var doc map[string][]map[string]any
	if !decodeJSON(v, &doc) {
		return 0
	}
	var longest time.Duration
	for _, entries := range doc {
		for _, e := range entries {
			if n, ok := e["estimated_time_to_regain_access"].(json.Number); ok {
				d, _ := delta(n.String(), time.Minute, true)
				longest = max(longest, d)
			}
		}
	}
	return longest
}

// adAccount reads reset_time_duration, in seconds, when the ad account's
// utilisation (acc_id_util_pct) has reached 100%: below it the field says
// when the usage count resets, which is no wait.
func adAccount(v string) time.Duration {
	var doc map[string]any
	if !decodeJSON(v, &doc) {
		return 0
	}
	pct, _ := doc["acc_id_util_pct"].(json.Number)
	reset, _ := doc["reset_time_duration"].(json.Number)
	if u, err := strconv.ParseFloat(pct.String(), 64); err != nil || u < 100 {
		return 0
	}
	d, _ := delta(reset.String(), time.Second, true)
	return d
}
