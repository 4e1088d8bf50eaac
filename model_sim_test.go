package quotagate

import (
	"container/heap"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/decide"
	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/sim"
)

// A discrete-event simulation of a fleet in front of a provider, on the
// model alone (no Redis, no clock): workers ask the model, send what it
// admits, and report the provider's refusals with its hint. It checks what
// learning does over many windows in milliseconds of CPU, deterministically.

// simQuota is a provider's limiter: take answers a request arriving at t
// (µs) and, when it refuses, the exact wait until it would accept one (a
// negative wait: the refusal says nothing of when).
type simQuota interface {
	take(t int64) (ok bool, wait int64)
}

// simFixed counts n per window of w µs; windows start on the clock
// (multiples of w) or, with fromFirst, at the first request after the
// last window ended.
type simFixed struct {
	n, w, offset int64 // windows on the clock start at offset + k·w
	fromFirst    bool
	start, cnt   int64
}

func (f *simFixed) take(t int64) (bool, int64) {
	s := t - (t-f.offset)%f.w
	if f.fromFirst {
		s = f.start
		if t >= f.start+f.w {
			s = t
		}
	}
	if s != f.start {
		f.start, f.cnt = s, 0
	}
	if f.cnt < f.n {
		f.cnt++
		return true, 0
	}
	return false, f.start + f.w - t
}

// simBucket is a token bucket of rate per second and burst.
type simBucket struct {
	per, burst int64 // µs per token, size
	tat        int64 // GCRA form: full at tat - burst·per
}

func (b *simBucket) take(t int64) (bool, int64) {
	tat := max(b.tat, t)
	if at := tat + b.per - b.burst*b.per; at > t {
		return false, at - t
	}
	b.tat = tat + b.per
	return true, 0
}

type simEvent struct {
	at     int64
	worker int
	resp   bool // a response arrives (ok, hint); else the worker asks
	ok     bool
	hint   int64
	opens  int64 // the request opened a learned window: answer it
	gen    int   // a worker's ask: stale unless its worker's current generation (see simWorkers.wakeSlot)
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].worker < q[j].worker
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simResult is what a simulated run did.
type simResult struct {
	requests, accepted int
	end                int64 // µs from the start to the last acceptance
	deadlineEarlier    bool  // a model.Refusal moved the deadline earlier
}

// simulate runs polls tasks with workers workers (latency µs each way and
// back) against q under p. plain forgets everything but the pause after
// every event: the reference article's algorithm alone. Hints are read
// in whole seconds, rounded up, as "try again in 5 seconds" is.
// simTrace, when set, hears every admission and refusal of simulate.
var simTrace func(format string, args ...any)

// The pauses of a refusal without a hint, ms: the cap of the gate's
// hintless episode (Config.FallbackPause's default), and the plain shared
// pause's whole pause (the example's pauseFallback, a minute).
var (
	simFallbackCap   = Config{}.withDefaults().FallbackPause.Milliseconds()
	simPlainFallback = time.Minute.Milliseconds()
)

