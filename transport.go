package quotagate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"

	"github.com/quotagate/quotagate/hint"
)

// Transport returns an http.RoundTripper that applies the gate to every
// request whose context carries a scope: the task's scope inside a handler
// run by the Middleware, or one given with WithScope anywhere else (a web
// handler calling the same provider shares the gate with the workers).
// Requests without a scope pass straight to base (http.DefaultTransport when
// nil).
//
// Before sending, the request is admitted like a task: while the scope is
// paused, its advertised budget is spent, or its limit has no capacity
// within Tuning.MaxHold, no request leaves and RoundTrip returns a *Deferral
// (inside an asynq handler, return it and the task is deferred without
// spending a retry). The first request of a task the Middleware has just
// admitted spends that admission instead of a second round trip.
//
// Every response is observed (see Observe): the budget the provider
// advertises becomes shared state of the scope. A response that advertises
// nothing but answers a slow start's admission (or a probe) is told to
// Redis with the scope's next admission, in the same round trip, or with
// the other answers of the moment within 20 ms. When the response is a
// refusal (429, or 503 with Retry-After) the transport also records the
// pause itself, once (when the handler then returns a Refusal for it, the
// Middleware does not record it again), with the hint read by hint.From from
// the headers and the first hint.MaxBody bytes of the body, and returns the
// response unchanged: its body still reads from the first byte.
//
// A request admitted under a Concurrent limit holds its lease until its
// response arrives (its headers: read the body of a streamed answer within
// the lease's life, Limit.Period) or the request fails; the first request
// of a task spends the task's lease and releases it so.
//
// While a gate has a Transport, the first request of a scope it knows
// nothing about goes alone: the others wait, at most Tuning.MaxHold and one
// second, for the budget its response brings back. When it brings none
// back (nor was anything learned or configured), the scope starts slowly:
// each answer lets two more requests go, until a refusal or 32 answers
// (see internal/model/start.go).
func (g *Gate) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	g.observed.Store(true)
	return &transport{g: g, base: base}
}

type transport struct {
	g    *Gate
	base http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	sc, ok := ctx.Value(scopeCtxKey{}).(scopeCtx)
	if !ok {
		return t.base.RoundTrip(req)
	}
	k := t.keysOf(sc)
	gr, taskGrant, err := t.admit(ctx, sc, k)
	if err != nil {
		if req.Body != nil {
			req.Body.Close() // a RoundTripper closes the body, even on errors
		}
		return nil, err
	}
	sent := t.g.now() // the round trip (model.Observation.RTT), on the monotonic clock by default
	resp, err := t.base.RoundTrip(req)
	refused := err == nil && isRefusal(resp)
	if !taskGrant || sc.task.released.CompareAndSwap(false, true) {
		// The request is over: its slot in flight is free, a refused
		// one's once its refusal is recorded. Freed before, it would let
		// another request be admitted first, which the refusal would
		// count as in flight with it (model's flightState.told): a
		// window's refusal of a request alone, read as a concurrency
		// limit's, lowers c instead of pausing the scope.
		if refused {
			defer t.g.release(ctx, sc.scope, k, gr, false)
		} else {
			t.g.release(ctx, sc.scope, k, gr, err == nil)
		}
	}
	if err != nil {
		return resp, err
	}
	rtt := t.g.now().Sub(sent)
	opened := openedBy(sc, gr, taskGrant, refused)
	o := responseObservation(resp, t.g.now())
	o.Seq, o.Opened, o.RTT = gr.seq, opened, rtt.Microseconds()
	t.g.observe(ctx, sc.scope, k, o, gr.probe, opened > 0)
	if refused {
		t.recordRefusal(ctx, sc, k, resp, o, gr)
	}
	return resp, nil
}

// keysOf returns the keys of the request's scope: its task's, or the
// scope's own outside the Middleware.
func (t *transport) keysOf(sc scopeCtx) schema.Keys {
	if sc.task != nil {
		return sc.task.keys
	}
	return scopeKeys(t.g.cfg.Prefix, sc.scope)
}

