package quotagate

import (
	"container/heap"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/hint"
	"github.com/quotagate/quotagate/internal/decide"
	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/sim"
)

// The provider shapes of the matrix (example/bench.go) on the model alone:
// the same discrete-event fleet as simulate, in front of internal/sim's
// limiters speaking their dialects, every response read by package hint as
// the Transport reads it (the budget observed, a refusal's hint recorded).
// It runs a matrix cell in milliseconds, deterministically, so a change of
// the model can be seen on every cell before the matrix measures it.

// shapeRun is one simulated run of a cell.
type shapeRun struct {
	requests, accepted int
	end                int64 // µs from the start to the last accepted answer
}

func (r shapeRun) waste() float64 { return float64(r.requests) / float64(max(r.accepted, 1)) }

// shapeTrace, when set, hears every admission, response and refusal of
// simulateShape.
var shapeTrace func(format string, args ...any)

// simulateShape runs polls tasks on workers workers against q speaking d,
// with limits configured (nil: none). Requests arrive at the provider as
// they are sent, and are answered latency (and a gcra-delay's Delay)
// later, as internal/sim's Server does. plain is the plain shared pause:
// nothing observed, learned or configured, only the refusals' pauses,
// and no worker holds in-process (example/pause.go). The tasks are
// asynq's (simAsynq): a deferred or refused task goes back to asynq's
// retry set and wakes at its whole second, while its worker takes the
// next; so after a pause only the holders go at its deadline, and the
// rest of the fleet at asynq's next whole second (a fleet that kept its
// tasks through the pause would reopen whole at the deadline, sooner than
// any gate in front of asynq does). The run gives up at limit µs.
//
// start is when the first worker asks (µs after the window's start) and
// sendDelay the time from an admission to the request's arrival (the
// handler's work and the network).
func simulateShape(q sim.Quota, d sim.Dialect, limits []Limit, workers, polls int, latency int64, plain bool, limit int64) shapeRun {
	const start, sendDelay = 40_000, 2_000
	const t0 = 1_700_000_000_000_000 // µs: a whole second, a multiple of every window
	maxHold := 1_500_000 * time.Microsecond
	p := model.Params{Hold: maxHold.Microseconds(), MaxPause: 12 * 3600 * 1000, Answer: decide.AnswerTimeout(maxHold).Microseconds()}
	if !plain {
		p.Probe = (maxHold + decide.AsynqTick).Microseconds()
		for _, l := range limits {
			p.Limits = append(p.Limits, l.spec())
		}
	}
	provider := q.New(time.UnixMicro(t0))
	var m model.State
	m.Normalize(p, t0)
	var r shapeRun
	ev := &simQueue{}
	for i := range workers {
		// asynq's workers pick their first tasks over the first tens of
		// milliseconds, not at the window's first instant.
		heap.Push(ev, simEvent{at: t0 + start + int64(i)*2_000, worker: i})
	}
	type flight struct {
		seq, opens, at int64  // at: the admission's instant (µs)
		level          int64  // the admission's level (model.Decision.Level)
		mark           int64  // its mark (model.Decision.Mark)
		lease          string // the admission's lease on the concurrency limits
	}
	inflight := map[int]flight{}
	pending := map[int]*http.Response{}
	bodies := map[int][]byte{}
	pol := decide.Policy{MaxHold: maxHold, MaxHolders: 12}
	if plain {
		pol = decide.Policy{} // the plain pause holds nothing in-process (example/pause.go)
	}
	w := &simWorkers{ev: ev, pol: pol, holding: make([]bool, workers)}
	// The polls are asynq's tasks (simAsynq): a worker takes one when it
	// asks without one, and is done with it when it is accepted; a task
	// deferred or refused goes back to asynq's retry set, and its worker
	// takes the next one at once.
	aq, has := &simAsynq{pending: polls}, make([]bool, workers)
	w.deferred = func(now, delay int64, worker int) {
		aq.retry = append(aq.retry, asynqRetry(now, delay, plain))
		if shapeTrace != nil {
			shapeTrace("%.3f deferred w%d %.3f", float64(now-t0)/1e6, worker, float64(delay)/1e6)
		}
		has[worker] = false
		heap.Push(ev, simEvent{at: now + asynqDequeue, worker: worker, gen: w.gen[worker]})
	}
	sends := 0 // requests sent, for their send delays
	trace := func(format string, args ...any) {
		if shapeTrace != nil {
			shapeTrace(format, args...)
		}
	}
	accepted := map[int]bool{} // the provider accepted the worker's request in flight
	for ev.Len() > 0 && r.accepted < polls {
		e := heap.Pop(ev).(simEvent)
		if w.stale(e) {
			continue
		}
		if e.at-t0 > limit {
			break
		}
		if plain {
			m.Forget()
		}
		at := time.UnixMicro(e.at)
		if !e.resp && e.ok { // a request admitted earlier arrives at the provider
			r.requests++
			resp, body, delay, rep := shapeSend(provider, d, at)
			pending[e.worker], bodies[e.worker], accepted[e.worker] = resp, body, rep.Decision.OK
			trace("%.3f send ok=%v rem=%d", float64(e.at-t0)/1e6, rep.Decision.OK, rep.State.Remaining)
			heap.Push(ev, simEvent{at: e.at + delay.Microseconds() + latency, worker: e.worker, resp: true})
			continue
		}
		if e.resp {
			resp, body, fl := pending[e.worker], bodies[e.worker], inflight[e.worker]
			delete(pending, e.worker)
			if accepted[e.worker] { // as Server.answered: an accepted request leaves the flight
				provider.Release(at)
			}
			refused := hint.IsRefusal(resp)
			if fl.lease != "" { // the Transport: the response arrived
				m.Release(p, e.at, fl.lease, !refused)
				w.wakeSlot(e.at, 1)
			}
			o := responseObservation(resp, at) // as the Transport reads it
			if !plain {
				opened := int64(0)
				if !refused {
					opened = fl.opens
				}
				if o.Remaining >= 0 {
					counter := m.ReadsCounter()
					o.Seq, o.Opened, o.RTT = fl.seq, opened, e.at-fl.at
					m.Observe(p, e.at, o)
					if !counter && m.ReadsCounter() {
						trace("%.3f counter: %v", float64(e.at-t0)/1e6, m)
					}
					trace("%.3f observed remaining %d (seq %d) reset %d µs: %v", float64(e.at-t0)/1e6, o.Remaining, fl.seq, o.Reset, m)
				} else if opened > 0 || m.Probing() {
					m.Observe(p, e.at, model.Observation{Remaining: -1, Seq: fl.seq, Opened: opened})
				}
			}
			if !refused {
				r.accepted++
				r.end = e.at - t0
			} else {
				wait, _ := hint.FromAt(resp, body, at)
				rf := model.Refusal{Pause: min(max(wait, MinPause), 12*time.Hour).Milliseconds(), Hinted: wait > 0, Prec: 1000, Level: fl.level, Mark: fl.mark, Opens: fl.opens}
				if alt := altHint(wait, o); alt > 0 { // as the Transport records it
					rf.Alt = min(max(alt, MinPause), 12*time.Hour).Milliseconds()
				}
				if wait <= 0 {
					// Config.FallbackPause: the cap of a hintless episode's
					// pause, or the plain pause's whole pause (pause.go's
					// pauseFallback), which learns nothing
					rf.Pause, rf.Hinted = simFallbackCap, false
					if plain {
						rf.Pause, rf.Hinted = simPlainFallback, true
					}
				}
				if wait%time.Second == 0 {
					rf.Prec = 1_000_000
				}
				dl, _ := m.Refuse(p, e.at, rf)
				// retried by asynq: RetryDelay's max(hint, the pause in
				// force), or the plain pause's remaining pause
				own := int64(0) // a hint's own wait (the plain pause's: its whole pause)
				if rf.Hinted {
					own = rf.Pause * 1000
				}
				aq.retry = append(aq.retry, asynqRetry(e.at, max(own, dl*1000-e.at), plain))
				trace("%.3f refused hint %v deadline %.3f: %v", float64(e.at-t0)/1e6, wait, float64(dl*1000-t0)/1e6, m)
			}
			has[e.worker] = false
			heap.Push(ev, simEvent{at: e.at, worker: e.worker, gen: w.gen[e.worker]})
			continue
		}
		if !has[e.worker] {
			if !aq.take(e.at) {
				heap.Push(ev, simEvent{at: asynqPoll(e.at, e.worker), worker: e.worker, gen: w.gen[e.worker]})
				continue
			}
			has[e.worker] = true
		}
		dec, id, sent := w.admit(&m, p, e)
		if !sent {
			trace("%.3f held w%d code %d reason %d wait %.3f", float64(e.at-t0)/1e6, e.worker, dec.Code, dec.Reason, float64(dec.Wait)/1e6)
		}
		if !sent {
			continue
		}
		sends++
		trace("%.3f admit w%d wait %.3f opens=%v: %v", float64(e.at-t0)/1e6, e.worker, float64(dec.Wait)/1e6, dec.Opens > 0, m)
		inflight[e.worker] = flight{seq: dec.Seq, opens: dec.Opens, at: e.at + dec.Wait, lease: id, level: dec.Level, mark: dec.Mark}
		// sent then: 1–3 ms after the admission, the first request of a run
		// the slowest (a connection dialled), as measured by the example's
		// traces (sim.Arrival's Entered and At)
		delay := int64(sendDelay/2 + sends*389%sendDelay)
		if sends == 1 {
			delay = sendDelay * 3 / 2
		}
		heap.Push(ev, simEvent{at: e.at + dec.Wait + delay, worker: e.worker, ok: true})
	}
	return r
}

