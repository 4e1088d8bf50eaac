package quotagate

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
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
type Limit struct {
	Rate   int           // requests per Period; 0 means no limit
	Period time.Duration // the window Rate is counted over
	Burst  int           // requests admitted at once; values below 1 mean 1 (GCRA only)
	Fixed  bool          // counted in fixed windows of Period (see FixedWindow)
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
	return fmt.Sprintf("%d/%s burst %d", l.Rate, per, l.burst())
}

func (l Limit) burst() int { return max(l.Burst, 1) }

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
// of its scope can ever admit: more than a fixed window's rate, or more than
// a bucket's burst plus what Tuning.MaxHold can reserve ahead. The
// Middleware archives such a task at once, instead of deferring it
// forever.
var ErrCost = errors.New("quotagate: cost beyond what a limit can ever admit")

// capacity is the largest cost l admits at once with slots reserved up to
// hold ahead: a fixed window's rate, a bucket's burst plus hold's worth of
// its rate.
func (l Limit) capacity(hold time.Duration) int64 {
	if l.Fixed {
		return int64(l.Rate)
	}
	return int64(l.burst()) + hold.Microseconds()/max(l.interval(), 1)
}

// checkCost returns an error wrapping ErrCost when the cost of t exceeds
// the capacity of a limit of s.
func (g *Gate) checkCost(s Scope, t *asynq.Task) error {
	cost := int64(g.cost(t))
	for _, l := range g.limitsOf(s) {
		if c := l.capacity(g.cfg.Tuning.MaxHold); cost > c {
			return fmt.Errorf("%w: cost %d, limit %v of %s admits at most %d", ErrCost, cost, l, s.Provider, c)
		}
	}
	return nil
}
