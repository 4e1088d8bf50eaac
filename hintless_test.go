package quotagate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// TestHintlessDay: a provider refuses every request without a readable
// hint for a whole simulated day (a daily quota spent), while the scope's
// workers keep asking. Through the public API (Middleware, IsFailure,
// RetryDelay, the default Config but for holds and the store's timeout)
// on a miniredis whose TIME and TTLs move together, with asynq's part
// played by the test (hintlessFleet). The workers' requests of the first
// instant are on their way before any refusal is known; once one is, the
// scope sends one request per pause, the pauses doubling from a second to
// the 12-hour cap: 16 probes in the day, 17 requests counting the first
// refusal, where a minute's cap sent 1,440.
func TestHintlessDay(t *testing.T) {
	const workers = 20
	f := newHintlessFleet(t, workers)
	var burst int64      // the requests of the first instant
	var probeAt []string // when each request after them went
	for {
		now, due := f.due()
		if !now.Before(f.start.Add(24 * time.Hour)) {
			break
		}
		sent := f.run(t, now, due)
		if now.Equal(f.start) {
			burst = sent
			continue
		}
		for range sent {
			probeAt = append(probeAt, now.Sub(f.start).String())
		}
	}
	p, err := f.g.State(context.Background(), f.scope)
	if err != nil {
		t.Fatal(err)
	}
	probes := int64(len(probeAt))
	t.Logf("a day of hintless refusals: %d requests on their way at once, then %d: at %v; a task refused at most %d times; %v",
		burst, probes, probeAt, f.maxRetried(), p)
	if burst != workers {
		t.Errorf("%d requests at the first instant, want the %d workers' (nothing known yet)", burst, workers)
	}
	// The goal: at most 20 requests per scope in the day once the scope
	// knows: the first refusal, and every request sent after it.
	if n := 1 + probes; n > 20 {
		t.Errorf("the scope sent %d requests in the day from its first refusal, want at most 20", n)
	}
	if probes != 16 {
		t.Errorf("%d probes in the day, want 16 (after 1, 2, 4 s … 2^15 s, then the 12-hour cap)", probes)
	}
	if p.Reason != ReasonPaused || p.Remaining <= 6*time.Hour {
		t.Errorf("at the day's end: %v, want paused for most of the 12-hour cap", p)
	}
	// A refusal spends one of its task's retries; a deferral none. A task
	// is refused at most once per pause (the probe goes alone).
	if n := f.maxRetried(); n > 1+int(probes) {
		t.Errorf("a task was refused %d times, more than once per pause", n)
	}
}

// hintlessFleet is TestHintlessDay's fleet: tasks of one scope served by
// a gate's Middleware in front of a provider that refuses everything
// without a hint, and asynq's part: each task comes back after
// RetryDelay's delay, forwarded at the next DelayedTaskCheckInterval
// tick, and a refusal (IsFailure) spends one of its retries.
type hintlessFleet struct {
	mini  *miniClock
	clock atomic.Int64 // the workers' clock (ns): Redis TIME's
	g     *Gate
	h     asynq.Handler
	rd    asynq.RetryDelayFunc
	scope Scope
	start time.Time
	tasks []*hintlessTask
	sent  atomic.Int64 // requests that reached the provider
}

type hintlessTask struct {
	t       *asynq.Task
	next    time.Time // asynq brings it back then
	retried int       // asynq's retry count: refusals, not deferrals
}

// hintlessCall is what the provider's handler gets of its instant: a
// request waits for release, so that the requests of one instant are all
// on their way before the first of them is answered; decided hears of
// each task of the instant once it sent or was deferred.
type hintlessCall struct {
	release <-chan struct{}
	sent    *atomic.Bool
	decided chan<- struct{}
}

type hintlessCallKey struct{}

const (
	hintlessLatency  = 25 * time.Millisecond  // each way
	hintlessInterval = 500 * time.Millisecond // asynq's DelayedTaskCheckInterval, as the README sets it
)

