package quotagate

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns the gate's Prometheus metrics. Nothing is registered
// anywhere until the caller does so, e.g. on a registry of its own:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(g.Collector())
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Labels carry the provider, never the account (an account may be a
// credential's fingerprint, and accounts are unbounded):
//
//	quotagate_admissions_total{provider,class,outcome}  counter; class is
//	    background or interactive (see Class); outcome is one of
//	    admitted          the task (or request) ran
//	    held              a worker waited in-process for a short pause, then
//	                      asked again (so the same task counts once more)
//	    deferred_paused   deferred: the scope is paused (a refusal, Gate.Pause)
//	    deferred_budget   deferred: the budget the provider advertises is
//	                      spent until its reset, or a probe's answer is awaited
//	    deferred_limited  deferred: the scope's Limit has no capacity
//	    deferred_learned  deferred: the limit it learned has no capacity
//	    deferred_in_flight  deferred: a Concurrent limit has every slot
//	                      taken (after a wait in-process of Tuning.MaxHold)
//	    fail_open         the store failed; it ran unchecked
//	    fail_closed       the store failed; deferred (Config.FailClosed)
//	quotagate_wait_seconds{provider,class}         histogram of the waits the gate
//	    imposed: each hold in-process and each deferral's delay
//	quotagate_refusals_total{provider}             counter: pauses recorded from refusals
//	quotagate_in_flight_refusals_total{provider}   counter: refusals of one request too many
//	    in flight under a learned concurrency limit: the refused task waits
//	    its own hint, the scope is not paused, the limit is lowered
//	quotagate_budget_observations_total{provider}  counter: budgets learned from response headers
//	quotagate_store_errors_total{op}               counter: failed Redis round trips
//	quotagate_store_duration_seconds{op}           histogram of Redis round trips
//	quotagate_paused_scopes{provider}              gauge, read from Redis at scrape time
//	quotagate_feed_stale                           gauge: 1 while the gate's feed of pauses
//	    is not fresh (not yet started, late or broken): every admission then
//	    asks Redis; 0 while the gate trusts it (see Tuning.OpenCache)
//	quotagate_feed_snapshots_total                 counter: snapshots of the waiting scopes
//	    the feed loaded: one at its start, one after each gap
//
// op is the store operation: admit, announce, observe, pause, release, resume, scan or state.
// A release ends a Concurrent limit's lease; an announce appends a change of a
// scope to the feed of pauses.
//
// Every counter series is there from the first scrape, at zero: the store's
// for every op at once, a provider's for every outcome as soon as the gate
// first meets the provider (an admission, a refusal or an observed budget),
// so that an alert on an increase has a series to match before the first
// event (every outcome of every class, and each class's waits). Providers are not known in advance: a provider the gate never met
// has no series.
//
// quotagate_paused_scopes is counted by the same bounded SCAN as Pauses,
// within one second; when that fails it is left out of the scrape (and the
// failure counted as a store error) rather than reported as a drop to zero.
// It reads 0 for a provider this gate has met and nothing paused.
//
// A second Collector of the same gate describes the same metrics: register
// one per registry. Gates sharing a registry need distinguishing labels
// (prometheus.WrapRegistererWith).
func (g *Gate) Collector() prometheus.Collector { return collector{g} }

// outcome is an admission outcome, a value of quotagate_admissions_total's
// outcome label.
type outcome string

const (
	outcomeAdmitted         outcome = "admitted"
	outcomeHeld             outcome = "held"
	outcomeDeferredPaused   outcome = "deferred_paused"
	outcomeDeferredLimited  outcome = "deferred_limited"
	outcomeDeferredBudget   outcome = "deferred_budget"
	outcomeDeferredLearned  outcome = "deferred_learned"
	outcomeDeferredInFlight outcome = "deferred_in_flight"
	outcomeFailOpen         outcome = "fail_open"
	outcomeFailClosed       outcome = "fail_closed"
)

// outcomes are all the outcome label's values, in the order the Collector
// doc lists them: a provider's series start at zero for each.
var outcomes = []outcome{outcomeAdmitted, outcomeHeld, outcomeDeferredPaused, outcomeDeferredBudget, outcomeDeferredLimited,
	outcomeDeferredLearned, outcomeDeferredInFlight, outcomeFailOpen, outcomeFailClosed}

// storeOps are all the op label's values: the operations the store times
// and counts (the run and bounded calls of internal/store), each
// with its series at zero from the start. The Collector doc lists them;
// TestMetricsDocumented, TestMetricsOpsInSource and TestMetricsOpsEmitted
// hold the doc, the source and the scrape to this list, so a new operation
// is added here first.
var storeOps = []string{"admit", "announce", "observe", "pause", "release", "resume", "scan", "state"}

// deferredOutcome is the outcome of a deferral for reason r.
func deferredOutcome(r Reason) outcome {
	switch r {
	case ReasonLimited:
		return outcomeDeferredLimited
	case ReasonLearned:
		return outcomeDeferredLearned
	case ReasonInFlight:
		return outcomeDeferredInFlight
	case ReasonBudget, ReasonProbe:
		return outcomeDeferredBudget
	case ReasonStoreDown:
		return outcomeFailClosed
	}
	return outcomeDeferredPaused
}

// storeBuckets are the bounds of quotagate_store_duration_seconds, in seconds. A
// round trip to a Redis nearby takes 0.1 to 1 ms (the scripts themselves run
// in microseconds), so the buckets are dense below a millisecond to show a
// healthy store's shape, then widen to the default Config.StoreTimeout,
// 250 ms, past which a call is cut and the gate fails open or closed.
var storeBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}