// shapeSend is the provider's side of one request arriving at at: its
// answer, in d, to be read back when it arrives (after its Delay and the
// latency).
func shapeSend(provider sim.Model, d sim.Dialect, at time.Time) (*http.Response, []byte, time.Duration, sim.Reply) {
	decision := provider.Take(at)
	rep := sim.Reply{Now: at, Decision: decision, State: provider.State(at)}
	h := http.Header{}
	h.Set("Date", at.UTC().Format(http.TimeFormat))
	status, body := d.Write(h, rep)
	return &http.Response{StatusCode: status, Header: h}, body, decision.Delay, rep
}

// shapeCell is a cell of the matrix: its provider, and the limits its
// gate+limit mode configures (none: it configures none).
type shapeCell struct {
	name   string
	quota  sim.Quota
	limits []Limit
}

// shapeCells are the matrix's cells (example/bench.go), with the limits
// its gate+limit mode configures (example/quota.go's configuredLimits).
var shapeCells = func() []shapeCell {
	fixed40 := sim.Quota{Shape: sim.FixedClock, Rate: 40, Window: 5 * time.Second}
	bucket8 := sim.Quota{Shape: sim.TokenBucket, Rate: 8, Burst: 10}
	gcra8 := sim.Quota{Shape: sim.GCRA, Rate: 8, Burst: 10}
	with := func(q sim.Quota, s sim.Shape) sim.Quota { q.Shape = s; return q }
	type cell = shapeCell
	var out []cell
	add := func(q sim.Quota, dialects ...string) {
		for _, d := range dialects {
			c := cell{name: q.Name() + "/" + d, quota: q}
			switch q.Shape {
			case sim.TokenBucket, sim.GCRA, sim.GCRADelay:
				c.limits = []Limit{PerSecond(q.Rate, q.Burst)}
			case sim.FixedClock, sim.FixedFirst:
				c.limits = []Limit{FixedWindow(q.Rate, q.Window)}
			case sim.SlidingLog:
				c.limits = []Limit{SlidingWindow(q.Rate, q.Window)}
			case sim.SlidingCounter:
				c.limits = []Limit{SlidingCounterWindow(q.Rate, q.Window)}
			case sim.Concurrency:
				c.limits = []Limit{Concurrent(q.Rate)}
			}
			if q.InFlight > 0 {
				c.limits = append(c.limits, Concurrent(q.InFlight))
			}
			out = append(out, c)
		}
	}
	add(fixed40, "prose", "retry-after", "retry-after-date", "github", "github-429", "github-secondary", "x", "epoch-floor", "ietf", "reset-ms")
	add(with(fixed40, sim.FixedFirst), "retry-after", "epoch-floor")
	add(bucket8, "prose", "discord", "delta")
	add(gcra8, "until-full", "none")
	add(with(gcra8, sim.GCRADelay), "none")
	add(with(fixed40, sim.SlidingLog), "window")
	add(with(fixed40, sim.SlidingCounter), "httprate")
	add(sim.Quota{Shape: sim.Concurrency, Rate: 5}, "retry-after")
	fixed40.InFlight = 5
	add(fixed40, "retry-after")
	fixed40.InFlight = 0
	// Not in the matrix: providers that refuse with no hint at all beside
	// gcra/none, to see what hintless learning does on other shapes.
	add(fixed40, "none")
	add(with(fixed40, sim.FixedFirst), "none")
	add(bucket8, "none")
	add(with(fixed40, sim.SlidingLog), "none")
	// nginx's limit_req without a burst (its default): 20 r/s, one at a
	// time. A learned window of n per second sent at once gets one of each
	// burst accepted (see docs/design.md, Hintless pause).
	out = append(out, cell{name: "gcra-burst0/none", quota: sim.Quota{Shape: sim.GCRA, Rate: 20, Burst: 0}, limits: []Limit{PerSecond(20, 0)}})
	return out
}()

