package quotagate_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-github/v74/github"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
)

// githubAnswer is how the fake GitHub API answers: a success, its primary
// rate limit (403 with x-ratelimit-remaining: 0 and the reset in epoch
// seconds), its secondary rate limit (403 with retry-after) or a
// permission error (a bare 403).
type githubAnswer int32

const (
	githubOK githubAnswer = iota
	githubPrimary
	githubSecondary
	githubForbidden
)

// fakeGitHub answers GET /repos/{owner}/{repo} as api.github.com does, with
// the headers and bodies of its documentation, on the clock now.
func fakeGitHub(t *testing.T, answer *atomic.Int32, hits *atomic.Int32, now func() time.Time) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h := w.Header()
		h.Set("Content-Type", "application/json; charset=utf-8")
		h.Set("X-Github-Request-Id", "CC58:1A4E:9C1F2:A3E1B:6785C3F1")
		h.Set("X-Ratelimit-Limit", "5000")
		h.Set("X-Ratelimit-Resource", "core")
		h.Set("X-Ratelimit-Reset", strconv.FormatInt(now().Add(time.Hour).Unix(), 10))
		h.Set("X-Ratelimit-Remaining", "4321")
		switch githubAnswer(answer.Load()) {
		case githubPrimary:
			h.Set("X-Ratelimit-Remaining", "0")
			h.Set("X-Ratelimit-Used", "5000")
			h.Set("X-Ratelimit-Reset", strconv.FormatInt(now().Add(time.Minute).Unix(), 10))
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`))
		case githubSecondary:
			h.Set("Retry-After", "30")
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`))
		case githubForbidden:
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"message":"Resource not accessible by integration","documentation_url":"https://docs.github.com/rest/repos/repos#get-a-repository","status":"403"}`))
		default:
			w.Write([]byte(`{"id":1,"name":"r","full_name":"o/r"}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestGitHubClientPausesOnBothLimits uses go-github the quick-start way,
// with the gate's Transport underneath, against a server that answers like
// GitHub: its primary and its secondary rate limits (both 403) pause the
// scope, a permission 403 does not.
func TestGitHubClientPausesOnBothLimits(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer githubAnswer
		paused bool
		least  time.Duration // the pause is at least this long
	}{
		{"primary", githubPrimary, true, 50 * time.Second}, // the reset, a minute ahead
		{"secondary", githubSecondary, true, 25 * time.Second},
		{"permission", githubForbidden, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			mr := miniredis.RunT(t)
			now := time.Now().Truncate(time.Second)
			mr.SetTime(now)
			rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { rdb.Close() })
			g := quotagate.New(rdb, quotagate.Config{Prefix: "gh"})
			t.Cleanup(func() { g.Close() })

			var answer, hits atomic.Int32
			srv := fakeGitHub(t, &answer, &hits, func() time.Time { return now })
			base, _ := url.Parse(srv.URL + "/")
			newClient := func() *github.Client {
				c := github.NewClient(&http.Client{Transport: g.Transport(nil)})
				c.BaseURL = base
				return c
			}
			client := newClient()

			scope := quotagate.Scope{Provider: "github", Account: quotagate.Fingerprint("ghp_token")}
			ctx := quotagate.WithScope(context.Background(), scope)

			if _, _, err := client.Repositories.Get(ctx, "o", "r"); err != nil {
				t.Fatalf("first call: %v", err)
			}
			answer.Store(int32(c.answer))
			_, _, err := client.Repositories.Get(ctx, "o", "r")
			var primary *github.RateLimitError
			var secondary *github.AbuseRateLimitError
			var other *github.ErrorResponse
			switch c.answer {
			case githubPrimary:
				if !errors.As(err, &primary) {
					t.Fatalf("err = %v (%T), want go-github's RateLimitError", err, err)
				}
			case githubSecondary:
				if !errors.As(err, &secondary) {
					t.Fatalf("err = %v (%T), want go-github's AbuseRateLimitError", err, err)
				}
			default:
				if !errors.As(err, &other) || other.Response.StatusCode != http.StatusForbidden {
					t.Fatalf("err = %v (%T), want a 403 ErrorResponse", err, err)
				}
			}

			p, err := g.State(context.Background(), scope)
			if err != nil {
				t.Fatal(err)
			}
			if paused := !p.Until.IsZero(); paused != c.paused || paused && p.Remaining < c.least {
				t.Fatalf("State = %+v; want paused %v for at least %v", p, c.paused, c.least)
			}
			if !c.paused {
				return
			}
			// A peer of the scope (another worker's client: go-github's own
			// memory of the limit stays in the first) sends nothing while it
			// is paused.
			answer.Store(int32(githubOK))
			before := hits.Load()
			_, _, err = newClient().Repositories.Get(ctx, "o", "r")
			var d *quotagate.Deferral
			if !errors.As(err, &d) || d.Scope != scope {
				t.Fatalf("peer: err = %v, want a *quotagate.Deferral of the scope", err)
			}
			if n := hits.Load(); n != before {
				t.Fatalf("the paused scope sent %d requests", n-before)
			}
		})
	}
}