// waitBuckets are the bounds of quotagate_wait_seconds, in seconds: a slot
// reserved a few ms ahead, a hold (at most Tuning.MaxHold, 1.5 s), a
// window of seconds, a pause of minutes to the default MaxPause, 12 h.
var waitBuckets = []float64{.01, .05, .1, .25, .5, 1, 1.5, 2.5, 5, 10, 30, 60, 300, 900, 3600, 43200}

// scrapeTimeout bounds the SCAN behind quotagate_paused_scopes: well within
// Prometheus's default 10 s scrape timeout, and long enough for a healthy
// Redis to list thousands of pauses.
const scrapeTimeout = time.Second

// metrics are one gate's counters. A nil *metrics counts nothing.
type metrics struct {
	admissions, refusals, inFlight, budgets, storeErrors *prometheus.CounterVec
	storeSeconds, waits                                  *prometheus.HistogramVec
	pausedScopes, feedStale, feedSnapshots               *prometheus.Desc

	providers sync.Map // provider name → struct{}: the providers met, with their zero series
}

func newMetrics() *metrics {
	m := &metrics{
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
		pausedScopes: prometheus.NewDesc("quotagate_paused_scopes",
			"Scopes paused now, by provider, read from Redis at scrape time.", []string{"provider"}, nil),
		feedStale: prometheus.NewDesc("quotagate_feed_stale",
			"1 while the gate's feed of pauses is not fresh and every admission asks Redis, 0 while the gate trusts it.", nil, nil),
		feedSnapshots: prometheus.NewDesc("quotagate_feed_snapshots_total",
			"Snapshots of the waiting scopes the gate's feed loaded: one at its start, one after each gap.", nil, nil),
	}
	for _, op := range storeOps {
		m.storeErrors.WithLabelValues(op)
		m.storeSeconds.WithLabelValues(op)
	}
	return m
}

// meet creates, the first time the gate meets provider, its series at
// zero: every outcome, its refusals and its budgets, and its paused-scopes
// gauge.
func (m *metrics) meet(provider string) {
	if _, met := m.providers.LoadOrStore(provider, struct{}{}); met {
		return
	}
	for _, c := range classes {
		for _, o := range outcomes {
			m.admissions.WithLabelValues(provider, c.String(), string(o))
		}
		m.waits.WithLabelValues(provider, c.String())
	}
	m.refusals.WithLabelValues(provider)
	m.inFlight.WithLabelValues(provider)
	m.budgets.WithLabelValues(provider)
}

