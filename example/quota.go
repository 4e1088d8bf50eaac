package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/sim"
)

// The demo's provider is internal/sim's: a sim.Quota (how the constrained
// carrier counts each credential's requests) and a sim.Dialect (how it
// speaks on every response). This file maps the flags to them and the
// quota to the gate's configured Limit.

// shapeOf maps -model to a shape: the demo's own names (fixed, bucket,
// sliding: the sliding log) and every sim shape by its name.
func shapeOf(model string) (sim.Shape, error) {
	switch model {
	case "bucket":
		return sim.TokenBucket, nil
	case "sliding":
		return sim.SlidingLog, nil
	}
	for _, s := range sim.Shapes {
		if string(s) == model {
			return s, nil
		}
	}
	return "", fmt.Errorf("quota model %q: want fixed, bucket, sliding or one of %s", model, shapeNames())
}

func shapeNames() string {
	names := make([]string, len(sim.Shapes))
	for i, s := range sim.Shapes {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func dialectNames() string {
	names := make([]string, len(sim.Dialects))
	for i, d := range sim.Dialects {
		names[i] = d.Name
	}
	return strings.Join(names, ", ")
}

// defaultDialect is the dialect of the demo when -dialect is not given: the
// hint in prose, as the article's provider (a sliding window states its
// whole window); with -headers the budget on every response too.
func defaultDialect(shape sim.Shape, headers bool) string {
	sliding := shape == sim.SlidingLog || shape == sim.SlidingCounter
	switch {
	case headers && sliding:
		return "httprate"
	case headers:
		return "delta"
	case sliding:
		return "window"
	}
	return "prose"
}

// unlimited is the quota of the carrier without one: no credential ever
// has a billion requests in flight.
var unlimited = sim.Quota{Shape: sim.Concurrency, Rate: math.MaxInt32}

// configuredLimits are the gate's Limits at the carrier's quota as its
// documentation would state it, the one place the gate+limit mode's
// limits are chosen: its rate (configuredLimit) and, where the quota caps
// its requests in flight too, a concurrency limit of that many. nil when
// the gate has no such limit.
func configuredLimits(q sim.Quota) []quotagate.Limit {
	var ls []quotagate.Limit
	if l, ok := configuredLimit(q); ok {
		ls = append(ls, l)
	}
	if q.InFlight > 0 {
		ls = append(ls, quotagate.Concurrent(q.InFlight))
	}
	return ls
}

// configuredLimit is the Limit of the quota's own shape (see
// configuredLimits); ok is false when the gate has no such limit.
func configuredLimit(q sim.Quota) (quotagate.Limit, bool) {
	switch q.Shape {
	case sim.TokenBucket, sim.GCRA, sim.GCRADelay:
		// A bucket, and nginx's limit_req rate=8r/s burst=10, as written:
		// its rate per second with its burst.
		return quotagate.PerSecond(q.Rate, q.Burst), true
	case sim.FixedClock, sim.FixedFirst:
		// The provider's own model: N per window W, spent as each window
		// opens, aligned to the provider's reset once a hint or a reset
		// header tells where its windows end.
		return quotagate.FixedWindow(q.Rate, q.Window), true
	case sim.SlidingLog:
		// N requests in any window of W, as a sorted-set limiter documents
		// it: an exact sliding log.
		return quotagate.SlidingWindow(q.Rate, q.Window), true
	case sim.SlidingCounter:
		// go-chi/httprate's N per W, a sliding window counter: it estimates
		// the window from two fixed windows and refuses a burst that an
		// exact log admits; SlidingCounterWindow is the pace it never
		// refuses (N−1 per W).
		return quotagate.SlidingCounterWindow(q.Rate, q.Window), true
	case sim.Concurrency:
		// "At most N requests in flight per credential": a concurrency
		// limit, each request's lease released when its response arrives.
		return quotagate.Concurrent(q.Rate), true
	}
	return quotagate.Limit{}, false
}
