package redistest

// Clocks of their own, and replication cut. Every server of this package
// runs on the host's clock, so a failover between them shows no clock
// skew. SkewedClock gives one server a clock offset from the host's, for
// the tests of what a skewed new master does to deadlines. CutReplication
// makes a replica miss every write from then on, deterministically, so
// that a test can lose a write in a failover on purpose.
//
// SkewedClock preloads a shim of its own (clockShim, compiled with the C
// compiler the race detector needs anyway) that adds the offset to
// CLOCK_REALTIME in clock_gettime, gettimeofday and time, through the
// system call, leaving the monotonic clocks alone. Debian's libfaketime
// (0.9.10) was the first choice and does not work here: preloaded into
// redis-server, whose jemalloc reads the clock while libfaketime is still
// resolving its own symbols, it reports "unexpected recursive calls to
// clock_gettime()" and the server never listens.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClockOffsetEnv names the variable the shim reads its offset from, in
// milliseconds (positive: ahead of the host's clock).
const ClockOffsetEnv = "REDISTEST_CLOCK_OFFSET_MS"

// clockShim is the preloaded library's source.
const clockShim = `#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ns(void) {
	static long long off;
	static int ready;
	if (!ready) {
		const char *s = getenv("REDISTEST_CLOCK_OFFSET_MS");
		off = s ? atoll(s) * 1000000LL : 0;
		ready = 1;
	}
	return off;
}

static void shift(struct timespec *ts) {
	long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
	ts->tv_sec = ns / 1000000000LL;
	ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
	int r = syscall(SYS_clock_gettime, clk, ts);
	if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) shift(ts);
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	(void)tz;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
	if (tv) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) *t = ts.tv_sec;
	return ts.tv_sec;
}
`

var shimOnce struct {
	sync.Once
	path string
	err  error
}

// SkewedClock returns the environment that runs a redis-server (any
// dynamically linked program) on the host's clock offset by offset
// (positive: ahead). It builds the shim once per test process with $CC or
// cc, and skips the test when there is no C compiler, or fails it when
// QUOTAGATE_REQUIRE_REDIS is set (apt-get install -y gcc).
func SkewedClock(tb testing.TB, offset time.Duration) []string {
	tb.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	cc = lookPath(tb, cc)
	shimOnce.Do(func() {
		dir, err := os.MkdirTemp("", "redistest-clock-")
		if err != nil {
			shimOnce.err = err
			return
		}
		src, lib := filepath.Join(dir, "clock.c"), filepath.Join(dir, "clock.so")
		if err := os.WriteFile(src, []byte(clockShim), 0o600); err != nil {
			shimOnce.err = err
			return
		}
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src).CombinedOutput(); err != nil {
			shimOnce.err = fmt.Errorf("%s: %v\n%s", cc, err, out)
			return
		}
		shimOnce.path = lib
	})
	if shimOnce.err != nil {
		tb.Fatalf("redistest: building the clock shim: %v", shimOnce.err)
	}
	return []string{"LD_PRELOAD=" + shimOnce.path, ClockOffsetEnv + "=" + strconv.FormatInt(offset.Milliseconds(), 10)}
}

// Time returns the server's TIME and the host's clock halfway through the
// round trip that read it, and the round trip's duration: the server's
// clock runs ahead of the host's by about server − host, within half the
// round trip.
func (s *Server) Time(tb testing.TB) (server, host time.Time, rtt time.Duration) {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil { // dial first: the round trip is TIME's alone
		tb.Fatalf("redistest: PING %s: %v", s.Addr, err)
	}
	before := time.Now()
	server, err := rdb.Time(ctx).Result()
	after := time.Now()
	if err != nil {
		tb.Fatalf("redistest: TIME on %s: %v", s.Addr, err)
	}
	return server, before.Add(after.Sub(before) / 2), after.Sub(before)
}

// CutReplication makes the replica s miss every write of its master from
// now on, until it is promoted: it sets a masterauth its master refuses
// (the master has no password, and a replica that sends AUTH to it fails
// its handshake) and kills its link to the master, then waits until the
// replica reports its link down and the master no longer lists it. The
// replica stays a replica in every other way: a failover may still promote
// it, without the writes made since.
func (s *Server) CutReplication(tb testing.TB, master string) {
	tb.Helper()
	s.mustOwn(tb, "CutReplication")
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	if err := rdb.ConfigSet(ctx, "masterauth", "redistest-refused").Err(); err != nil {
		tb.Fatalf("redistest: CONFIG SET masterauth on %s: %v", s.Addr, err)
	}
	if err := rdb.Do(ctx, "client", "kill", "type", "master").Err(); err != nil {
		tb.Fatalf("redistest: CLIENT KILL TYPE master on %s: %v", s.Addr, err)
	}
	m := redis.NewClient(&redis.Options{Addr: master, MaxRetries: -1, PoolSize: 1})
	defer m.Close()
	err := poll(ctx, func() (bool, string) {
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		if st := ParseInfo(info)["master_link_status"]; st != "down" {
			return false, s.Addr + " master_link_status:" + st
		}
		info, err = m.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		if n := ParseInfo(info)["connected_slaves"]; n != "0" {
			return false, master + " connected_slaves:" + n
		}
		return true, ""
	})
	if err != nil {
		tb.Fatalf("redistest: cutting the replication of %s from %s: %v", s.Addr, master, err)
	}
}
