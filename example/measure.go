package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/quotagate/quotagate"
	"github.com/quotagate/quotagate/internal/sim"
	"github.com/quotagate/quotagate/tracking"
)

// This file is the demo's bookkeeping: what a mode counts on the worker side
// (the carrier counts the rest) and how the figures are put together. None
// of it is needed to use quotagate.

// figures are the results of one mode, as printed.
type figures struct {
	Scenario    string        `json:"scenario,omitempty"` // -bench
	Run         int           `json:"run,omitempty"`      // -bench: 1, 2, ...
	Mode        string        `json:"mode"`
	Polls       int           `json:"polls"`
	Completed   int           `json:"completed"`
	Archived    int           `json:"archived"`
	Requests    int           `json:"provider_requests"`
	Accepted    int           `json:"accepted"`
	Refused     int           `json:"refused"`
	IntoClosed  int           `json:"refused_into_closed_window"`
	Closures    int           `json:"closed_windows"`
	Resolutions int           `json:"client_resolutions"`
	Skipped     int           `json:"resolutions_skipped_by_deferral"`
	Held        int           `json:"attempts_held_in_process"`
	HeldS       float64       `json:"worker_seconds_held"`
	FreeDefer   int           `json:"deferrals_on_free_carrier"`
	Leaks       int           `json:"requests_into_known_pause"`
	Pauses      int           `json:"pauses_recorded"`
	Wall        time.Duration `json:"-"`
	Ideal       time.Duration `json:"-"`
	FreeDone    time.Duration `json:"-"` // when the free carrier's last poll completed
	WallS       float64       `json:"wall_seconds"`
	FreeDoneS   float64       `json:"free_carrier_done_seconds"`
	IdealS      float64       `json:"ideal_seconds"`
	Waste       float64       `json:"requests_per_accepted_poll"`
}

// run is one mode in progress.
type run struct {
	mode  mode
	s     settings
	total int
	gate  *quotagate.Gate // the gate of gated modes, set before the server starts

	done        atomic.Int64
	lastDone    atomic.Int64 // Unix ns of the latest completion
	lastFree    atomic.Int64 // Unix ns of the latest completion at the free carrier
	archived    atomic.Int64
	deferrals   atomic.Int64
	freeDefer   atomic.Int64
	resolutions atomic.Int64
	held        atomic.Int64 // attempts whose handler started ≥ heldAfter after entering the chain
	heldNanos   atomic.Int64 // worker time those attempts spent held

	mu     sync.Mutex
	pauses []pauseRecord
	holds  []holdRecord // sampled for the timeline (sampleHolds)
}

// pauseRecord is a pause the gate had recorded by at, in force until until.
type pauseRecord struct{ at, until time.Time }

// holdRecord is the gate's state of the constrained carrier's scope seen
// at at: it held the scope until until, for a refusal's pause (paused) or
// another reason (a learned limit, a spent budget, a probe, a slow start).
type holdRecord struct {
	at, until time.Time
	paused    bool
}

// report is the handler's Report: one poll completed.
func (r *run) report(_ context.Context, p tracking.Poll, _ tracking.Result) error {
	now := time.Now().UnixNano()
	r.lastDone.Store(now)
	if p.Carrier == free {
		r.lastFree.Store(now)
	}
	r.done.Add(1)
	return nil
}

// onError sees every error a task returned: it counts the gate's deferrals
// (each one a client resolution and a request that did not happen) and the
// tasks asynq is about to archive.
func (r *run) onError(ctx context.Context, t *asynq.Task, err error) {
	var d *quotagate.Deferral
	if errors.As(err, &d) {
		r.deferrals.Add(1)
		if d.Scope.Provider == free {
			r.freeDefer.Add(1)
		}
		return
	}
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	if retried >= maxRetry || errors.Is(err, asynq.SkipRetry) {
		r.archived.Add(1)
	}
}

type enteredKey struct{}

// instrument is the demo's outermost middleware, bookkeeping only. It notes
// when each task entered the chain (before the gate), which the transport
// sends along to the carrier, and the pauses the gate recorded. Together
// they count requests that reached the carrier during a pause the gate
// already knew when their task entered: the gate promises none.
func (r *run) instrument(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		ctx = context.WithValue(ctx, enteredKey{}, time.Now())
		err := next.ProcessTask(ctx, t)
		var ref *quotagate.Refusal
		if s, ok := quotagate.ScopeOf(t); ok && r.gate != nil && errors.As(err, &ref) {
			if p, err := r.gate.State(ctx, s); err == nil && !p.Until.IsZero() {
				r.mu.Lock()
				r.pauses = append(r.pauses, pauseRecord{at: time.Now(), until: p.Until})
				r.mu.Unlock()
			}
		}
		return err
	})
}

// stampTransport adds sim.EnteredHeader to requests made on behalf of a task.
type stampTransport struct{ base http.RoundTripper }

// RoundTrip stamps req when it is made for a task, then sends it.
func (s stampTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t, ok := req.Context().Value(enteredKey{}).(time.Time); ok {
		req = req.Clone(req.Context())
		req.Header.Set(sim.EnteredHeader, strconv.FormatInt(t.UnixNano(), 10))
	}
	return s.base.RoundTrip(req)
}

