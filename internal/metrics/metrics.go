// Package metrics holds a gate's Prometheus series: the counters and
// histograms the admission loop, the refusals, the observations and the
// store's round trips move, each provider's series created at zero when
// the gate first meets it. The names, labels and their values are
// quotagate's API, documented on Gate.Collector; the collector there adds
// what is read at scrape time (the paused scopes, the feed's state).
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcome is an admission outcome, a value of quotagate_admissions_total's
// outcome label.
type Outcome string

// The outcomes, as Gate.Collector's doc lists them.
const (
	Admitted         Outcome = "admitted"
	Held             Outcome = "held"
	DeferredPaused   Outcome = "deferred_paused"
	DeferredBudget   Outcome = "deferred_budget"
	DeferredLimited  Outcome = "deferred_limited"
	DeferredLearned  Outcome = "deferred_learned"
	DeferredInFlight Outcome = "deferred_in_flight"
	FailOpen         Outcome = "fail_open"
	FailClosed       Outcome = "fail_closed"
)

// Outcomes are all the outcome label's values, in the order the Collector
// doc lists them: a provider's series start at zero for each.
var Outcomes = []Outcome{Admitted, Held, DeferredPaused, DeferredBudget, DeferredLimited,
	DeferredLearned, DeferredInFlight, FailOpen, FailClosed}

// StoreOps are all the op label's values: the operations the store times
// and counts (the run and bounded calls of internal/store), each with its
// series at zero from the start. The Collector doc lists them;
// quotagate's TestMetricsDocumented, TestMetricsOpsInSource and
// TestMetricsOpsEmitted hold the doc, the source and the scrape to this
// list, so a new operation is added here first.
var StoreOps = []string{"admit", "announce", "observe", "pause", "release", "resume", "scan", "state"}

// storeBuckets are the bounds of quotagate_store_duration_seconds, in
// seconds. A round trip to a Redis nearby takes 0.1 to 1 ms (the scripts
// themselves run in microseconds), so the buckets are dense below a
// millisecond to show a healthy store's shape, then widen to the default
// Config.StoreTimeout, 250 ms, past which a call is cut and the gate fails
// open or closed.
var storeBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}

// waitBuckets are the bounds of quotagate_wait_seconds, in seconds: a slot
// reserved a few ms ahead, a hold (at most Tuning.MaxHold, 1.5 s), a
// window of seconds, a pause of minutes to the default MaxPause, 12 h.
var waitBuckets = []float64{.01, .05, .1, .25, .5, 1, 1.5, 2.5, 5, 10, 30, 60, 300, 900, 3600, 43200}

// Metrics are one gate's series. A nil *Metrics counts nothing.
type Metrics struct {
	classes []string // the class label's values

	admissions, refusals, inFlight, budgets, storeErrors *prometheus.CounterVec
	storeSeconds, waits                                  *prometheus.HistogramVec

	providers sync.Map // provider name → struct{}: the providers met, with their zero series
}

// New returns the series of a gate whose work is of the classes given
// (the class label's values), the store's at zero for every op.
func New(classes ...string) *Metrics {
	m := &Metrics{
		classes: classes,
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quotagate_admissions_total",
			Help: "Admission decisions of the gate, by provider, class of work and outcome.",
		}, []string{"provider", "class", "outcome"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "quotagate_wait_seconds",
			Help:    "Waits the gate imposed (holds in-process and deferrals' delays), by provider and class of work.",
			Buckets: waitBuckets,
		}, []string{"provider", "class"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quotagate_refusals_total",
			Help: "Pauses recorded from provider refusals, by provider.",
		}, []string{"provider"}),
		inFlight: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quotagate_in_flight_refusals_total",
			Help: "Provider refusals of one request too many in flight under a learned concurrency limit (no pause), by provider.",
		}, []string{"provider"}),
		budgets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quotagate_budget_observations_total",
			Help: "Quota budgets learned from provider response headers, by provider.",
		}, []string{"provider"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quotagate_store_errors_total",
			Help: "Redis round trips of the gate that failed or timed out, by operation.",
		}, []string{"op"}),
		storeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "quotagate_store_duration_seconds",
			Help:    "Duration of the gate's Redis round trips, by operation.",
			Buckets: storeBuckets,
		}, []string{"op"}),
	}
	for _, op := range StoreOps {
		m.storeErrors.WithLabelValues(op)
		m.storeSeconds.WithLabelValues(op)
	}
	return m
}

// Collectors are the series as collectors, for a Collector's Describe and
// Collect.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.admissions, m.waits, m.refusals, m.inFlight, m.budgets, m.storeErrors, m.storeSeconds}
}

// Providers calls f with every provider the gate met.
func (m *Metrics) Providers(f func(provider string)) {
	m.providers.Range(func(p, _ any) bool {
		f(p.(string))
		return true
	})
}

// meet creates, the first time the gate meets provider, its series at
// zero: every outcome of every class, its waits, refusals and budgets.
func (m *Metrics) meet(provider string) {
	if _, met := m.providers.LoadOrStore(provider, struct{}{}); met {
		return
	}
	for _, c := range m.classes {
		for _, o := range Outcomes {
			m.admissions.WithLabelValues(provider, c, string(o))
		}
		m.waits.WithLabelValues(provider, c)
	}
	m.refusals.WithLabelValues(provider)
	m.inFlight.WithLabelValues(provider)
	m.budgets.WithLabelValues(provider)
}

// Admission counts one admission outcome of work of class c.
func (m *Metrics) Admission(provider, c string, o Outcome) {
	if m != nil {
		m.meet(provider)
		m.admissions.WithLabelValues(provider, c, string(o)).Inc()
	}
}

// Wait observes a wait d the gate imposed on work of class c.
func (m *Metrics) Wait(provider, c string, d time.Duration) {
	if m != nil && d > 0 {
		m.meet(provider)
		m.waits.WithLabelValues(provider, c).Observe(d.Seconds())
	}
}

// Refusal counts a pause recorded from a refusal.
func (m *Metrics) Refusal(provider string) {
	if m != nil {
		m.meet(provider)
		m.refusals.WithLabelValues(provider).Inc()
	}
}

// InFlightRefusal counts a refusal under a learned concurrency limit.
func (m *Metrics) InFlightRefusal(provider string) {
	if m != nil {
		m.meet(provider)
		m.inFlight.WithLabelValues(provider).Inc()
	}
}

// BudgetObserved counts a budget learned from a response.
func (m *Metrics) BudgetObserved(provider string) {
	if m != nil {
		m.meet(provider)
		m.budgets.WithLabelValues(provider).Inc()
	}
}

// RoundTrip observes one store call that began at start and ended with
// err (store.Hooks.RoundTrip). A call cut because the caller's own
// context ended is timed but is not a store error.
func (m *Metrics) RoundTrip(ctx context.Context, op string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.storeSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil && ctx.Err() == nil {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}
