package main

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotagate/quotagate/internal/sim"
	"github.com/quotagate/quotagate/tracking"
)

// carrier is a fake carrier API on loopback: internal/sim's provider
// (sim.Server) behind the protocol of tracking.HTTPClient. It enforces its
// quota per credential for real and speaks its dialect; by default (the
// prose dialect) a refusal carries the retry hint in the prose of a JSON
// field, like the provider in the article:
//
//	{"error":{"code":"rate_limited","message":"Rate limit exceeded. Please try again in 1 second."}}
//
// The server also keeps the figures the demo reports, measured where they
// happen: requests, acceptances and refusals, refusals sent into a window
// it had already announced as closed, and every arrival.
type carrier struct {
	name string
	p    *sim.Server
	srv  *httptest.Server
}

// carrierOptions say how a carrier behaves.
type carrierOptions struct {
	quota   *sim.Quota    // nil: no quota at all
	dialect sim.Dialect   // how it speaks (with no quota: nothing)
	latency time.Duration // time to answer, after the quota decision
	// origin is when each credential's fixed windows start: the start of
	// the run, on a whole second, like a provider whose windows follow the
	// clock.
	origin time.Time
}

// carrierStats are a carrier's counters.
type carrierStats = sim.Counts

// newCarrier starts a carrier on loopback that accepts the given
// credentials.
func newCarrier(name string, o carrierOptions, credentials ...string) *carrier {
	c := makeCarrier(name, o, time.Now, credentials...)
	c.srv = httptest.NewServer(c.handler())
	return c
}

// makeCarrier returns a carrier on the clock now, not yet serving.
func makeCarrier(name string, o carrierOptions, now func() time.Time, credentials ...string) *carrier {
	q, d := unlimited, mustDialect("none")
	if o.quota != nil {
		q, d = *o.quota, o.dialect
	}
	p := sim.NewServer(sim.Config{
		Quota: q, Dialect: d, Credentials: credentials, Origin: o.origin, Now: now, Latency: o.latency,
		Accept: func(w http.ResponseWriter, r *http.Request, now time.Time) {
			number := r.PathValue("number")
			writeJSON(w, http.StatusOK, tracking.Result{Number: number, Status: statusOf(number), UpdatedAt: now.UTC().Truncate(time.Second)})
		},
	})
	return &carrier{name: name, p: p}
}

// mustDialect is the sim dialect of that name, which must exist.
func mustDialect(name string) sim.Dialect {
	d, ok := sim.DialectNamed(name)
	if !ok {
		panic("no dialect " + name)
	}
	return d
}

// restart gives every credential a fresh quota whose windows start at
// origin, and zeroes the counters.
func (c *carrier) restart(origin time.Time) { c.p.Restart(origin) }

// now is the carrier's clock.
func (c *carrier) now() time.Time { return c.p.Config().Now() }

// URL is the carrier's base URL.
func (c *carrier) URL() string { return c.srv.URL }

// Close stops the carrier, waiting for the requests in progress.
func (c *carrier) Close() { c.srv.Close() }

func (c *carrier) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /v1/shipments/{number}", c.p)
	return mux
}

// snapshot returns the carrier's counters so far.
func (c *carrier) snapshot() carrierStats { return c.p.Counts() }

// arrivals returns a copy of the request log.
func (c *carrier) arrivals() []sim.Arrival { return c.p.Arrivals() }

// statusOf is a shipment's status, a pure function of its number: most are
// delivered, some in transit, a few held.
func statusOf(number string) tracking.Status {
	h := fnv.New32a()
	h.Write([]byte(number))
	switch v := h.Sum32() % 10; {
	case v < 6:
		return tracking.StatusDelivered
	case v < 9:
		return tracking.StatusInTransit
	}
	return tracking.StatusException
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
