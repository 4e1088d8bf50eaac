package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/sim"
)

// chromium returns the path of a Chromium to drive, skipping the test when
// there is none, or failing it under QUOTAGATE_REQUIRE_REDIS (as in CI,
// where .ci/run installs Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if redistest.RequireRedis(os.Getenv(redistest.RequireEnv)) {
		t.Fatalf("chromium not found in PATH and %s is set; install it: apt-get install -y chromium", redistest.RequireEnv)
	}
	t.Skipf("chromium not found in PATH; skipping the browser test (apt-get install -y chromium; set %s=1 to make this a failure)", redistest.RequireEnv)
	return ""
}

// browser starts a headless Chromium with a fresh profile and returns a
// context to drive one tab of it.
func browser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	if err := chromedp.Do(bctx); err != nil { // start the browser now
		t.Fatalf("starting chromium: %v", err)
	}
	return bctx
}

// backAt finds the instant a Deferral message says the task comes back.
var backAt = regexp.MustCompile(`paused by the provider; back at (\S+), no retry spent`)

// TestBrowser runs the gate mode of the demo in-process on a real Redis
// with -ui's server, and drives a real headless Chromium through it as an
// operator would: the inspector shows the constrained carrier's scope
// paused with its remaining time and refreshes itself; its Resume button
// lifts the pause and the scope leaves the page; asynqmon's Retry tab of
// the mode's queue holds a deferred task whose last error names that pause.
//
// The carrier's window (40 s, counted from its first request, so the
// pause is as long in every run) is longer than the test's steps,
// so the pause is in force while the page is read and the deferred tasks
// still wait in the Retry tab afterwards; the run is cancelled at the end.
func TestBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	bctx := browser(t, ctx)

	srv := redistest.Start(t)
	e, closeEnv, err := openEnv(options{redis: "redis://" + srv.Addr, ui: "in-process"})
	if err != nil {
		t.Fatal(err)
	}
	defer closeEnv()
	u, err := startUI("127.0.0.1:0", &e)
	if err != nil {
		t.Fatal(err)
	}
	defer u.stop()

	gate := mode{Name: "gate", Gate: true}
	s := settings{
		quota:   sim.Quota{Shape: sim.FixedFirst, Rate: 5, Window: 40 * time.Second},
		dialect: mustDialect("prose"),
		polls:   30,
		workers: 10,
		seed:    1,
		latency: 5 * time.Millisecond,
		timeout: time.Minute,
	}
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := runMode(runCtx, e, gate.Name, gate, s, workload(s.polls, s.free, s.seed), nil)
		done <- err
	}()
	defer func() { stopRun(); <-done }()

	base := "http://" + u.addr
	queue, prefix := e.names(gate.Name)
	acme := quotagate.Scope{Provider: constrained, Account: quotagate.Fingerprint(acmeCredential)}

	// Wait (over plain HTTP) until the carrier's refusal paused the scope.
	waitPaused(t, ctx, base+"/quotagate/gate/?format=json")

	row := `tr.pause[data-provider="` + constrained + `"]`
	cell := func(class string) chromedp.CSS { return chromedp.CSS(row + " td." + class) }
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/quotagate/gate/"), chromedp.WaitVisible(cell("remaining"))); err != nil {
		t.Fatalf("inspector: %v", err)
	}
	account, _ := chromedp.Run(bctx, chromedp.Text(cell("account")))
	until, _ := chromedp.Run(bctx, chromedp.Text(cell("until")))
	rem1, _ := chromedp.Run(bctx, chromedp.Text(cell("remaining")))
	d1, err := time.ParseDuration(rem1)
	if account != acme.Account || err != nil || d1 <= 0 || d1 > s.quota.Window {
		t.Fatalf("inspector row: account %q, remaining %q (%v); want %s paused for up to %v", account, rem1, err, acme.Account, s.quota.Window)
	}
	deadline, err := time.Parse(time.RFC3339, until)
	if err != nil {
		t.Fatalf("inspector: until %q: %v", until, err)
	}
	t.Logf("inspector: %s paused until %s, %s left", account, until, rem1)

	// The page reloads itself: the remaining time it shows goes down.
	for {
		rem, err := chromedp.Run(bctx, chromedp.Text(cell("remaining")))
		if err != nil {
			t.Fatalf("inspector refresh: %v", err)
		}
		if d, err := time.ParseDuration(rem); err == nil && d < d1 {
			t.Logf("inspector refreshed itself: %s left", rem)
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the inspector never refreshed its remaining time")
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Lift the pause with the page's Resume button. A click may land while
	// the page reloads itself: try again then.
	for attempt := 1; ; attempt++ {
		cctx, ccancel := context.WithTimeout(bctx, 5*time.Second)
		err := chromedp.Do(cctx, chromedp.Click(chromedp.CSS(row+" button.resume")), chromedp.WaitVisible(chromedp.ID("none")))
		ccancel()
		if err == nil {
			break
		}
		if attempt == 3 || ctx.Err() != nil {
			t.Fatalf("resume through the page: %v", err)
		}
	}
	if notice, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID("notice"))); err != nil || notice != "resumed "+acme.String() {
		t.Errorf("after resume the page says %q (%v)", notice, err)
	}
	g := quotagate.New(e.rdb, quotagate.Config{Prefix: prefix})
	defer g.Close()
	if rem, err := g.Remaining(ctx, acme); err != nil || rem != 0 {
		t.Errorf("after the page's resume the library reads %v, %v; want open", rem, err)
	}

	// asynqmon's Retry tab: a deferred task whose last error names the pause.
	deferred := chromedp.Search(`//td[contains(., "paused by the provider; back at")]`)
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/queues/"+queue+"?status=retry"), chromedp.WaitVisible(deferred)); err != nil {
		t.Fatalf("asynqmon Retry tab: %v", err)
	}
	if path := os.Getenv("QUOTAGATE_SCREENSHOT"); path != "" { // the README's picture of a pause
		if err := chromedp.Do(bctx, chromedp.EmulateViewport(1400, 900)); err != nil {
			t.Fatalf("viewport: %v", err)
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(90))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lastErr, err := chromedp.Run(bctx, chromedp.Text(deferred))
	if err != nil {
		t.Fatalf("asynqmon Retry tab: %v", err)
	}
	t.Logf("asynqmon, Retry tab, last error: %s", lastErr)
	m := backAt.FindStringSubmatch(lastErr)
	if m == nil {
		t.Fatalf("last error %q names no instant the task comes back", lastErr)
	}
	named, err := time.Parse(time.RFC3339Nano, m[1])
	// The task wakes MaxHold + 1 s before the deadline to hold the rest, on
	// asynq's whole second; peers' refusals may have moved the deadline a
	// little later after this task was deferred (the carrier rounds its
	// hints to the second).
	if err != nil || named.After(deadline.Add(2*time.Second)) || deadline.Sub(named) > 5*time.Second {
		t.Errorf("the deferral says back at %s (%v), the inspector showed the pause until %s", m[1], err, until)
	}
	if !strings.Contains(lastErr, acme.String()) {
		t.Errorf("the deferral %q does not name the scope %s", lastErr, acme)
	}
}

// waitPaused polls the inspector's JSON until it lists the constrained
// carrier's scope paused for more than a second.
func waitPaused(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Pauses []struct {
				Provider  string
				Remaining float64 `json:"remaining_seconds"`
			} `json:"pauses"`
		}
		if resp.StatusCode == http.StatusOK { // 404 until the mode's gate exists
			if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
				t.Fatalf("inspector JSON: %v", err)
			}
		}
		resp.Body.Close()
		for _, p := range page.Pauses {
			// The refusal's pause, not a wait of a round trip: a slow
			// start's first requests wait for answers (ReasonInFlight),
			// shown for some 20 ms.
			if p.Provider == constrained && p.Remaining > 1 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("the constrained carrier's scope was never paused")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
