package quotagate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quotagate/quotagate/internal/metrics"
	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/store"
)

// scrape gathers a gate's metrics through a pedantic registry (which checks
// that what is collected was described) and returns every sample as
// "name{label=value,...}" → value; a histogram gives its _count.
func scrape(t *testing.T, g *Gate) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(g.Collector()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[name] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestMetricsOutcomes drives each admission outcome once and reads the
// counters back.
func TestMetricsOutcomes(t *testing.T) {
	_, rdb := newMini(t)
	ctx := context.Background()
	g := New(rdb, Config{Prefix: "qgtest", Tuning: Tuning{OpenCache: -1}, Logger: (&testLogBuffer{}).logger(), Limits: map[string][]Limit{"lim": {{Rate: 1, Period: time.Hour, Burst: 1}}}})
	defer g.Close()
	secret := Scope{Provider: "acme", Account: Fingerprint("secret")}
	open := Scope{Provider: "swift", Account: "acct-9"}

	if err := g.admit(ctx, open, 1, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.record(ctx, secret, scopeKeys("qgtest", secret), 30*time.Second, 0, grant{}); !ok {
		t.Fatal("refusal not recorded")
	}
	var d *Deferral
	if err := g.admit(ctx, secret, 1, false); !errors.As(err, &d) || d.Reason != ReasonPaused {
		t.Fatalf("paused scope: %v", err)
	}
	lim := Scope{Provider: "lim"}
	if err := g.admit(ctx, lim, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := g.admit(ctx, lim, 1, false); !errors.As(err, &d) || d.Reason != ReasonLimited {
		t.Fatalf("limited scope: %v", err)
	}

	got := scrape(t, g)
	for name, want := range map[string]float64{
		`quotagate_admissions_total{class=background,outcome=admitted,provider=swift}`:       1,
		`quotagate_admissions_total{class=background,outcome=deferred_paused,provider=acme}`: 1,
		`quotagate_admissions_total{class=background,outcome=admitted,provider=lim}`:         1,
		`quotagate_admissions_total{class=background,outcome=deferred_limited,provider=lim}`: 1,
		`quotagate_refusals_total{provider=acme}`:                                            1,
		`quotagate_store_duration_seconds{op=admit}_count`:                                   4,
		`quotagate_store_duration_seconds{op=pause}_count`:                                   1,
		`quotagate_paused_scopes{provider=acme}`:                                             1,
		`quotagate_paused_scopes{provider=swift}`:                                            0, // admitted for, nothing paused
		`quotagate_paused_scopes{provider=lim}`:                                              0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	for name := range got {
		if strings.Contains(name, "account") || strings.Contains(name, secret.Account) || strings.Contains(name, "acct-9") {
			t.Errorf("%s: an account in a label", name)
		}
		if strings.HasPrefix(name, "quotagate_store_errors_total") && got[name] != 0 {
			t.Errorf("%s = %v with a healthy store", name, got[name])
		}
	}
}

// TestMetricsHeld: a worker that waits out a short pause in-process counts
// as held, then admitted when the pause ends (real Redis: TIME must move).
func TestMetricsHeld(t *testing.T) {
	_, rdb, prefix := realRedis(t)
	ctx := context.Background()
	g := New(rdb, Config{Prefix: prefix, Tuning: Tuning{MaxHold: 2 * time.Second}})
	defer g.Close()
	s := Scope{Provider: "acme"}
	if _, err := g.Pause(ctx, s, MinPause); err != nil {
		t.Fatal(err)
	}
	if err := g.admit(ctx, s, 1, false); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, g)
	if got[`quotagate_admissions_total{class=background,outcome=held,provider=acme}`] < 1 ||
		got[`quotagate_admissions_total{class=background,outcome=admitted,provider=acme}`] != 1 {
		t.Errorf("after a held admission: %v", got)
	}
}

// TestMetricsStoreDown: a store that cannot answer counts fail_open (or
// fail_closed), a store error per failed round trip, and leaves the gauge out
// of the scrape instead of reporting zero pauses.
func TestMetricsStoreDown(t *testing.T) {
	for _, closed := range []bool{false, true} {
		g := New(refusingRedis(t), Config{Prefix: "qgtest", FailClosed: closed, StoreTimeout: 5 * time.Second, Logger: (&testLogBuffer{}).logger()})
		err := g.admit(context.Background(), Scope{Provider: "acme"}, 1, false)
		outcome := "fail_open"
		if closed {
			outcome = "fail_closed"
			var d *Deferral
			if !errors.As(err, &d) || d.Reason != ReasonStoreDown {
				t.Errorf("fail closed: %v", err)
			}
		} else if err != nil {
			t.Errorf("fail open: %v", err)
		}
		got := scrape(t, g)
		if got[`quotagate_admissions_total{class=background,outcome=`+outcome+`,provider=acme}`] != 1 {
			t.Errorf("%s not counted: %v", outcome, got)
		}
		if got[`quotagate_store_errors_total{op=admit}`] != 1 || got[`quotagate_store_errors_total{op=scan}`] != 1 {
			t.Errorf("store errors: %v", got)
		}
		for name := range got {
			if strings.HasPrefix(name, "quotagate_paused_scopes") {
				t.Errorf("%s reported while the store is down", name)
			}
		}
		g.Close()
	}
}

// TestMetricsCallerCancel: a call cut by the caller's own context is timed,
// not counted as a store error.
func TestMetricsCallerCancel(t *testing.T) {
	rdb, _ := hangingRedis(t)
	g := New(rdb, Config{Prefix: "qgtest", StoreTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := g.State(ctx, Scope{Provider: "acme"}); err == nil {
		t.Fatal("State answered on a silent store")
	}
	got := scrape2(t, g)
	if got[`quotagate_store_duration_seconds{op=state}_count`] != 1 || got[`quotagate_store_errors_total{op=state}`] != 0 {
		t.Errorf("after a cancelled call: %v", got)
	}
}

// scrape2 reads the counters without the gauge's SCAN (for a store that
// never answers).
func scrape2(t *testing.T, g *Gate) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range g.metrics.Collectors() {
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName() + "{" + m.GetLabel()[0].GetName() + "=" + m.GetLabel()[0].GetValue() + "}"
			if h := m.GetHistogram(); h != nil {
				out[name+"_count"] = float64(h.GetSampleCount())
			} else {
				out[name] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestMetricsNilSafe: a store built without metrics (as tests build them:
// no RoundTrip hook) counts nothing and does not panic, nor do nil
// metrics.
func TestMetricsNilSafe(t *testing.T) {
	_, rdb := newMini(t)
	st := store.New(store.Config{Client: rdb, Prefix: "qgtest", Timeout: 30 * time.Second, MaxPause: 12 * time.Hour})
	r := admitRequest(nil, 1, 0)
	r.Dry, r.Class = true, model.Interactive
	if _, err := st.Admit(context.Background(), scopeKeys("qgtest", Scope{Provider: "acme"}), r); err != nil {
		t.Fatal(err)
	}
	var m *metrics.Metrics
	m.Admission("acme", Background.String(), metrics.Admitted)
	m.Refusal("acme")
	m.BudgetObserved("acme")
}
