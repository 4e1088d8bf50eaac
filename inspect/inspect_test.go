package inspect

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate"
)

// odd is an account with the characters the key encoding escapes and HTML
// that must not reach the page raw.
var odd = quotagate.Scope{Provider: "acme", Account: `a:{1}%<b>"x"</b>`}

// setup serves the inspector of a fresh gate under /quotagate/, as the
// example mounts it, and pauses odd for a minute.
func setup(t *testing.T, opts Options) (*quotagate.Gate, *httptest.Server) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	g := quotagate.New(rdb, quotagate.Config{Prefix: "qgtest"})
	t.Cleanup(func() { g.Close() })
	if _, err := g.Pause(context.Background(), odd, time.Minute); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/quotagate/", http.StripPrefix("/quotagate", Handler(g, opts)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return g, srv
}

func get(t *testing.T, u string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestPageHTML(t *testing.T) {
	_, srv := setup(t, Options{})
	resp, body := get(t, srv.URL+"/quotagate/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="2; url=./">`,
		`<td class="provider">acme</td>`,
		`<td class="account">a:{1}%&lt;b&gt;&#34;x&#34;&lt;/b&gt;</td>`,
		`<td class="until">2025-01-02T03:05:05.000Z</td>`,
		`<td class="remaining">1m0s</td>`,
		`<td class="reason">paused</td>`,
		`Read-only.`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, "<b>") || strings.Contains(body, `action="resume"`) {
		t.Errorf("raw account HTML or an action on a read-only page:\n%s", body)
	}
	// Without the trailing slash the mux sends the browser to the page.
	resp, _ = get(t, srv.URL+"/quotagate")
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/quotagate/" {
		t.Errorf("/quotagate: %d at %s", resp.StatusCode, resp.Request.URL.Path)
	}
}

func TestPageJSON(t *testing.T) {
	_, srv := setup(t, Options{Refresh: -1})
	for _, how := range [][]string{{"/quotagate/?format=json"}, {"/quotagate/", "Accept", "application/json"}} {
		resp, body := get(t, srv.URL+how[0], how[1:]...)
		var got struct {
			Pauses []struct {
				Provider, Account, Until string
				Remaining                float64 `json:"remaining_seconds"`
			}
			Actions bool
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v: %d, %v: %s", how, resp.StatusCode, err, body)
		}
		if len(got.Pauses) != 1 || got.Pauses[0].Account != odd.Account || got.Pauses[0].Remaining != 60 ||
			got.Pauses[0].Until != "2025-01-02T03:05:05.000Z" || got.Actions {
			t.Errorf("%v: %s", how, body)
		}
	}
	if _, body := get(t, srv.URL+"/quotagate/"); strings.Contains(body, "http-equiv") {
		t.Errorf("Refresh < 0 still refreshes:\n%s", body)
	}
}