func newHintlessFleet(t *testing.T, workers int) *hintlessFleet {
	c, rdb := newMini(t)
	f := &hintlessFleet{mini: c, scope: Scope{Provider: "quota", Account: "a"}, start: c.Now}
	f.clock.Store(c.Now.UnixNano())
	// MaxHold negative: no in-process waits, which would sleep on the
	// real clock while the simulated one stands still. StoreTimeout long:
	// a loaded machine (-race) must not make the gate fail open.
	f.g = newWith(rdb, Config{Prefix: "qgtest", StoreTimeout: 10 * time.Second, Tuning: Tuning{MaxHold: -1}},
		hooks{now: func() time.Time { return time.Unix(0, f.clock.Load()) }, rand: func() float64 { return 0.5 }})
	t.Cleanup(func() { f.g.Close() })
	f.h = f.g.Middleware()(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		cl := ctx.Value(hintlessCallKey{}).(hintlessCall)
		f.sent.Add(1)
		cl.sent.Store(true)
		cl.decided <- struct{}{}
		<-cl.release
		return &Refusal{} // 429 and nothing else
	}))
	f.rd = f.g.RetryDelay(nil)
	for i := range workers {
		f.tasks = append(f.tasks, &hintlessTask{t: NewTask("poll", fmt.Appendf(nil, "%d", i), f.scope), next: c.Now})
	}
	return f
}

// advance moves Redis TIME, its TTLs and the workers' clock by d.
func (f *hintlessFleet) advance(d time.Duration) {
	f.mini.Advance(d)
	f.clock.Store(f.mini.Now.UnixNano())
}

// due returns the next instant a task comes back, and its tasks.
func (f *hintlessFleet) due() (time.Time, []*hintlessTask) {
	now := f.tasks[0].next
	for _, tk := range f.tasks {
		if tk.next.Before(now) {
			now = tk.next
		}
	}
	var due []*hintlessTask
	for _, tk := range f.tasks {
		if tk.next.Equal(now) {
			due = append(due, tk)
		}
	}
	return now, due
}

// run serves the tasks due at now at once, answers their requests a round
// trip later, schedules each task's return as asynq would, and returns
// how many requests reached the provider.
func (f *hintlessFleet) run(t *testing.T, now time.Time, due []*hintlessTask) int64 {
	f.advance(now.Sub(f.mini.Now))
	before := f.sent.Load()
	release, decided := make(chan struct{}), make(chan struct{}, len(due))
	errs := make([]error, len(due))
	var wg sync.WaitGroup
	for i, tk := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := hintlessCall{release: release, sent: new(atomic.Bool), decided: decided}
			errs[i] = f.h.ProcessTask(context.WithValue(context.Background(), hintlessCallKey{}, cl), tk.t)
			if !cl.sent.Load() {
				decided <- struct{}{} // deferred without a request
			}
		}()
	}
	for range due {
		<-decided
	}
	f.advance(2 * hintlessLatency)
	close(release)
	wg.Wait()
	for i, tk := range due {
		var r *Refusal
		var d *Deferral
		if !errors.As(errs[i], &r) && !errors.As(errs[i], &d) {
			t.Fatalf("at +%v: %v, want a refusal or a deferral", now.Sub(f.start), errs[i])
		}
		delay := f.rd(tk.retried, errs[i], tk.t)
		if IsFailure(errs[i]) {
			tk.retried++
		}
		tk.next = ceilTo(f.mini.Now.Add(delay), hintlessInterval)
	}
	return f.sent.Load() - before
}

// maxRetried is the most retries a task spent.
func (f *hintlessFleet) maxRetried() int {
	n := 0
	for _, tk := range f.tasks {
		n = max(n, tk.retried)
	}
	return n
}

// ceilTo is t rounded up to a multiple of d (asynq's forwarder's tick).
func ceilTo(t time.Time, d time.Duration) time.Time {
	r := t.Truncate(d)
	if r.Before(t) {
		r = r.Add(d)
	}
	return r
}