// simAsynq is asynq's side of simulateShape's fleet, with the bench's
// settings (example/run.go): the tasks not started yet (pending), and
// those deferred or refused, in its retry set until they are forwarded
// (retry, the instants, µs). A worker whose task is deferred or refused is
// free at once and takes the next task; with none due it looks again at
// the processor's next poll (asynqPoll).
type simAsynq struct {
	pending int
	retry   []int64
}

// take takes a task due at now: a forwarded one first, or one not started.
func (q *simAsynq) take(now int64) bool {
	for i, at := range q.retry {
		if at <= now {
			q.retry = slices.Delete(q.retry, i, i+1)
			return true
		}
	}
	if q.pending > 0 {
		q.pending--
		return true
	}
	return false
}

// Times of asynq's side, µs: a deferred worker's next dequeue (the
// admission's round trip and asynq's dequeue), the forwarder's phase
// after the whole second (it ticks every DelayedTaskCheckInterval, 1 s in
// the bench, from the server's start), and an idle processor's poll
// (TaskCheckInterval 50 ms; asynq sleeps half of it and a jitter up to
// all of it), its dequeues one after the other.
const (
	asynqDequeue  = 1_000
	asynqForward  = 17_000
	asynqIdlePoll = 50_000
	asynqPollNext = 300
)

