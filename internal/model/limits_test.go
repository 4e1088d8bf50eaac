package model

import (
	"time"

	"github.com/quotagate/quotagate/internal/schema"
)

// Limit is a configured limit in the API's words (quotagate.Limit), so
// that the model's tests read as the API's and convert it as the API does
// (Spec).
type Limit struct {
	Rate                       int
	Period                     time.Duration
	Burst                      int
	Fixed, Sliding, Concurrent bool
}

func PerSecond(rate, burst int) Limit { return Limit{Rate: rate, Period: time.Second, Burst: burst} }

func FixedWindow(rate int, period time.Duration) Limit {
	return Limit{Rate: rate, Period: period, Fixed: true}
}

func SlidingWindow(n int, w time.Duration) Limit { return Limit{Rate: n, Period: w, Sliding: true} }

// Concurrent is a concurrency limit whose leases live a minute
// (quotagate.DefaultLease).
func Concurrent(n int) Limit { return Limit{Rate: n, Period: time.Minute, Concurrent: true} }

func (l Limit) IsZero() bool { return l.Rate <= 0 || l.Period <= 0 }

func (l Limit) kind() schema.LimitKind {
	return schema.KindOf(l.Fixed, l.Sliding, l.Concurrent)
}

func specOf(l Limit) LimitSpec { return Spec(l.kind(), l.Rate, l.Period, l.Burst) }

func specsOf(ls []Limit) []LimitSpec {
	out := make([]LimitSpec, len(ls))
	for i, l := range ls {
		out[i] = specOf(l)
	}
	return out
}

func limitKey(k schema.Keys, i int, l Limit) string { return k.Limit(i, l.kind()) }

// burst and interval are a GCRA limit's, as the model has them.
func (l Limit) burst() int      { return int(specOf(l).n) }
func (l Limit) interval() int64 { return specOf(l).per }