func simulate(p model.Params, q simQuota, workers, polls int, latency int64, plain bool) simResult {
	var m model.State
	m.Normalize(p, 0)
	const t0 = 1_000_000_000_000 // µs: any instant
	var r simResult
	ev := &simQueue{}
	for i := range workers {
		heap.Push(ev, simEvent{at: t0, worker: i})
	}
	w := &simWorkers{ev: ev, pol: decide.Policy{MaxHold: time.Duration(p.Hold) * time.Microsecond, MaxHolders: 12}, holding: make([]bool, workers),
		// no place: deferred through asynq (whole seconds, forwarded every
		// DelayedTaskCheckInterval: half of 1 s on average)
		wake: func(at, delay int64, _ int) int64 { return at + ceilSecond(delay) + 500_000 }}
	started := 0
	for ev.Len() > 0 && r.accepted < polls {
		e := heap.Pop(ev).(simEvent)
		if w.stale(e) {
			continue
		}
		if plain {
			m.Forget()
		}
		if e.resp {
			if e.ok {
				r.accepted++
				r.end = e.at - t0
				if e.opens > 0 {
					m.Observe(p, e.at, model.Observation{Remaining: -2, Opened: e.opens})
				}
			} else {
				started--
				hint := (e.hint + 999_999) / 1_000_000 * 1000
				rf := model.Refusal{Pause: max(hint, 1000), Hinted: true, Prec: 1_000_000}
				if e.hint < 0 { // no hint: Config.FallbackPause caps the episode's pause
					rf = model.Refusal{Pause: simFallbackCap, Hinted: false, Prec: 1_000_000}
					if plain { // the plain pause's fallback is all of its pause (example/pause.go)
						rf = model.Refusal{Pause: simPlainFallback, Hinted: true, Prec: 1_000_000}
					}
				}
				before := m.Deadline()
				d, _ := m.Refuse(p, e.at, rf)
				r.deadlineEarlier = r.deadlineEarlier || d < before && m.PausedAt(p, e.at)
				if simTrace != nil {
					simTrace("%.3f refused hint %dms deadline %.3f: %v", float64(e.at-t0)/1e6, hint, float64(d*1000-t0)/1e6, m)
				}
			}
			if started < polls {
				heap.Push(ev, simEvent{at: e.at, worker: e.worker})
			}
			continue
		}
		d, _, sent := w.admit(&m, p, e)
		if !sent {
			continue
		}
		started++
		r.requests++
		if simTrace != nil && !plain {
			simTrace("%.3f admit at +%dms", float64(e.at-t0)/1e6, d.Wait/1000)
		}
		send := e.at + d.Wait
		ok, wait := q.take(send + latency)
		heap.Push(ev, simEvent{at: send + 2*latency, worker: e.worker, resp: true, ok: ok, hint: wait, opens: d.Opens})
	}
	return r
}

// simWorkers is the workers' side of a simulation: a task's admission by
// the model and decide, and what its worker does then (hold in-process,
// or be deferred through asynq and woken by wake).
type simWorkers struct {
	ev      *simQueue
	pol     decide.Policy
	holding []bool
	held    int
	wake    func(at, delay int64, worker int) int64 // when asynq brings a deferred task back
	// deferred, when set, takes a deferred task instead of its worker
	// waiting for it: the task goes back to asynq (its retry set) and the
	// worker is free (simulateShape's asynq queue)
	deferred func(now, delay int64, worker int)
	// The waits for a slot of a concurrency limit: the workers waiting
	// (in order), since when each waits (0: not), each worker's
	// generation (an ask of an older one is stale: the worker was woken),
	// and the leases handed out.
	slotWaiting []int
	slotSince   map[int]int64
	gen         map[int]int
	leases      int
}

// stale reports whether e is an ask its worker no longer waits for.
func (w *simWorkers) stale(e simEvent) bool { return !e.resp && !e.ok && e.gen != w.gen[e.worker] }

// wakeSlot is a release of n units by this process at now: the first n
// workers waiting for a slot ask again at once (local.SlotWakers).
func (w *simWorkers) wakeSlot(now int64, n int) {
	for ; n > 0 && len(w.slotWaiting) > 0; n-- {
		x := w.slotWaiting[0]
		w.slotWaiting = w.slotWaiting[1:]
		w.gen[x]++
		heap.Push(w.ev, simEvent{at: now, worker: x, gen: w.gen[x]})
	}
}

