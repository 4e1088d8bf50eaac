package sim

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EnteredHeader carries, for the bookkeeping of a benchmark only, when the
// request's task entered the worker (Unix nanoseconds): Server records it
// in Arrival.Entered, so that requests sent into a pause the client already
// knew can be counted.
const EnteredHeader = "X-Sim-Entered"

// Config is a Server's provider.
type Config struct {
	Quota   Quota
	Dialect Dialect
	// Credentials are the bearer tokens the server accepts, each with a
	// quota of its own; any other is answered 401.
	Credentials []string
	// Origin is where the windows of fixed and sliding-counter start (see
	// Quota.New). Restart moves it.
	Origin time.Time
	// Now is the server's clock; nil: time.Now.
	Now func() time.Time
	// Latency is the time to answer after the decision (and after a
	// gcra-delay's Delay), refusals included. A concurrency limit counts
	// the request in flight until then.
	Latency time.Duration
	// Sleep waits d or until ctx ends; nil: a timer. Tests on a fake clock
	// replace it.
	Sleep func(ctx context.Context, d time.Duration)
	// Accept writes an accepted request's answer (status 200 is already
	// decided; the dialect's headers are set); nil: {"ok":true}.
	Accept func(w http.ResponseWriter, r *http.Request, now time.Time)
}

// Server is a provider that enforces Config.Quota per credential and
// speaks Config.Dialect. It is an http.Handler, safe for concurrent use:
// the clock is read and the model consulted under one lock, so the models
// see arrivals in order.
type Server struct {
	cfg Config

	mu       sync.Mutex
	accounts map[string]*account
	log      []Arrival
	counts   Counts
}

// account is one credential's state.
type account struct {
	model Model
	// closedUntil is the latest reopening the server has told anyone:
	// max(arrival + announced) over the refusals already answered.
	closedUntil time.Time
}

// Arrival is one request as the server saw it.
type Arrival struct {
	At time.Time // its arrival
	OK bool      // accepted
	// Announced reports that it arrived while the server had already
	// answered someone that this credential's quota was closed until
	// later (Dialect.Announced): a request a shared gate could have kept.
	Announced bool
	Delay     time.Duration // the server held it this long (gcra-delay)
	Entered   time.Time     // EnteredHeader; zero when absent
}

// Counts are a server's counters over known credentials.
type Counts struct {
	Requests int
	Accepted int
	Refused  int
	// IntoClosed counts the refusals of requests that arrived into a
	// closure already announced (Arrival.Announced).
	IntoClosed int
	// Closures counts the other refusals: the first ones of each closed
	// window, which nobody could have known about.
	Closures int
}

// NewServer returns a server of cfg. It panics on a quota that does not
// Validate.
func NewServer(cfg Config) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if err := cfg.Quota.Validate(); err != nil {
		panic(err)
	}
	s := &Server{cfg: cfg}
	s.Restart(cfg.Origin)
	return s
}

// Config returns the server's configuration.
func (s *Server) Config() Config { return s.cfg }

// Restart gives every credential a fresh quota whose windows start at
// origin, and clears the log and the counters.
func (s *Server) Restart(origin time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.Origin = origin
	s.accounts = make(map[string]*account, len(s.cfg.Credentials))
	for _, c := range s.cfg.Credentials {
		s.accounts[c] = &account{model: s.cfg.Quota.New(origin)}
	}
	s.log, s.counts = nil, Counts{}
}

// Counts returns the counters so far.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// Arrivals returns a copy of the log of every request of a known
// credential.
func (s *Server) Arrivals() []Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Arrival(nil), s.log...)
}

// ServeHTTP answers one request: 401 for an unknown credential, else the
// model's decision in the dialect, after the Delay and the Latency.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cred, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	a, rep, ok := s.decide(cred, parseEntered(r.Header.Get(EnteredHeader)))
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write(ErrorJSON("unauthorized", "Invalid API key."))
		return
	}
	h := w.Header()
	h.Set("Date", rep.Now.UTC().Format(http.TimeFormat))
	status, body := s.cfg.Dialect.Write(h, rep)
	s.cfg.Sleep(r.Context(), rep.Decision.Delay+s.cfg.Latency)
	s.answered(a, rep)
	if status == http.StatusOK {
		if s.cfg.Accept != nil {
			s.cfg.Accept(w, r, rep.Now)
			return
		}
		body = []byte("{\"ok\":true}\n")
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// decide takes the request of cred at the server's now and logs it.
func (s *Server) decide(cred string, entered time.Time) (*account, Reply, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The clock is read under the lock, so the models see arrivals in
	// order.
	now := s.cfg.Now()
	a, known := s.accounts[cred]
	if !known {
		return nil, Reply{}, false
	}
	d := a.model.Take(now)
	rep := Reply{Now: now, Decision: d, State: a.model.State(now)}
	announced := now.Before(a.closedUntil)
	s.log = append(s.log, Arrival{At: now, OK: d.OK, Announced: announced, Delay: d.Delay, Entered: entered})
	s.counts.Requests++
	switch {
	case d.OK:
		s.counts.Accepted++
	case announced:
		s.counts.Refused++
		s.counts.IntoClosed++
	default:
		s.counts.Refused++
		s.counts.Closures++
	}
	return a, rep, true
}

// answered notes what the answer of rep told its caller: a refusal
// announces the quota closed (Dialect.Announced) from now on; an accepted
// request leaves the flight (concurrency).
func (s *Server) answered(a *account, rep Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rep.Decision.OK {
		a.model.Release(s.cfg.Now())
		return
	}
	if d := s.cfg.Dialect.Announced(rep); d > 0 {
		if until := rep.Now.Add(d); until.After(a.closedUntil) {
			a.closedUntil = until
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func parseEntered(v string) time.Time {
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