// admission counts one admission outcome of work of class c.
func (m *metrics) admission(provider string, c Class, o outcome) {
	if m != nil {
		m.meet(provider)
		m.admissions.WithLabelValues(provider, c.String(), string(o)).Inc()
	}
}

// wait observes a wait d the gate imposed on work of class c.
func (m *metrics) wait(provider string, c Class, d time.Duration) {
	if m != nil && d > 0 {
		m.meet(provider)
		m.waits.WithLabelValues(provider, c.String()).Observe(d.Seconds())
	}
}

// refusal counts a pause recorded from a refusal.
func (m *metrics) refusal(provider string) {
	if m != nil {
		m.meet(provider)
		m.refusals.WithLabelValues(provider).Inc()
	}
}

// inFlightRefusal counts a refusal under a learned concurrency limit.
func (m *metrics) inFlightRefusal(provider string) {
	if m != nil {
		m.meet(provider)
		m.inFlight.WithLabelValues(provider).Inc()
	}
}

// budgetObserved counts a budget learned from a response.
func (m *metrics) budgetObserved(provider string) {
	if m != nil {
		m.meet(provider)
		m.budgets.WithLabelValues(provider).Inc()
	}
}

// roundTrip observes one store call that began at start and ended with
// err (store.Hooks.RoundTrip). A call cut because the caller's own context ended is timed but is
// not a store error.
func (m *metrics) roundTrip(ctx context.Context, op string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.storeSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil && ctx.Err() == nil {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}

// collector is the prometheus.Collector of a gate.
type collector struct{ g *Gate }

func (c collector) vecs() []prometheus.Collector {
	m := c.g.metrics
	return []prometheus.Collector{m.admissions, m.waits, m.refusals, m.inFlight, m.budgets, m.storeErrors, m.storeSeconds}
}

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.vecs() {
		v.Describe(ch)
	}
	ch <- c.g.metrics.pausedScopes
	ch <- c.g.metrics.feedStale
	ch <- c.g.metrics.feedSnapshots
}

// Collect implements prometheus.Collector.
// The SCAN runs first, so that a failure of it shows in the same scrape.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	counts, err := c.g.pausedByProvider(ctx)
	for _, v := range c.vecs() {
		v.Collect(ch)
	}
	stale := 1.0
	if c.g.feed.Fresh() {
		stale = 0
	}
	ch <- prometheus.MustNewConstMetric(c.g.metrics.feedStale, prometheus.GaugeValue, stale)
	ch <- prometheus.MustNewConstMetric(c.g.metrics.feedSnapshots, prometheus.CounterValue, float64(c.g.feed.Snapshots()))
	if err != nil {
		c.g.cfg.Logger.Warn("quotagate: quotagate_paused_scopes left out of the scrape", "err", err)
		return
	}
	c.g.metrics.providers.Range(func(p, _ any) bool {
		if _, ok := counts[p.(string)]; !ok {
			counts[p.(string)] = 0
		}
		return true
	})
	providers := make([]string, 0, len(counts))
	for p := range counts {
		providers = append(providers, p)
	}
	sort.Strings(providers)
	for _, p := range providers {
		ch <- prometheus.MustNewConstMetric(c.g.metrics.pausedScopes, prometheus.GaugeValue, float64(counts[p]), p)
	}
}

// pausedByProvider counts the pauses in force by provider, as Pauses lists
// them. A truncated listing is an error: a partial count would read as a
// drop.
func (g *Gate) pausedByProvider(ctx context.Context) (map[string]int, error) {
	ps, err := g.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int)
	for _, p := range ps {
		if p.Reason == ReasonPaused { // paused; the other reasons a scope waits count as deferrals by outcome
			counts[p.Scope.Provider]++
		}
	}
	return counts, nil
}