// admit asks the model for worker e's task at e.at and does what decide
// says. It returns the decision, the admission's lease id, and whether
// the task is sent (at e.at + d.wait); when it is not, the worker's next
// event is queued.
func (w *simWorkers) admit(m *model.State, p model.Params, e simEvent) (model.Decision, string, bool) {
	if w.gen == nil {
		w.gen, w.slotSince = map[int]int{}, map[int]int64{}
	}
	w.slotWaiting = slices.DeleteFunc(w.slotWaiting, func(x int) bool { return x == e.worker })
	w.leases++
	id := "l" + strconv.Itoa(w.leases)
	d := m.AdmitLease(p, e.at, 1, model.Background, id)
	a := decide.AnswerOf(d, e.at)
	slot := d.Reason == model.ReasonInFlight
	since, waited := w.slotSince[e.worker]
	if !slot || !waited {
		since = e.at
	}
	delete(w.slotSince, e.worker)
	v := decide.Decide(a, w.pol, 0.5)
	if shapeTrace != nil {
		shapeTrace("  verdict w%d act %d wait %v holders %d held %d", e.worker, v.Act, v.Wait, v.Holders, w.held)
	}
	switch v.Act {
	case decide.Hold, decide.HoldPause:
		if v.Act == decide.HoldPause && (!w.holding[e.worker] && w.held >= v.Holders || slot && e.at-since >= p.Hold) {
			w.setHolding(e.worker, false)
			w.deferTo(e, v.Retry.Microseconds())
			return d, "", false
		}
		w.setHolding(e.worker, true)
		if slot {
			w.slotSince[e.worker] = since
			w.slotWaiting = append(w.slotWaiting, e.worker)
		}
		heap.Push(w.ev, simEvent{at: e.at + max(v.Wait.Microseconds(), 1000), worker: e.worker, gen: w.gen[e.worker]})
		return d, "", false
	case decide.Defer:
		w.setHolding(e.worker, false)
		w.deferTo(e, v.Retry.Microseconds())
		return d, "", false
	}
	w.setHolding(e.worker, false)
	return d, id, true
}

// deferTo defers worker e's task for delay µs: to deferred, or the worker
// waits for it until wake.
func (w *simWorkers) deferTo(e simEvent, delay int64) {
	if w.deferred != nil {
		w.deferred(e.at, delay, e.worker)
		return
	}
	heap.Push(w.ev, simEvent{at: w.wake(e.at, delay, e.worker), worker: e.worker, gen: w.gen[e.worker]})
}

func (w *simWorkers) setHolding(worker int, on bool) {
	switch {
	case on && !w.holding[worker]:
		w.held++
	case !on && w.holding[worker]:
		w.held--
	}
	w.holding[worker] = on
}

// ceilSecond rounds a delay up to whole seconds, as asynq's retry times are.
func ceilSecond(us int64) int64 { return (us + 999_999) / 1_000_000 * 1_000_000 }

// TestModelLearningOnlyHelps: in the simulation, on fixed windows (on the
// clock, and counted from the first request) and a token bucket whose
// refusals hint in whole seconds, with nothing configured, the model with
// learning completes every poll, wastes no more than the plain shared
// pause, and is not slower than it by more than 5% + 0.5 s.
func TestModelLearningOnlyHelps(t *testing.T) {
	p := model.Params{Hold: 1_500_000, MaxPause: 12 * 3600 * 1000, Answer: 2_500_000}
	for _, tc := range []struct {
		name  string
		quota func() simQuota
		polls int
	}{
		// A first contact 2.7 s into the provider's window learns 40 per
		// 3 s; the next learned window's probe is refused inside the
		// provider's window with "2 seconds", which relearns 5 s
		// (learnState.relearn): a refused probe that kept n and w would
		// leave learning slower than the plain pause.
		{"fixed 40/5s on the clock", func() simQuota { return &simFixed{n: 40, w: 5_000_000, offset: 2_300_000} }, 200},
		// A 10 s clock window met 4.9 s into it (offset 5.1 s): learned as a
		// log (longer than MaxHold), whose probes are refused; a refused
		// probe's entry left in the learned log would shift a slot of each
		// following window and leave learning slower than the plain pause
		// (at other offsets likewise): learnState.refuse takes it out.
		{"fixed 40/10s on the clock", func() simQuota { return &simFixed{n: 40, w: 10_000_000, offset: 5_100_000} }, 200},
		{"fixed 40/5s from the first request", func() simQuota { return &simFixed{n: 40, w: 5_000_000, fromFirst: true} }, 200},
		{"fixed 5/3s from the first request", func() simQuota { return &simFixed{n: 5, w: 3_000_000, fromFirst: true} }, 30},
		{"bucket 8/s burst 10", func() simQuota { return &simBucket{per: 125_000, burst: 10} }, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plain := simulate(p, tc.quota(), 20, tc.polls, 12_500, true)
			learn := simulate(p, tc.quota(), 20, tc.polls, 12_500, false)
			waste := func(r simResult) float64 { return float64(r.requests) / float64(r.accepted) }
			t.Logf("plain: %.2fx in %.1fs; learning: %.2fx in %.1fs", waste(plain), float64(plain.end)/1e6, waste(learn), float64(learn.end)/1e6)
			if learn.accepted < tc.polls || plain.accepted < tc.polls {
				t.Fatalf("accepted %d (plain %d) of %d", learn.accepted, plain.accepted, tc.polls)
			}
			if waste(learn) > waste(plain) {
				t.Errorf("learning wastes %.2fx, more than the plain pause's %.2fx", waste(learn), waste(plain))
			}
			if float64(learn.end) > float64(plain.end)*1.05+500_000 {
				t.Errorf("learning took %.1fs, the plain pause %.1fs", float64(learn.end)/1e6, float64(plain.end)/1e6)
			}
			if learn.deadlineEarlier {
				t.Error("a refusal moved the deadline earlier")
			}
		})
	}
}