// admit decides what the request is sent under: its task's admission when
// it is the task's first request (taskGrant), else an admission of its
// own.
func (t *transport) admit(ctx context.Context, sc scopeCtx, k schema.Keys) (gr grant, taskGrant bool, err error) {
	if sc.task != nil && sc.task.unspent.CompareAndSwap(true, false) {
		return sc.task.grant, true, nil
	}
	if err := sc.scope.Validate(); err != nil {
		return gr, false, err
	}
	c := classFromContext(ctx)
	if sc.task != nil {
		c = sc.task.class
	}
	gr, err = t.g.admission(ctx, sc.scope, k, 1, sc.task != nil && sc.task.mustHold, c, sc.task != nil)
	return gr, false, err
}

// openedBy decides which learned window the response answers the opening
// of (0 none): the grant's, unless refused, once per task.
func openedBy(sc scopeCtx, gr grant, taskGrant, refused bool) int64 {
	if !refused && gr.opens > 0 && (!taskGrant || sc.task.answered.CompareAndSwap(false, true)) {
		return gr.opens
	}
	return 0
}

// recordRefusal records the pause the refusal resp asks for, with the hint
// read from its headers and body, and tells the task (the Middleware will
// not record it again).
func (t *transport) recordRefusal(ctx context.Context, sc scopeCtx, k schema.Keys, resp *http.Response, o model.Observation, gr grant) {
	wait, _ := hint.From(resp, peekBody(resp))
	if r, ok := t.g.record(ctx, sc.scope, k, wait, altHint(wait, o), gr); ok && sc.task != nil {
		sc.task.refused.Store(r)
	}
}

// peekBody returns the first hint.MaxBody bytes of resp's body and puts
// them back, so that the body still reads from its first byte.
func peekBody(resp *http.Response) []byte {
	if resp.Body == nil {
		return nil
	}
	prefix, _ := io.ReadAll(io.LimitReader(resp.Body, hint.MaxBody))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(prefix), resp.Body), resp.Body}
	return prefix
}

// isRefusal reports whether resp refuses a request for quota.
func isRefusal(resp *http.Response) bool {
	return hint.IsRefusal(resp)
}

// Observe reads the budget a provider advertises on a response of scope s
// (X-RateLimit-Limit/Remaining/Reset and their variants, the IETF RateLimit
// fields; see hint.BudgetFrom) and keeps it as shared state of the scope in
// Redis: admissions then spend it, counting the requests still in flight,
// and when it is spent the scope waits for its reset, before any refusal.
// A budget is a provider's word for one window: once its reset passes the
// scope starts whole again, and a record ten minutes past its reset is
// forgotten. Transport observes every response; call Observe for each
// response of a handler that uses its own client (refusals still go back as
// a Refusal). Observe never blocks a scope on a missing or stale record.
//
// A response that advertises nothing costs no round trip once the gate knows
// the scope's provider advertises nothing (through Transport, none unless it
// answers a first contact's probe).
func (g *Gate) Observe(ctx context.Context, s Scope, resp *http.Response) error {
	if err := s.Validate(); err != nil {
		return err
	}
	g.observed.Store(true)
	k := scopeKeys(g.cfg.Prefix, s)
	at, seen := g.silent.Load(k.Pause)
	report := !seen || g.now().Sub(at.(time.Time)) >= silentFor
	gr := grant{}
	if sc, ok := ctx.Value(scopeCtxKey{}).(scopeCtx); ok && sc.task != nil && sc.scope == s {
		gr = sc.task.grant // the task's admission: its sequence number
	}
	o := responseObservation(resp, g.now())
	o.Seq = gr.seq
	if err := g.observe(ctx, s, k, o, report, false); err != nil {
		return fmt.Errorf("quotagate: observe %s: %w", s.Provider, err)
	}
	return nil
}

// resetPrecision is how precise a reset read from a header is: a second
// for whole seconds (most are rounded up, others are anchored to the
// whole-second Date header), a millisecond for a reset that carries
// fractions (Discord's X-RateLimit-Reset-After, resets in ms).
func resetPrecision(reset time.Duration) time.Duration {
	if reset%time.Second != 0 {
		return time.Millisecond
	}
	return time.Second
}

