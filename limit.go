package quotagate

import (
	"fmt"
	"time"
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
type Limit struct {
	Rate   int           // requests per Period; 0 means no limit
	Period time.Duration // the window Rate is counted over
	Burst  int           // requests admitted at once; values below 1 mean 1
}

// PerSecond returns a limit of rate requests per second with the given burst.
func PerSecond(rate, burst int) Limit { return Limit{Rate: rate, Period: time.Second, Burst: burst} }

// PerMinute returns a limit of rate requests per minute with the given burst.
func PerMinute(rate, burst int) Limit { return Limit{Rate: rate, Period: time.Minute, Burst: burst} }

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