// TestModelLearningOnlyHelpsShapes: the same on the matrix's cells whose
// provider speaks only through its refusals' hints (its budget headers,
// where it sends any, are not what refuses), on the shapes model, nothing
// configured: every poll completes and the gate wastes no more than the
// plain shared pause, nor more than the 1.10 requests per accepted
// poll where the provider counts by windows (a concurrency limit, whose
// refusals' "1 second" says nothing of its capacity, is held to the plain
// pause's waste). Times are the benchmark's to measure.
func TestModelLearningOnlyHelpsShapes(t *testing.T) {
	const probationProbe = 1.0 / 200 // one refused request of the 200 polls
	for _, tc := range []struct {
		cell     string
		maxWaste float64 // the bound for the cell (0: the plain pause's)
	}{
		// The first contact's refusals, which the plain pause pays too,
		// and no more: the first contact's raises are frozen (raiseAfter),
		// for a raise, n+1 in the window after one spent whole, is refused
		// once the fleet defers through asynq's queue. Where the provider
		// advertises no budget, one more: the probation's probe beyond the
		// spent window, refused (internal/model's flight.go), once per
		// what the scope learns.
		{"fixed/prose", 1.10 + probationProbe},
		{"fixed/retry-after", 1.10 + probationProbe},
		{"fixed/github-secondary", 1.10},
		{"fixed-first/retry-after", 1.10 + probationProbe},
		// the learned limit read as a sliding log (learnState.logSpec): the
		// first contact's refusals, and the probation's probe
		{"sliding-log/window", 1.10 + probationProbe},
		// Above 1.10: besides the first contact's refusals, which the plain
		// pause pays too, the first window after it has refusals of its
		// own: the first cycle took the bucket's burst (10) for a window's
		// quota, where a second grants 8.
		{"bucket/prose", 1.11},
		{"concurrency/retry-after", 0},
	} {
		t.Run(tc.cell, func(t *testing.T) {
			i := slices.IndexFunc(shapeCells, func(c shapeCell) bool { return c.name == tc.cell })
			if i < 0 {
				t.Fatalf("no cell %s", tc.cell)
			}
			c := shapeCells[i]
			_, dn, _ := strings.Cut(c.name, "/")
			d, _ := sim.DialectNamed(dn)
			plain := simulateShape(c.quota, d, nil, 20, 200, 25_000, true, 90_000_000)
			gate := simulateShape(c.quota, d, nil, 20, 200, 25_000, false, 90_000_000)
			t.Logf("plain: %.3fx; gate: %.3fx", plain.waste(), gate.waste())
			if gate.accepted < 200 || plain.accepted < 200 {
				t.Fatalf("accepted %d (plain %d) of 200", gate.accepted, plain.accepted)
			}
			if gate.waste() > plain.waste() {
				t.Errorf("the gate wastes %.3fx, more than the plain pause's %.3fx", gate.waste(), plain.waste())
			}
			if tc.maxWaste > 0 && gate.waste() > tc.maxWaste {
				t.Errorf("the gate wastes %.3fx, more than %.2fx", gate.waste(), tc.maxWaste)
			}
		})
	}
}

