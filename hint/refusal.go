package hint

import (
	"net/http"
	"time"
)

// IsRefusal reports whether resp refuses a request for quota, by its
// evidence:
//
//	429                                     always
//	403 with Retry-After                    GitHub's secondary rate limit
//	403 with a spent budget (remaining 0)   GitHub's primary rate limit
//	                                        (x-ratelimit-remaining: 0), and
//	                                        any budget BudgetFrom reads
//	503 with Retry-After                    an overloaded service's hint
//
// Every other 403 is a permission error, not a pause: a refusal that names
// no wait and no spent budget is no quota's business.
func IsRefusal(resp *http.Response) bool {
	if resp == nil {
		return false
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable:
		return resp.Header.Get("Retry-After") != ""
	case http.StatusForbidden:
		if resp.Header.Get("Retry-After") != "" {
			return true
		}
		// Only the remaining count matters here, not when it resets: no
		// clock is needed.
		b, ok := BudgetFrom(resp, time.Time{})
		return ok && b.Remaining == 0
	}
	return false
}
