package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/quotagate/quotagate/internal/sim"
)

// scrapeCounter reads one sample of a counter from a /metrics endpoint; ok
// is false while the series does not exist.
func scrapeCounter(t *testing.T, url, name string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for k, want := range labels {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k {
					found = l.GetValue() == want
				}
			}
			if !found {
				continue next
			}
		}
		return m.GetCounter().GetValue() + m.GetGauge().GetValue(), true
	}
	return 0, false
}

// TestUIMetricsDuringRun scrapes the -ui server's /metrics while the gate
// mode runs against a carrier whose window (3 s) outlasts the longest
// in-process hold: the constrained carrier's deferrals show up as
// quotagate_admissions_total{outcome="deferred_paused"} before the run ends.
func TestUIMetricsDuringRun(t *testing.T) {
	e := miniEnv(t, "test")
	u, err := startUI("127.0.0.1:0", &e)
	if err != nil {
		t.Fatal(err)
	}
	defer u.stop()

	s := settings{
		quota:   sim.Quota{Shape: sim.FixedClock, Rate: 5, Window: 3 * time.Second},
		dialect: mustDialect("prose"),
		polls:   40,
		workers: 16,
		seed:    1,
		latency: 5 * time.Millisecond,
		timeout: 2 * time.Minute,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := runMode(ctx, e, "gate", mode{Name: "gate", Gate: true}, s, workload(s.polls, s.free, s.seed), nil)
		done <- err
	}()

	metrics := "http://" + u.addr + "/metrics"
	want := map[string]string{"mode": "gate", "provider": constrained, "outcome": "deferred_paused"}
	for {
		if v, ok := scrapeCounter(t, metrics, "quotagate_admissions_total", want); ok && v > 0 {
			t.Logf("during the run: quotagate_admissions_total%v = %v", want, v)
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the run ended (%v) and no scrape during it showed a deferral of %s", err, constrained)
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the run ended early: %v", err)
	default:
	}
	// The free carrier is never deferred; the refusals were counted.
	if v, _ := scrapeCounter(t, metrics, "quotagate_admissions_total", map[string]string{"provider": free, "outcome": "deferred_paused"}); v != 0 {
		t.Errorf("%s deferred %v times", free, v)
	}
	if v, _ := scrapeCounter(t, metrics, "quotagate_refusals_total", map[string]string{"mode": "gate", "provider": constrained}); v < 1 {
		t.Errorf("refusals of %s: %v, want at least the one that paused it", constrained, v)
	}
	// Nothing in /metrics names an account.
	if body := getBody(t, metrics); strings.Contains(body, "fp:") || strings.Contains(body, "account") {
		t.Errorf("an account in /metrics:\n%s", body)
	}
	cancel()
	<-done
}

// getBody returns the body of a GET of url.
func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// TestUIInspectorRoutes: /quotagate/ lists the gated modes, each mode's
// inspector answers under /quotagate/MODE/, and asynqmon keeps /.
func TestUIInspectorRoutes(t *testing.T) {
	e := miniEnv(t, "routes")
	u, err := startUI("127.0.0.1:0", &e)
	if err != nil {
		t.Fatal(err)
	}
	defer u.stop()
	base := "http://" + u.addr
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	if code, body := get("/quotagate/"); code != 200 || !strings.Contains(body, "No gated mode has started yet") {
		t.Errorf("index before any gate: %d %s", code, body)
	}
	if code, _ := get("/quotagate/gate/"); code != 404 {
		t.Errorf("inspector of a mode not started: %d, want 404", code)
	}
	// What run.go's server does for a gated mode.
	r := &run{mode: mode{Name: "gate+limit", Gate: true, Limit: true}, s: settings{workers: 1, quota: sim.Quota{Shape: sim.FixedClock, Rate: 1, Window: time.Second}}}
	srv, mux, closeGate := r.server(e, "q", "qgtest:routes", nil, nil)
	if err := srv.Start(mux); err != nil { // asynq releases its Redis client only on the Shutdown of a started server
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); closeGate() }()

	if code, body := get("/quotagate/"); code != 200 || !strings.Contains(body, `<a href="gate&#43;limit/">gate&#43;limit</a>`) {
		t.Errorf("index: %d %s", code, body)
	}
	code, body := get("/quotagate/gate+limit?format=json") // redirected to the slash
	var page struct {
		Pauses  []any `json:"pauses"`
		Actions bool  `json:"actions"`
	}
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil || page.Pauses == nil || !page.Actions {
		t.Errorf("inspector JSON: %d %v %s", code, err, body)
	}
	if code, body := get("/"); code != 200 || !strings.Contains(strings.ToLower(body), "asynq") {
		t.Errorf("asynqmon at /: %d", code)
	}
}