// TestModelWindowNotConcurrency: a small fixed window on the clock, which
// the first refusals teach as a learned window aligned to their deadline
// rather than to the provider's clock, with nothing configured, on the
// shapes model: the gate is no slower than the plain shared pause by more
// than 5% + 0.5 s and wastes no more than it. The probation's probes
// beyond the spent learned window meet the provider's next window, which
// has room: they must not confirm a concurrency limit (flight.go's
// answer asks for more than a window of n could accept), and a refusal of
// a cycle the learned concurrency limit paced must not teach the window a
// lower n (State.learnRefusal), or the scope runs at a fraction of its
// quota.
func TestModelWindowNotConcurrency(t *testing.T) {
	for _, dn := range []string{"prose", "retry-after"} {
		d, _ := sim.DialectNamed(dn)
		for _, rate := range []int{5, 10} {
			for _, workers := range []int{20, 30} {
				for _, latency := range []int64{25_000, 50_000, 60_000, 80_000} {
					q := sim.Quota{Shape: sim.FixedClock, Rate: rate, Window: time.Second}
					name := q.Name() + "/" + dn + "/" + strconv.Itoa(rate) + "per1s/" + strconv.Itoa(workers) + "workers/" + strconv.FormatInt(latency/1000, 10) + "ms"
					t.Run(name, func(t *testing.T) {
						plain := simulateShape(q, d, nil, workers, 200, latency, true, 200_000_000)
						gate := simulateShape(q, d, nil, workers, 200, latency, false, 200_000_000)
						t.Logf("plain: %.3fx in %.1fs; gate: %.3fx in %.1fs", plain.waste(), float64(plain.end)/1e6, gate.waste(), float64(gate.end)/1e6)
						if gate.accepted < 200 || plain.accepted < 200 {
							t.Fatalf("accepted %d (plain %d) of 200", gate.accepted, plain.accepted)
						}
						if gate.waste() > plain.waste() {
							t.Errorf("the gate wastes %.3fx, more than the plain pause's %.3fx", gate.waste(), plain.waste())
						}
						if float64(gate.end) > float64(plain.end)*1.05+500_000 {
							t.Errorf("the gate took %.1fs, the plain pause %.1fs", float64(gate.end)/1e6, float64(plain.end)/1e6)
						}
					})
				}
			}
		}
	}
}

// simOutage refuses every request without a hint until until (µs), then
// accepts every one; refused counts its refusals.
type simOutage struct{ until, refused int64 }

func (o *simOutage) take(t int64) (bool, int64) {
	if t < o.until {
		o.refused++
		return false, -1
	}
	return true, 0
}

// TestModelHintlessOutage: a provider that refuses without a hint for ten
// minutes, then accepts everything. With nothing configured the scope
// sends one request per pause while it refuses (the pauses doubling from a
// second towards FallbackPause's 12 hours), not its whole fleet, and every
// poll completes within a pause of the outage's end: each pause is about
// as long as all the pauses before it, so within the outage's own length.
// The plain shared pause sends its fleet once a minute.
func TestModelHintlessOutage(t *testing.T) {
	p := model.Params{Hold: 1_500_000, MaxPause: 12 * 3600 * 1000, Answer: 2_500_000}
	const outage = 600_000_000
	const t0 = 1_000_000_000_000 // simulate's
	for _, plain := range []bool{false, true} {
		q := &simOutage{until: t0 + outage}
		r := simulate(p, q, 20, 200, 12_500, plain)
		t.Logf("plain %v: %d requests refused during the outage, done %.1fs after it", plain, q.refused, float64(r.end-outage)/1e6)
		if r.accepted < 200 {
			t.Fatalf("plain %v: %d of 200 polls done", plain, r.accepted)
		}
		// The first burst of the fleet, then one probe per pause: the k-th
		// after 1 + 2 + … + 2^(k-1) = 2^k − 1 s, while the outage lasts.
		probes := int64(bits.Len64(uint64(outage/1_000_000+1)) - 1)
		if !plain && q.refused > 20+probes {
			t.Errorf("%d requests refused during the outage, want at most the fleet's 20 and %d probes", q.refused, probes)
		}
		if !plain && r.end > 2*outage+2_000_000 {
			t.Errorf("done %.1fs after the outage, want within a pause (the outage's length)", float64(r.end-outage)/1e6)
		}
	}
}