// resolver maps a carrier and a credential fingerprint to its client and
// counts resolutions. In a real application this is where the secret is
// fetched from a vault and a signed client is built: the work a deferral
// saves. Being the first thing the handler does, it also measures how long
// the gate held the task in-process before admitting it.
type resolver struct {
	run     *run
	clients map[string]tracking.CarrierClient
}

// heldAfter is the wait between entering the chain and resolving a client
// from which an attempt counts as held by the gate (its Redis round trip
// alone takes well under a millisecond).
const heldAfter = 10 * time.Millisecond

// Resolve returns the client of a carrier credential by its fingerprint.
func (r *resolver) Resolve(ctx context.Context, carrier, key string) (tracking.CarrierClient, error) {
	r.run.resolutions.Add(1)
	if entered, ok := ctx.Value(enteredKey{}).(time.Time); ok {
		if d := time.Since(entered); d >= heldAfter {
			r.run.held.Add(1)
			r.run.heldNanos.Add(int64(d))
		}
	}
	c, ok := r.clients[carrier+"/"+key]
	if !ok {
		return nil, fmt.Errorf("no credential for carrier %s key %s", carrier, key)
	}
	return c, nil
}

// leaks counts the requests that arrived during a pause the gate had
// recorded before their task entered the chain.
func leaks(log []sim.Arrival, pauses []pauseRecord) int {
	n := 0
	for _, a := range log {
		if a.Entered.IsZero() {
			continue
		}
		for _, p := range pauses {
			if p.at.Before(a.Entered) && a.At.Before(p.until) {
				n++
				break
			}
		}
	}
	return n
}

// figures returns the mode's results.
func (r *run) figures(start time.Time, acme, swift *carrier) figures {
	a, s := acme.snapshot(), swift.snapshot()
	f := figures{
		Mode:        r.mode.Name,
		Polls:       r.total,
		Completed:   int(r.done.Load()),
		Archived:    int(r.archived.Load()),
		Requests:    a.Requests + s.Requests,
		Accepted:    a.Accepted + s.Accepted,
		Refused:     a.Refused + s.Refused,
		IntoClosed:  a.IntoClosed + s.IntoClosed,
		Closures:    a.Closures + s.Closures,
		Resolutions: int(r.resolutions.Load()),
		Skipped:     int(r.deferrals.Load()),
		Held:        int(r.held.Load()),
		HeldS:       seconds(time.Duration(r.heldNanos.Load())),
		FreeDefer:   int(r.freeDefer.Load()),
		Ideal:       r.s.quota.IdealLatency(a.Accepted, r.s.latency),
	}
	end := time.Now()
	if f.Completed == r.total {
		end = time.Unix(0, r.lastDone.Load())
	}
	f.Wall = end.Sub(start)
	if t := r.lastFree.Load(); t != 0 {
		f.FreeDone = time.Unix(0, t).Sub(start)
	}
	r.mu.Lock()
	f.Pauses = len(r.pauses)
	if r.mode.Gate {
		f.Leaks = leaks(acme.arrivals(), r.pauses)
	}
	r.mu.Unlock()
	f.WallS, f.IdealS = seconds(f.Wall), seconds(f.Ideal)
	f.FreeDoneS = seconds(f.FreeDone)
	if f.Accepted > 0 {
		f.Waste = float64(f.Requests) / float64(f.Accepted)
	}
	return f
}

// sampleHolds reads the gate's state of scope s every interval, until
// stop is called, and keeps each hold it sees (r.holds): the timeline's
// bands, beyond the pauses noted at the refusals. State is a dry admission:
// it spends nothing, and costs the run a Redis call per interval.
func (r *run) sampleHolds(s quotagate.Scope, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p, err := r.gate.State(ctx, s)
			if now := time.Now(); err == nil && p.Until.After(now) {
				r.mu.Lock()
				r.holds = append(r.holds, holdRecord{at: now, until: p.Until, paused: p.Reason == quotagate.ReasonPaused})
				r.mu.Unlock()
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// recording returns the run's recording for the timeline: the constrained
// carrier's arrivals and the gate's holds (the pauses noted at refusals
// and the holds sampled), as offsets from start, with the figures' totals.
func (r *run) recording(start time.Time, acme *carrier, f figures) recording {
	rec := recording{Mode: r.mode.Name, Wall: f.Wall, Waste: f.Waste}
	for _, a := range acme.arrivals() {
		rec.Requests = append(rec.Requests, mark{At: a.At.Sub(start), OK: a.OK})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pauses {
		rec.Holds = append(rec.Holds, hold{From: p.at.Sub(start), To: p.until.Sub(start), Paused: true})
	}
	for _, h := range r.holds {
		rec.Holds = append(rec.Holds, hold{From: h.at.Sub(start), To: h.until.Sub(start), Paused: h.paused})
	}
	return rec
}

// seconds is d in seconds with millisecond precision, for JSON.
func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }
