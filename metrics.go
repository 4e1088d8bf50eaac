package quotagate

import (
	"context"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotagate/quotagate/internal/metrics"
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

// deferredOutcome is the outcome of a deferral for reason r.
func deferredOutcome(r Reason) metrics.Outcome {
	switch r {
	case ReasonLimited:
		return metrics.DeferredLimited
	case ReasonLearned:
		return metrics.DeferredLearned
	case ReasonInFlight:
		return metrics.DeferredInFlight
	case ReasonBudget, ReasonProbe:
		return metrics.DeferredBudget
	case ReasonStoreDown:
		return metrics.FailClosed
	}
	return metrics.DeferredPaused
}

// scrapeTimeout bounds the SCAN behind quotagate_paused_scopes: well within
// Prometheus's default 10 s scrape timeout, and long enough for a healthy
// Redis to list thousands of pauses.
const scrapeTimeout = time.Second

// The series read at scrape time.
var (
	pausedScopesDesc = prometheus.NewDesc("quotagate_paused_scopes",
		"Scopes paused now, by provider, read from Redis at scrape time.", []string{"provider"}, nil)
	feedStaleDesc = prometheus.NewDesc("quotagate_feed_stale",
		"1 while the gate's feed of pauses is not fresh and every admission asks Redis, 0 while the gate trusts it.", nil, nil)
	feedSnapshotsDesc = prometheus.NewDesc("quotagate_feed_snapshots_total",
		"Snapshots of the waiting scopes the gate's feed loaded: one at its start, one after each gap.", nil, nil)
)

// newMetrics returns a gate's series (internal/metrics), with a series
// for every class.
func newMetrics() *metrics.Metrics {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.String()
	}
	return metrics.New(names...)
}

// collector is the prometheus.Collector of a gate.
type collector struct{ g *Gate }

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.g.metrics.Collectors() {
		v.Describe(ch)
	}
	ch <- pausedScopesDesc
	ch <- feedStaleDesc
	ch <- feedSnapshotsDesc
}

// Collect implements prometheus.Collector.
// The SCAN runs first, so that a failure of it shows in the same scrape.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	counts, err := c.g.pausedByProvider(ctx)
	for _, v := range c.g.metrics.Collectors() {
		v.Collect(ch)
	}
	stale := 1.0
	if c.g.feed.Fresh() {
		stale = 0
	}
	ch <- prometheus.MustNewConstMetric(feedStaleDesc, prometheus.GaugeValue, stale)
	ch <- prometheus.MustNewConstMetric(feedSnapshotsDesc, prometheus.CounterValue, float64(c.g.feed.Snapshots()))
	if err != nil {
		c.g.cfg.Logger.Warn("quotagate: quotagate_paused_scopes left out of the scrape", "err", err)
		return
	}
	c.g.metrics.Providers(func(p string) {
		if _, ok := counts[p]; !ok {
			counts[p] = 0
		}
	})
	providers := make([]string, 0, len(counts))
	for p := range counts {
		providers = append(providers, p)
	}
	sort.Strings(providers)
	for _, p := range providers {
		ch <- prometheus.MustNewConstMetric(pausedScopesDesc, prometheus.GaugeValue, float64(counts[p]), p)
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
