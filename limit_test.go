package quotagate

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestLimit covers the limit's arithmetic: the emission interval rounds up
// (the rate is never exceeded by rounding), zero values mean no limit.
func TestLimit(t *testing.T) {
	for _, tc := range []struct {
		l        Limit
		zero     bool
		interval int64 // µs
		burst    int
		str      string
	}{
		{PerSecond(10, 3), false, 100_000, 3, "10/s burst 3"},
		{PerSecond(3, 0), false, 333_334, 1, "3/s burst 1"},
		{PerMinute(60, 1), false, 1_000_000, 1, "60/min burst 1"},
		{Limit{Rate: 5, Period: time.Hour, Burst: 2}, false, 720_000_000, 2, "5/h burst 2"},
		{Limit{Rate: 1, Period: 2 * time.Second}, false, 2_000_000, 1, "1/2s burst 1"},
		{Limit{Rate: 10_000_000, Period: time.Second}, false, 1, 1, "10000000/s burst 1"},
		{Limit{Rate: 1, Period: 500 * time.Nanosecond}, false, 1, 1, "1/500ns burst 1"},
		{Limit{Rate: math.MaxInt, Period: time.Second}, false, 1, 1, fmt.Sprintf("%d/s burst 1", math.MaxInt)},
		{Limit{}, true, 0, 1, "no limit"},
		{Limit{Rate: 10}, true, 0, 1, "no limit"},
		{Limit{Rate: -1, Period: time.Second}, true, 0, 1, "no limit"},
		{Limit{Rate: 1, Period: -time.Second}, true, 0, 1, "no limit"},
	} {
		if got := tc.l.IsZero(); got != tc.zero {
			t.Errorf("%+v.IsZero() = %v, want %v", tc.l, got, tc.zero)
		}
		if got := tc.l.interval(); got != tc.interval {
			t.Errorf("%+v.interval() = %d, want %d", tc.l, got, tc.interval)
		}
		if got := tc.l.burst(); got != tc.burst {
			t.Errorf("%+v.burst() = %d, want %d", tc.l, got, tc.burst)
		}
		if got := tc.l.String(); got != tc.str {
			t.Errorf("%+v.String() = %q, want %q", tc.l, got, tc.str)
		}
	}
}
