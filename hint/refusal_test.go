package hint

import (
	"net/http"
	"testing"
)

func TestIsRefusal(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		header []string
		want   bool
	}{
		{"429 bare", 429, nil, true},
		{"429 with Retry-After", 429, []string{"Retry-After", "3"}, true},
		// GitHub's primary limit, as GitHub sends it (403, or 429).
		{"GitHub primary 403", 403, []string{"X-Ratelimit-Limit", "5000", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Used", "5000",
			"X-Ratelimit-Reset", "1767323047", "X-Ratelimit-Resource", "core", "X-Github-Request-Id", "CC58:1A4E:9C1F2:A3E1B:6785C3F1"}, true},
		{"GitHub primary 429", 429, []string{"X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "1767323047"}, true},
		// GitHub's secondary limit: the primary budget is far from spent.
		{"GitHub secondary 403", 403, []string{"Retry-After", "60", "X-Ratelimit-Limit", "5000", "X-Ratelimit-Remaining", "4987",
			"X-Ratelimit-Used", "13", "X-Ratelimit-Reset", "1767326645", "X-Ratelimit-Resource", "core"}, true},
		{"X spent 403", 403, []string{"X-Rate-Limit-Limit", "15", "X-Rate-Limit-Remaining", "0", "X-Rate-Limit-Reset", "1767323047"}, true},
		{"IETF spent 403", 403, []string{"RateLimit", `"default";r=0;t=3`}, true},
		{"503 with Retry-After", 503, []string{"Retry-After", "120"}, true},
		// Not refusals.
		{"403 permission error", 403, []string{"X-Github-Request-Id", "CC58:1A4E"}, false},
		{"403 with budget left", 403, []string{"X-Ratelimit-Limit", "5000", "X-Ratelimit-Remaining", "4999", "X-Ratelimit-Reset", "1767326645"}, false},
		{"503 bare", 503, nil, false},
		{"500 with Retry-After", 500, []string{"Retry-After", "1"}, false},
		{"200 spent", 200, []string{"X-Ratelimit-Remaining", "0"}, false},
		{"401 spent", 401, []string{"X-Ratelimit-Remaining", "0"}, false},
	} {
		h := http.Header{}
		for i := 0; i+1 < len(c.header); i += 2 {
			h.Set(c.header[i], c.header[i+1])
		}
		if got := IsRefusal(&http.Response{StatusCode: c.status, Header: h}); got != c.want {
			t.Errorf("%s: IsRefusal = %v, want %v", c.name, got, c.want)
		}
	}
	if IsRefusal(nil) {
		t.Error("IsRefusal(nil) = true")
	}
}
