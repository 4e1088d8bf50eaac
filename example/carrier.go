package main

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotagate/quotagate/tracking"
)

// carrier is a fake carrier API on loopback. It speaks the protocol of
// tracking.HTTPClient and, when it has a quota, enforces it per credential
// for real: over quota it answers 429 with the retry hint in the prose
// of a JSON field, like the provider in the article:
//
//	{"error":{"code":"rate_limited","message":"Rate limit exceeded. Please try again in 1 second."}}
//
// With headers, it also advertises the credential's budget on every
// response, 200 and 429 alike (see setBudgetHeaders), and adds the hint of a
// 429 as Retry-After.
//
// It also keeps the figures the demo reports, measured where they happen:
// requests, acceptances and refusals, and refusals sent into a window the
// carrier had already announced as closed.
type carrier struct {
	name string
	carrierOptions
	now func() time.Time

	mu       sync.Mutex
	accounts map[string]*account // by credential
	stats    carrierStats
	log      []arrival // every request, for the gate-leak check (see leaks)

	srv *httptest.Server
}

// account is one credential's state at the carrier.
type account struct {
	quota quotaModel // nil: unconstrained
	// closedUntil is the latest reopening the carrier has told anyone:
	// max(arrival + hint) over the 429s already answered.
	closedUntil time.Time
}

// carrierStats are a carrier's counters.
type carrierStats struct {
	Requests int // requests with a known credential
	Accepted int // answered 200
	Refused  int // answered 429
	// IntoClosed counts the refusals of requests that arrived while the
	// carrier had ALREADY answered someone that this credential's window is
	// closed until a later time: requests a shared gate could have kept.
	IntoClosed int
	// Closures counts the other refusals: the first ones of each closed
	// window, which nobody could have known about.
	Closures int
}

// arrival is one request as the carrier saw it.
type arrival struct {
	at      time.Time // when it arrived
	entered time.Time // when its task entered the worker's middleware chain; zero if unknown
}

// enteredHeader carries, for the demo's bookkeeping only, when a task entered
// the worker's middleware chain (Unix ns). See run.instrument.
const enteredHeader = "X-Demo-Entered"

// carrierOptions say how a carrier behaves.
type carrierOptions struct {
	quota   *quotaSpec    // nil: no quota at all
	latency time.Duration // time to answer, after the quota decision
	headers bool          // advertise the budget on every response (-headers)
	// origin is when each credential's fixed windows start: the start of
	// the run, on a whole second, like a provider whose windows follow the
	// clock. Zero: at the credential's first request.
	origin time.Time
}

// newCarrier starts a carrier on loopback that accepts the given
// credentials.
func newCarrier(name string, o carrierOptions, credentials ...string) *carrier {
	c := makeCarrier(name, o, time.Now, credentials...)
	c.srv = httptest.NewServer(c.handler())
	return c
}

// makeCarrier returns a carrier on the clock now, not yet serving.
func makeCarrier(name string, o carrierOptions, now func() time.Time, credentials ...string) *carrier {
	c := &carrier{name: name, carrierOptions: o, now: now, accounts: map[string]*account{}}
	for _, cred := range credentials {
		c.accounts[cred] = nil
	}
	c.restart(o.origin)
	return c
}

// restart gives every credential a fresh quota whose windows start at
// origin, and zeroes the counters.
func (c *carrier) restart(origin time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.origin = origin
	for cred := range c.accounts {
		a := &account{}
		if c.quota != nil {
			a.quota = c.quota.newModel(origin)
		}
		c.accounts[cred] = a
	}
	c.stats, c.log = carrierStats{}, nil
}

// URL is the carrier's base URL.
func (c *carrier) URL() string { return c.srv.URL }

// Close stops the carrier, waiting for the requests in progress.
func (c *carrier) Close() { c.srv.Close() }

func (c *carrier) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/shipments/{number}", c.track)
	return mux
}

// track answers one poll.
func (c *carrier) track(w http.ResponseWriter, r *http.Request) {
	cred, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")

	c.mu.Lock()
	// The clock is read under the lock, so the models see arrivals in
	// order: a fixed window must never be asked about an earlier window
	// after a later one (it would reset its counter).
	now := c.now()
	a, known := c.accounts[cred]
	ok, wait := known, time.Duration(0)
	var b budget
	if known {
		c.stats.Requests++
		c.log = append(c.log, arrival{at: now, entered: parseEntered(r.Header.Get(enteredHeader))})
		if a.quota != nil {
			ok, wait = a.quota.take(now)
			b = a.quota.budget(now)
		}
		switch {
		case ok:
			c.stats.Accepted++
		case now.Before(a.closedUntil):
			c.stats.Refused++
			c.stats.IntoClosed++
		default:
			c.stats.Refused++
			c.stats.Closures++
		}
	}
	c.mu.Unlock()

	if !known {
		writeJSON(w, http.StatusUnauthorized, apiError("unauthorized", "Invalid API key."))
		return
	}
	if c.headers && a.quota != nil {
		setBudgetHeaders(w.Header(), b)
	}
	c.sleep(r)
	if !ok {
		secs := hintSeconds(c.quota.hint(wait))
		c.mu.Lock()
		if until := now.Add(time.Duration(secs) * time.Second); until.After(a.closedUntil) {
			a.closedUntil = until // told from now on
		}
		c.mu.Unlock()
		if c.headers {
			w.Header().Set("Retry-After", strconv.Itoa(secs))
		}
		writeJSON(w, http.StatusTooManyRequests, apiError("rate_limited", refusalMessage(secs)))
		return
	}
	number := r.PathValue("number")
	writeJSON(w, http.StatusOK, tracking.Result{Number: number, Status: statusOf(number), UpdatedAt: now.UTC().Truncate(time.Second)})
}

// setBudgetHeaders advertises b as GitHub-style X-RateLimit-* fields, with
// the reset as Reddit's X-Ratelimit-Reset and the IETF draft's
// RateLimit-Reset have it: delta seconds ("approximate number of seconds to
// end of period"), rounded up so a client that waits it out finds the slot
// free. Remaining counts this request as spent when it was accepted, and
// is 0 on a refusal. Reset is 0 when nothing is spent.
func setBudgetHeaders(h http.Header, b budget) {
	h.Set("X-RateLimit-Limit", strconv.Itoa(b.Limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(b.Remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(int64((b.Reset+time.Second-1)/time.Second), 10))
}

// sleep is the carrier's processing time: the answer, 429 included, reaches
// the caller latency after the decision, while other requests keep coming.
func (c *carrier) sleep(r *http.Request) {
	if c.latency <= 0 {
		return
	}
	t := time.NewTimer(c.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// snapshot returns the carrier's counters so far.
func (c *carrier) snapshot() carrierStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// arrivals returns a copy of the request log.
func (c *carrier) arrivals() []arrival {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]arrival(nil), c.log...)
}

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

func parseEntered(v string) time.Time {
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func apiError(code, msg string) errorBody {
	var e errorBody
	e.Error.Code, e.Error.Message = code, msg
	return e
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
