package quotagate

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
)

// Limit is a proactive throughput limit: the budget a provider grants one
// scope, spent by all workers together before any refusal is seen.
//
// It answers a different question from the pause. The pause carries fresh
// remote feedback ("the provider told this scope to stop until a deadline");
// the limit models a known budget ("may this request spend capacity now?").
// Both are evaluated by one Redis script in one round trip, but a scope may
// have either, both or neither.
//
// The limit is a generic cell rate algorithm (GCRA), as in
// github.com/go-redis/redis_rate: requests are admitted one emission interval
// (Period/Rate) apart, and up to Burst of them at once after an idle spell.
// Any n admissions span at least (n-Burst)·Period/Rate of Redis time, so
// Burst 1 never admits more than Rate requests in any window of one Period:
// the setting for a fixed-window provider (the requests themselves arrive
// with the workers' timer and network jitter added). For a token-bucket
// provider use its bucket size.
//
// A fixed window limit (FixedWindow) instead counts requests in windows of
// one Period, as many providers do, and lets the fleet spend each window's
// Rate as it opens. Its windows are aligned to the provider's own as soon as
// a refusal's hint or a reset header tells where they end.
//
// A sliding window limit (SlidingWindow) keeps a log of its admissions and
// admits a request when the window of one Period before it has room.
//
// A concurrency limit (Concurrent) counts requests in flight, not in time:
// at most Rate at once, each holding a lease from its admission until it
// is released (its response, or its handler's return), or for Period at
// most.
type Limit struct {
	Rate    int           // requests per Period (in flight at once: Concurrent); 0 means no limit
	Period  time.Duration // the window Rate is counted over (Concurrent: a lease's longest life)
	Burst   int           // requests admitted at once; values below 1 mean 1 (GCRA only)
	Fixed   bool          // counted in fixed windows of Period (see FixedWindow)
	Sliding bool          // counted in a sliding window of Period (see SlidingWindow); Fixed wins over it
	// Concurrent: at most Rate in flight at once (see Concurrent); Fixed
	// and Sliding win over it
	Concurrent bool
}

// PerSecond returns a limit of rate requests per second with the given burst.
func PerSecond(rate, burst int) Limit { return Limit{Rate: rate, Period: time.Second, Burst: burst} }

// PerMinute returns a limit of rate requests per minute with the given burst.
func PerMinute(rate, burst int) Limit { return Limit{Rate: rate, Period: time.Minute, Burst: burst} }

// FixedWindow returns a limit of rate requests in each fixed window of
// period, for a provider that counts that way ("40 requests per 5 seconds,
// reset at the window's end"). The windows are aligned to the provider's as
// soon as the gate learns where one ends (a refusal's hint, or a reset
// header seen by Observe or Transport), and then admit until the window's
// last second, or its last millisecond when the reset was read in
// milliseconds (a reset read to the second may be up to a second late).
// Before that, the first request of an idle scope starts the windows, as a
// fleet spending its quota at once would, and a window admits only in its
// first Tuning.MaxHold (at most half the period): spending kept at the head
// of windows one period apart never puts more than rate requests into any
// window of the provider's, wherever its windows start.
func FixedWindow(rate int, period time.Duration) Limit {
	return Limit{Rate: rate, Period: period, Fixed: true}
}

// SlidingWindow returns a limit of n requests in any window of w, for a
// provider that logs its requests ("40 requests in any 5 seconds", the
// sorted-set limiters of Redis): an exact sliding log. A request of cost c
// is admitted at t when the admissions of the last w before t (and any
// slot already reserved after t) plus c are at most n; otherwise at the
// instant the oldest admission that leaves room leaves the window. So the
// fleet spends all n at once after an idle spell, and then each slot again
// as it comes back, one window after it was spent.
//
// An admission's slot comes back model.SlidingSettle (50 ms) more than w
// after the admission's Redis TIME: the provider logs the request when it
// arrives, a few milliseconds after its admission (more under load), and a
// request arriving sooner after its slot's predecessor than the one before
// it would be the n+1-th of the provider's window.
//
// A refusal with a hint fills the log: the provider counted n requests in
// its window; those the gate did not admit (another client, a lost record)
// may be as recent as the refusal, so the log is made to hold n admissions
// within the window of the refusal, the missing ones at its instant. The
// pause holds the scope until the hint; the filled slots come back one
// window after the refusal. A refusal without a hint, or Gate.Pause,
// leaves the log as it is. A cost above n is never admitted (ErrCost).
//
// A sliding window counter (Cloudflare's, go-chi/httprate: two fixed
// windows' counts, the previous one weighted as if spread evenly over it)
// is not a sliding log: it refuses a burst at the head of one of its
// windows that a log admits (the previous window's burst still counts
// almost whole), and at a steady pace admits n−1 per window. State n per w
// of such a provider as SlidingCounterWindow(n, w).
func SlidingWindow(n int, w time.Duration) Limit {
	return Limit{Rate: n, Period: w, Sliding: true}
}

// DefaultLease is the longest a lease of a Concurrent limit lives when it
// is never released (a worker that crashed, a connection lost with its
// response): the slot comes back then. A minute is longer than the
// requests of a polled API take (http.Client timeouts of 30 s are
// common), and short enough that a slot lost to a crash is back within
// the minute. Set Limit.Period for requests that may take longer.
const DefaultLease = time.Minute