// asynqRetry is when a task retried at now after delay µs is forwarded
// back to the queue: asynq truncates its retry time to a whole second;
// quotagate's RetryDelay aligns the delay so that the retry time is one,
// the plain pause (example/pause.go) rounds the delay up to whole seconds.
func asynqRetry(now, delay int64, plain bool) int64 {
	at := ceilSecond(now + delay)
	if plain {
		at = (now + ceilSecond(delay)) / 1_000_000 * 1_000_000
	}
	return at + asynqForward
}

// asynqPoll is when an idle worker asks for a task again after now.
func asynqPoll(now int64, worker int) int64 {
	return (now/asynqIdlePoll+1)*asynqIdlePoll + int64(worker)*asynqPollNext
}

// TestModelCounterShape: behind a sliding window counter that advertises
// its budget (sliding-counter/httprate), nothing configured, every poll
// completes at no more than the 1.05 requests per accepted poll
// where the provider tells enough: after the first window the budget is
// read as a counter's and paced as it decays, not refused window after
// window (before, the probes at each reset were refused). Times are the
// benchmark's to measure.
func TestModelCounterShape(t *testing.T) {
	i := slices.IndexFunc(shapeCells, func(c shapeCell) bool { return c.name == "sliding-counter/httprate" })
	c := shapeCells[i]
	d, _ := sim.DialectNamed("httprate")
	read := false
	shapeTrace = func(format string, args ...any) {
		read = read || strings.HasPrefix(format, "%.3f counter")
	}
	defer func() { shapeTrace = nil }()
	gate := simulateShape(c.quota, d, nil, 20, 200, 25_000, false, 90_000_000)
	if gate.accepted < 200 {
		t.Fatalf("accepted %d of 200", gate.accepted)
	}
	if w := gate.waste(); w > 1.05 {
		t.Errorf("the gate wastes %.3fx, more than 1.05x", w)
	}
	if !read {
		t.Error("the budget was never read as a sliding window counter's")
	}
}
