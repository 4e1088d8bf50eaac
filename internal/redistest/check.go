package redistest

import (
	"context"
	"strconv"
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

// CPU is the CPU time the server behind rdb has used so far: INFO cpu's
// used_cpu_user + used_cpu_sys.
func CPU(tb testing.TB, rdb *redis.Client) time.Duration {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	fields := ParseInfo(info)
	var cpu time.Duration
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		s, err := strconv.ParseFloat(fields[f], 64)
		if err != nil {
			tb.Fatalf("INFO cpu %s: %v", f, err)
		}
		cpu += time.Duration(s * 1e9)
	}
	return cpu
}
