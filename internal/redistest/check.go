package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reading what any Redis says (a real one or a Mini): its clock, and when a
// key expires.

// Time returns Redis TIME of rdb.
func Time(tb testing.TB, rdb redis.Cmdable) time.Time {
	tb.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		tb.Fatalf("TIME: %v", err)
	}
	return now
}

// CheckExpireAt reports an error unless key expires at until, within 1 ms
// (a test of the exact instant checks it on its own).
func CheckExpireAt(tb testing.TB, rdb redis.Cmdable, key string, until time.Time) {
	tb.Helper()
	exp, err := rdb.PExpireTime(context.Background(), key).Result()
	if err != nil {
		tb.Fatalf("PEXPIRETIME %s: %v", key, err)
	}
	if d := exp.Milliseconds() - until.UnixMilli(); d < -1 || d > 1 {
		tb.Errorf("PEXPIRETIME %s = %d, want the deadline %d", key, exp.Milliseconds(), until.UnixMilli())
	}
}