// Concurrent returns a limit of n requests in flight at once, for a
// provider that counts concurrent requests ("at most 5 requests in flight
// per API key", refused beyond with 429 and Retry-After). It panics if n
// is below 1 (a concurrency limit of none would admit nothing; leave the
// limit out for no limit).
//
// Every admission takes a lease of its cost in units, held until it is
// released: by the Transport when the request's response arrives or the
// request fails, and by the Middleware when the handler returns (on every
// path: success, error, refusal, panic), whichever comes first. A lease
// never released expires DefaultLease after its admission (Limit.Period:
// set it above the longest request). A request of cost c is admitted
// while the unexpired leases and c are at most n; a task that finds every
// slot taken waits in-process (Tuning.MaxHold at most, without
// Tuning.MaxHolders's bound: each release wakes one waiting worker of the
// gate at once, and a waiting worker asks again every 20 ms for
// slots released by other processes) before it is deferred through
// asynq. Its State and deferrals say ReasonInFlight.
//
// It composes with the other limits (all are checked and spent in one
// round trip), the pause, the budget and the classes; a refusal leaves
// the leases as they are (each is released by its request). A cost above
// n is never admitted (ErrCost).
func Concurrent(n int) Limit {
	if n < 1 {
		panic(fmt.Sprintf("quotagate: Concurrent(%d): a concurrency limit admits at least one request in flight", n))
	}
	return Limit{Rate: n, Period: DefaultLease, Concurrent: true}
}

// SlidingCounterWindow returns the limit to configure for a provider that
// documents n requests per w counted by a sliding window counter
// (Cloudflare's, go-chi/httprate): a GCRA of n−1 per w with burst 1 (for
// n = 1, one per 2w). Wherever the counter's windows start, it never
// refuses requests so paced: a window of w holds at most n−1 of them, and
// the i-th request of a window comes at least (i−1)·w/(n−1) into it, where
// the counter's estimate prev·(w−e)/w + i with prev ≤ n−1 is at most n.
// A counter's greedy client does little better: after its first window it
// too gets n−1 per window.
func SlidingCounterWindow(n int, w time.Duration) Limit {
	if n <= 1 {
		return Limit{Rate: 1, Period: 2 * w, Burst: 1}
	}
	return Limit{Rate: n - 1, Period: w, Burst: 1}
}

// IsZero reports whether l sets no limit.
func (l Limit) IsZero() bool { return l.Rate <= 0 || l.Period <= 0 }

// String returns "8/s burst 10" style text.
func (l Limit) String() string {
	if l.IsZero() {
		return "no limit"
	}
	per := l.Period.String()
	switch l.Period {
	case time.Second:
		per = "s"
	case time.Minute:
		per = "min"
	case time.Hour:
		per = "h"
	}
	if l.Fixed {
		return fmt.Sprintf("%d per %s window", l.Rate, l.Period)
	}
	if l.Sliding {
		return fmt.Sprintf("%d in any %s", l.Rate, l.Period)
	}
	if l.Concurrent {
		return fmt.Sprintf("%d in flight", l.Rate)
	}
	return fmt.Sprintf("%d/%s burst %d", l.Rate, per, l.burst())
}

func (l Limit) burst() int { return max(l.Burst, 1) }

// spec is l as the model has it.
func (l Limit) spec() model.LimitSpec { return model.Spec(l.kind(), l.Rate, l.Period, l.burst()) }

// specs converts the configured limits ls for the model.
func specs(ls []Limit) []model.LimitSpec {
	out := make([]model.LimitSpec, len(ls))
	for i, l := range ls {
		out[i] = l.spec()
	}
	return out
}

// interval is the emission interval in whole microseconds, rounded up so the
// limit is never exceeded by rounding.
func (l Limit) interval() int64 {
	if l.IsZero() {
		return 0
	}
	us := l.Period.Microseconds()
	return max((us+int64(l.Rate)-1)/int64(l.Rate), 1)
}

// ErrCost is returned (wrapped) for a task whose Cost no configured limit
// of its scope can ever admit: more than a fixed or sliding window's rate
// or a concurrency limit's n, or more than
// a bucket's burst plus what Tuning.MaxHold can reserve ahead. The
// Middleware archives such a task at once, instead of deferring it
// forever.
var ErrCost = errors.New("quotagate: cost beyond what a limit can ever admit")

// capacity is the largest cost l admits at once with slots reserved up to
// hold ahead: a fixed or sliding window's rate, the requests a
// concurrency limit lets in flight, a bucket's burst plus
// hold's worth of its rate.
func (l Limit) capacity(hold time.Duration) int64 {
	if l.Fixed || l.Sliding || l.Concurrent {
		return int64(l.Rate)
	}
	return int64(l.burst()) + hold.Microseconds()/max(l.interval(), 1)
}

// ErrLimits is returned (wrapped) for a task whose scope has more limits
// configured than a scope may have (16): Resume finds a scope's limits by
// their numbered keys, and would not lift those beyond.
var ErrLimits = fmt.Errorf("quotagate: more than %d limits configured for one scope", schema.MaxLimits)

// checkCost returns an error wrapping ErrCost when the cost of t exceeds
// the capacity of a limit of s, and one wrapping ErrLimits when s has more
// limits than a scope may have.
func (g *Gate) checkCost(s Scope, t *asynq.Task) error {
	cost := int64(g.cost(t))
	ls := g.limitsOf(s)
	if len(ls) > schema.MaxLimits {
		return fmt.Errorf("%w: %d for %s", ErrLimits, len(ls), s.Provider)
	}
	for _, l := range ls {
		if c := l.capacity(g.cfg.Tuning.MaxHold); cost > c {
			return fmt.Errorf("%w: cost %d, limit %v of %s admits at most %d", ErrCost, cost, l, s.Provider, c)
		}
	}
	return nil
}