// post sends a form the way a browser of origin would (origin "" sends no
// Origin header, as curl does); redirects are not followed.
func post(t *testing.T, u, origin string, form url.Values, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func scopeForm(s quotagate.Scope, kv ...string) url.Values {
	f := url.Values{"provider": {s.Provider}, "account": {s.Account}}
	for i := 0; i+1 < len(kv); i += 2 {
		f.Set(kv[i], kv[i+1])
	}
	return f
}

func remaining(t *testing.T, g *quotagate.Gate, s quotagate.Scope) time.Duration {
	t.Helper()
	d, err := g.Remaining(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestActionsDisabled: a read-only page refuses to act.
func TestActionsDisabled(t *testing.T) {
	g, srv := setup(t, Options{})
	resp, _ := post(t, srv.URL+"/quotagate/resume", srv.URL, scopeForm(odd))
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST resume: %d, want 403", resp.StatusCode)
	}
	resp, _ = get(t, srv.URL+"/quotagate/resume")
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET resume: %d, want 405", resp.StatusCode)
	}
	if remaining(t, g, odd) != time.Minute {
		t.Error("the pause changed")
	}
}

// TestActions: resume and pause through the page, as a browser (303 back
// to the page) and as a script (JSON).
func TestActions(t *testing.T) {
	g, srv := setup(t, Options{Actions: true})
	_, body := get(t, srv.URL+"/quotagate/")
	if !strings.Contains(body, `<form class="inline" method="post" action="resume">`) || !strings.Contains(body, `action="pause"`) {
		t.Fatalf("no action forms:\n%s", body)
	}

	resp, _ := post(t, srv.URL+"/quotagate/resume", srv.URL, scopeForm(odd))
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resume: %d", resp.StatusCode)
	}
	loc, _ := resp.Location()
	if loc.Path != "/quotagate/" || !strings.HasPrefix(loc.Query().Get("done"), "resumed acme/") {
		t.Errorf("resume sends the browser to %v", loc)
	}
	if remaining(t, g, odd) != 0 {
		t.Error("not resumed")
	}
	_, body = get(t, loc.String())
	if !strings.Contains(body, `id="none"`) || !strings.Contains(body, `class="notice"`) {
		t.Errorf("page after resume:\n%s", body)
	}

	resp, body = post(t, srv.URL+"/quotagate/pause", srv.URL, scopeForm(odd, "duration", "90s"), "Accept", "application/json")
	var p struct {
		Paused    bool
		Remaining float64 `json:"remaining_seconds"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil || resp.StatusCode != 200 || !p.Paused || p.Remaining != 90 {
		t.Errorf("pause as JSON: %d, %v: %s", resp.StatusCode, err, body)
	}
	// Monotonic: a shorter manual pause keeps the later deadline.
	post(t, srv.URL+"/quotagate/pause", "", scopeForm(odd, "duration", "5s"))
	if d := remaining(t, g, odd); d != 90*time.Second {
		t.Errorf("after a shorter pause: %v, want 90s", d)
	}

	for _, c := range []struct {
		path string
		form url.Values
	}{
		{"/quotagate/pause", scopeForm(odd, "duration", "forever")},
		{"/quotagate/pause", scopeForm(odd, "duration", "13h")},
		{"/quotagate/pause", scopeForm(odd)},
		{"/quotagate/resume", scopeForm(quotagate.Scope{Account: "x"})},
	} {
		if resp, body := post(t, srv.URL+c.path, srv.URL, c.form); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s %v: %d %s, want 400", c.path, c.form, resp.StatusCode, body)
		}
	}
}

// TestCrossOrigin: another site cannot make an operator's browser act.
func TestCrossOrigin(t *testing.T) {
	g, srv := setup(t, Options{Actions: true})
	for _, h := range [][]string{
		{"Origin", "https://evil.example"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
	} {
		resp, _ := post(t, srv.URL+"/quotagate/resume", "", scopeForm(odd), h...)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%v: %d, want 403", h, resp.StatusCode)
		}
	}
	if remaining(t, g, odd) != time.Minute {
		t.Error("a cross-origin request lifted the pause")
	}
	resp, _ := post(t, srv.URL+"/quotagate/resume", "", scopeForm(odd), "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusSeeOther || remaining(t, g, odd) != 0 {
		t.Errorf("same-origin: %d", resp.StatusCode)
	}
}

// TestStoreDown: the page says Redis failed, with 503.
func TestStoreDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	g := quotagate.New(rdb, quotagate.Config{StoreTimeout: 5 * time.Second})
	srv := httptest.NewServer(Handler(g, Options{}))
	defer srv.Close()
	resp, body := get(t, srv.URL+"/")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `class="error"`) || strings.Contains(body, `id="none"`) {
		t.Errorf("%d:\n%s", resp.StatusCode, body)
	}
	resp, body = get(t, srv.URL+"/?format=json")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"error"`) {
		t.Errorf("%d:\n%s", resp.StatusCode, body)
	}
}

// TestPageNamedWithIndex: a page mounted beside others under an index
// names its gate in its title, heading and JSON, and links back to the
// index; its link resolves to the index from the page's URL, and survives
// an action's redirect. Without a name or an index the page has neither.
func TestPageNamedWithIndex(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	g := quotagate.New(rdb, quotagate.Config{Prefix: "qgtest"})
	t.Cleanup(func() { g.Close() })
	mux := http.NewServeMux()
	mux.HandleFunc("/quotagate/{$}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "the index") })
	mux.Handle("/quotagate/gate+limit/", http.StripPrefix("/quotagate/gate+limit",
		Handler(g, Options{Name: "gate+limit", Index: "../", Actions: true})))
	mux.Handle("/plain/", http.StripPrefix("/plain", Handler(g, Options{})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	page := srv.URL + "/quotagate/gate+limit/"
	resp, body := get(t, page)
	for _, want := range []string{ // html/template writes '+' as &#43;
		`<title>gate&#43;limit · quotagate: 0 paused</title>`,
		`<h1><span id="name">gate&#43;limit</span> · quotagate: scopes paused now</h1>`,
		`<a href="../" id="index">`,
	} {
		if resp.StatusCode != 200 || !strings.Contains(body, want) {
			t.Errorf("%d: the page lacks %s:\n%s", resp.StatusCode, want, body)
		}
	}
	base, _ := url.Parse(page)
	index, _ := url.Parse("../")
	if _, body := get(t, base.ResolveReference(index).String()); body != "the index" {
		t.Errorf("the link leads to %q, want the index", body)
	}
	if _, body := get(t, page+"?format=json"); !strings.Contains(body, `"name": "gate+limit"`) {
		t.Errorf("JSON without the name: %s", body)
	}
	// After an action the browser lands on the same page, link included.
	resp, _ = post(t, page+"pause", srv.URL, scopeForm(odd, "duration", "90s"))
	loc, err := resp.Location()
	if err != nil || loc.Path != "/quotagate/gate+limit/" {
		t.Fatalf("pause sends the browser to %v (%v)", loc, err)
	}
	if _, body := get(t, loc.String()); !strings.Contains(body, `id="index"`) || !strings.Contains(body, `1 paused`) {
		t.Errorf("the page after pausing:\n%s", body)
	}

	_, body = get(t, srv.URL+"/plain/")
	if !strings.Contains(body, "<title>quotagate: 1 paused</title>") || strings.Contains(body, `id="index"`) || strings.Contains(body, `id="name"`) {
		t.Errorf("a page without Name and Index:\n%s", body)
	}
}