// responseObservation is the observation of the budget resp advertises
// (remaining -1: none): its reset, to its precision, and, when the reset
// is a whole number under a name of seconds, how it may be read otherwise
// (model.Observation.Alt, Millis). The caller sets what the request tells
// (Seq, Opened, RTT).
func responseObservation(resp *http.Response, now time.Time) model.Observation {
	b, ok := hint.BudgetFrom(resp, now)
	if !ok {
		return model.Observation{Remaining: -1}
	}
	o := model.Observation{Remaining: b.Remaining, Reset: b.Reset.Microseconds(), Limit: b.Limit, Prec: resetPrecision(b.Reset).Microseconds(),
		Refused: isRefusal(resp)}
	switch b.ResetUnit {
	case hint.ResetSeconds:
		o.Alt = (b.Reset / 1000).Microseconds() // N seconds read as N ms
	case hint.ResetMillis:
		o.Millis = true
	}
	return o
}

// altHint is the refusal's hint wait read as milliseconds when it is the
// reset of o, the budget its response advertises, written as a whole
// number under a name of seconds (o.Alt; model.Refusal.Alt), 0 otherwise.
func altHint(wait time.Duration, o model.Observation) time.Duration {
	if o.Alt > 0 && wait > 0 && wait.Microseconds() == o.Reset {
		return wait / 1000
	}
	return 0
}

// rememberSilent notes that the scope of pause key k advertised no budget
// now. The notes are pruned of those older than silentFor every
// silentPrune notes, so a gate that meets many accounts keeps a bounded
// map (accounts are unbounded).
func (g *Gate) rememberSilent(k string) {
	now := g.now()
	g.silent.Store(k, now)
	if g.silentNotes.Add(1)%silentPrune == 0 {
		g.silent.Range(func(key, at any) bool {
			if now.Sub(at.(time.Time)) >= silentFor {
				g.silent.Delete(key)
			}
			return true
		})
	}
}

// silentPrune is how many notes a gate takes between two prunings of its
// silent scopes: a walk of the map per thousand responses costs nothing
// beside the responses.
const silentPrune = 1000

// silentFor is how long a gate remembers that a scope's provider advertised
// no budget before it tells Redis again (which ends a first-contact probe).
const silentFor = 10 * time.Minute

// observe records o, a response's observation (responseObservation). A
// response that advertises nothing is recorded only when report is set
// (it answers a first contact's probe, whose peers wait for it, or
// Observe has not told Redis in a while), or, when answers is set (it
// answers a slow start's admission or a probe, o.Opened), as an answer
// (tellAnswer).
func (g *Gate) observe(ctx context.Context, s Scope, k schema.Keys, o model.Observation, report, answers bool) error {
	switch {
	case o.Remaining >= 0:
		g.silent.Delete(k.Pause)
	case report:
		g.rememberSilent(k.Pause)
	case answers:
		return g.tellAnswer(ctx, s, k, o)
	default:
		return nil
	}
	err := g.store.Observe(context.WithoutCancel(ctx), k, o, specs(g.limitsOf(s))...)
	if err != nil {
		g.cfg.Logger.Warn("quotagate: could not record the budget a response advertised", "scope", s.String(), "err", err)
		return err
	}
	if o.Opened > 0 {
		g.slots.Wake(k.Pause, model.StartAnswerWakes) // a slow start's answer lets two more go
	}
	if o.Remaining >= 0 {
		g.metrics.BudgetObserved(s.Provider)
	}
	return nil
}

// tellAnswer records o, an observation that carries nothing but an
// answer (o.Opened: a slow start's admission or a probe answered, no
// budget advertised). It costs no round trip of its own: it goes with the
// scope's next one (store.ObserveLater), unless a worker of this process
// holds in one of the scope's places, waiting for the room the answer
// makes. Then it goes at once and the workers are woken after it, as they
// would otherwise each find the room only if the first of them carried
// the answer before the others asked.
func (g *Gate) tellAnswer(ctx context.Context, s Scope, k schema.Keys, o model.Observation) error {
	ls := specs(g.limitsOf(s))
	if g.holders.Held(k.Pause) == 0 {
		g.store.ObserveLater(k, o, ls...)
		g.slots.Wake(k.Pause, model.StartAnswerWakes) // one between two looks carries it
		return nil
	}
	if err := g.store.Observe(context.WithoutCancel(ctx), k, o, ls...); err != nil {
		g.cfg.Logger.Warn("quotagate: could not report a request's answer", "scope", s.String(), "err", err)
		return err
	}
	g.slots.Wake(k.Pause, model.StartAnswerWakes) // a slow start's answer lets two more go
	return nil
}
